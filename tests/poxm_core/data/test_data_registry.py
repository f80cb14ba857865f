"""Dataset registry: entries, lookup errors, file discovery, shape checks, real Bibtex/Delicious."""
from __future__ import annotations

import numpy as np
import pytest

from poxm_core.config.schema import DatasetConfig, SyntheticConfig, default_data_root
from poxm_core.data import DATASETS, DatasetSpec, get_spec, load_dataset, propensity_params, register_dataset
from poxm_core.data.registry import KnownShape, PaperVariant
from poxm_core.common.errors import PoxmInputError

DATA = default_data_root()
VARIANTS = [{"name": "A", "alpha": 0.2, "beta": 0.0, "T": 2.0}]


def _dcfg(name, **kw):
    return DatasetConfig(name=name, variants=VARIANTS, **kw)


def _xc(path, rows, d, L):
    """Write an XC BoW file whose rows are (labels, features) lists."""
    lines = [f"{len(rows)} {d} {L}"]
    lines += [",".join(map(str, labs)) + " " + " ".join(f"{j}:1" for j in feats) for labs, feats in rows]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def toy_spec(monkeypatch):
    spec = DatasetSpec(name="toy", folder="toy", description="test", N_train=3, N_test=2, D=4, L=3,
                       train_files=("toy_train.txt",), test_files=("toy_test.txt",))
    monkeypatch.setitem(DATASETS, "toy", spec)
    return spec


def _toy_files(folder, n_test=2):
    folder.mkdir(exist_ok=True)
    _xc(folder / "toy_train.txt", [([0], [1]), ([1, 2], [0, 3]), ([], [2])], 4, 3)
    _xc(folder / "toy_test.txt", [([2], [1])] * n_test, 4, 3)


def test_paper_entries():
    assert {"bibtex", "delicious", "eurlex-4k", "wiki10-31k", "amazon-670k", "synthetic"} <= set(DATASETS)
    e = get_spec("eurlex-4k")
    assert (e.N_train, e.N_test, e.D, e.L, e.A, e.B) == (15449, 3865, 186104, 3956, 0.55, 1.5)
    xc = [s for s in e.known_shapes() if s.source == "XC BoW release"][0]
    assert (xc.N_train, xc.N_test, xc.D, xc.L) == (15539, 3809, 5000, 3993)
    assert e.variants == (PaperVariant("A", 0.2, 0, 2), PaperVariant("B", 0.2, 1.5, 5), PaperVariant("C", 0.2, 4, 18))
    w = get_spec("wiki10-31k")
    assert (w.N_train, w.N_test, w.D, w.L, w.A, w.B) == (14146, 6616, 101938, 30938, 0.5, 0.4)
    assert w.variants == (PaperVariant("A", 0.1, 0, 1),)
    a = get_spec("amazon-670k")
    assert (a.N_train, a.N_test, a.D, a.L, a.A, a.B) == (490449, 153025, 135909, 670091, 0.6, 2.6)
    assert a.variants == (PaperVariant("A", 0.2, 0, 2),)
    assert (get_spec("bibtex").D, get_spec("bibtex").L, get_spec("delicious").L) == (1836, 159, 983)


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_every_entry_is_well_formed(name):
    spec = get_spec(name)
    assert spec.name == name and spec.A > 0 and spec.B > 0 and spec.variants
    for v in spec.variants:  # the config schema accepts every registered variant
        DatasetConfig(name=name, variants=[vars(v)])
    assert spec.reader is not None or spec.train_files


def test_unknown_name_lists_nearest_and_valid():
    with pytest.raises(PoxmInputError, match=r"unknown dataset 'bibtx' \(did you mean 'bibtex'\?\); registered: .*amazon-670k"):
        get_spec("bibtx")


def test_register_dataset_rejects_duplicates_and_wrong_types(monkeypatch):
    monkeypatch.setattr("poxm_core.data.registry.DATASETS", dict(DATASETS))
    from poxm_core.data import registry
    spec = DatasetSpec(name="new-one", folder="x", description="d")
    assert register_dataset(spec) is spec and registry.DATASETS["new-one"] is spec
    with pytest.raises(ValueError, match="already registered"):
        register_dataset(spec)
    with pytest.raises(TypeError, match="spec: expected a DatasetSpec"):
        register_dataset({"name": "x"})
    with pytest.raises(ValueError, match="propensity A and B"):
        DatasetSpec(name="bad", folder="x", description="d", A=0.0)


def test_propensity_params_overrides():
    assert propensity_params(_dcfg("wiki10-31k")) == (0.5, 0.4)
    assert propensity_params(_dcfg("amazon-670k", propensity_A=0.7)) == (0.7, 2.6)
    assert propensity_params(_dcfg("bibtex", propensity_A=0.4, propensity_B=1.0)) == (0.4, 1.0)


@pytest.mark.parametrize("name, shape", [("bibtex", (4880, 2515, 1836, 159)), ("delicious", (12920, 3185, 500, 983))])
def test_real_datasets_load(name, shape):
    if not (DATA / name).is_dir():
        pytest.skip(f"{DATA / name} absent")
    data = load_dataset(_dcfg(name), DATA)
    s = data.stats()
    assert (s["N_train"], s["N_test"], s["D"], s["L"]) == shape and data.name == name
    assert data.train.X.dtype == np.float32 and np.all(data.train.Y.data == 1.0)


def test_load_from_data_root_and_from_path(tmp_path, toy_spec):
    _toy_files(tmp_path / "toy")
    d = load_dataset(_dcfg("toy"), tmp_path)
    np.testing.assert_array_equal(d.train.Y.toarray(), [[1, 0, 0], [0, 1, 1], [0, 0, 0]])
    assert d.test.n == 2 and d.n_features == 4
    elsewhere = tmp_path / "elsewhere"
    _toy_files(elsewhere)
    assert load_dataset(_dcfg("toy", path=str(elsewhere)), tmp_path / "nothing").train.n == 3
    # a path to the training file: the test file is its 'test' twin
    assert load_dataset(_dcfg("toy", path=str(elsewhere / "toy_train.txt")), tmp_path).test.n == 2


def test_wrong_shape_names_file_expected_and_found(tmp_path, toy_spec):
    _toy_files(tmp_path / "toy", n_test=1)
    with pytest.raises(PoxmInputError) as e:
        load_dataset(_dcfg("toy"), tmp_path)
    msg = str(e.value)
    assert str(tmp_path / "toy" / "toy_test.txt") in msg and "found N_train=3, N_test=1, D=4, L=3" in msg
    assert "expected N_train=3, N_test=2, D=4, L=3" in msg and "\n" not in msg


def test_missing_folder_or_files(tmp_path, toy_spec):
    with pytest.raises(PoxmInputError, match=r"toy: dataset 'toy' not found .*POXM_DATA_ROOT"):
        load_dataset(_dcfg("toy"), tmp_path)
    (tmp_path / "toy").mkdir()
    with pytest.raises(PoxmInputError, match=r"no data files of 'toy' found; expected one of: toy_train.txt/toy_test.txt"):
        load_dataset(_dcfg("toy"), tmp_path)
    _xc(tmp_path / "toy" / "toy_train.txt", [([0], [1])] * 3, 4, 3)
    with pytest.raises(PoxmInputError, match=r"toy_test.txt: file not found \(XC BoW layout"):
        load_dataset(_dcfg("toy"), tmp_path)


def test_split_sparse_and_text_layouts(tmp_path, toy_spec):
    f = tmp_path / "toy"
    f.mkdir()
    (f / "trn_X_Xf.txt").write_text("3 4\n1:1\n0:1 3:1\n2:1\n")
    (f / "trn_X_Y.txt").write_text("3 3\n0:1\n1:1 2:1\n\n")
    (f / "tst_X_Xf.txt").write_text("2 4\n1:1\n1:1\n")
    (f / "tst_X_Y.txt").write_text("2 3\n2:1\n2:1\n")
    d = load_dataset(_dcfg("toy"), tmp_path)
    np.testing.assert_array_equal(d.train.Y.toarray(), [[1, 0, 0], [0, 1, 1], [0, 0, 0]])
    g = tmp_path / "text"
    g.mkdir()
    (g / "train_texts.txt").write_text("red apple\ngreen pear\nred cherry\n")
    (g / "train_labels.txt").write_text("fruit red\nfruit\ncherry red\n")
    (g / "test_texts.txt").write_text("red pear\nred\n")
    (g / "test_labels.txt").write_text("fruit\nred\n")
    d = load_dataset(_dcfg("toy", path=str(g)), tmp_path)  # text layout: D is the vectoriser's, not checked
    assert d.n_labels == 3 and d.train.n == 3 and d.test.n == 2


def _bow_of_shape(folder, n_train, n_test, d, L):
    folder.mkdir()
    for name, n in (("eurlex_train.txt", n_train), ("eurlex_test.txt", n_test)):
        (folder / name).write_text(f"{n} {d} {L}\n" + f"{L - 1} {d - 1}:1\n" * n)


@pytest.mark.parametrize("shape, ok", [
    ((15539, 3809, 5000, 3993), True),     # the XC BoW release
    ((15449, 3865, 186104, 3956), True),   # the paper's (AttentionXML TF-IDF) shape
    ((15539, 3809, 5000, 3956), False),
    ((15539, 3808, 5000, 3993), False),
])
def test_eurlex_accepts_either_known_shape(tmp_path, shape, ok):
    _bow_of_shape(tmp_path / "eurlex-4k", *shape)
    if ok:
        d = load_dataset(_dcfg("eurlex-4k"), tmp_path)
        assert (d.train.n, d.test.n, d.n_features, d.n_labels) == shape
    else:
        with pytest.raises(PoxmInputError, match=r"'eurlex-4k' has unexpected shape.*\(paper Table 1\) or .*\(XC BoW release\)"):
            load_dataset(_dcfg("eurlex-4k"), tmp_path)


def test_known_shape_ignores_text_vocabulary():
    s = KnownShape("x", 10, 5, 100, 7)
    assert s.mismatches({"N_train": 10, "N_test": 5, "D": 3, "L": 7}, "text") == []
    assert s.mismatches({"N_train": 10, "N_test": 5, "D": 3, "L": 7}, "xc_bow") == ["D"]


def test_synthetic_through_load_dataset(tmp_path):
    syn = SyntheticConfig(n_train=60, n_test=20, n_features=50, n_labels=10, mean_labels=2.0)
    d = load_dataset(_dcfg("synthetic", synthetic=syn), tmp_path, seed=3)
    assert (d.train.n, d.test.n, d.n_features, d.n_labels) == (60, 20, 50, 10) and d.name == "synthetic"
    d2 = load_dataset(_dcfg("synthetic", synthetic=syn), tmp_path, seed=3)
    assert (d.train.X != d2.train.X).nnz == 0
    with pytest.raises(PoxmInputError, match="synthetic: required"):
        load_dataset(_dcfg("synthetic"), tmp_path)
