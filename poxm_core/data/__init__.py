"""Extreme multi-label data: containers, readers, the dataset registry, synthetic data, propensities."""
from poxm_core.data.propensity import inverse_propensities, label_propensities
from poxm_core.data.readers import find_split_sparse, read_split_sparse, read_split_sparse_dir, read_xc_bow
from poxm_core.data.svmlight_npz import read_npz_pair, read_svmlight, read_xy_npz, save_xy_npz
from poxm_core.data.text_reader import TextTfidf, read_text_tfidf
from poxm_core.data.registry import (DATASETS, DatasetSpec, KnownShape, PaperVariant, get_spec, load_dataset,
                                     propensity_params, register_dataset, spec_for)
from poxm_core.data.synthetic import PRESETS, SyntheticPreset, make_synthetic, synthetic_from_config
from poxm_core.data.types import XMCData, XMCSplit

__all__ = [
    "XMCData", "XMCSplit",
    "read_xc_bow", "read_split_sparse", "read_split_sparse_dir", "find_split_sparse", "read_text_tfidf", "TextTfidf",
    "read_svmlight", "read_xy_npz", "read_npz_pair", "save_xy_npz", "spec_for",
    "DATASETS", "DatasetSpec", "KnownShape", "PaperVariant", "register_dataset", "get_spec", "load_dataset",
    "propensity_params",
    "PRESETS", "SyntheticPreset", "make_synthetic", "synthetic_from_config",
    "label_propensities", "inverse_propensities",
]
