"""Synthetic generator: determinism, shapes, label statistics, a learnable signal, presets/config."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from poxm_core.config.schema import SyntheticConfig
from poxm_core.data import PRESETS, make_synthetic, synthetic_from_config
from poxm_core.common.errors import PoxmInputError


def _small(seed=0, **kw):
    args = dict(n_train=1500, n_test=500, n_features=400, n_labels=60, mean_labels=3.0, seed=seed)
    args.update(kw)
    return make_synthetic(**args)


def test_determinism_by_seed():
    a, b, c = _small(seed=1), _small(seed=1), _small(seed=2)
    for s in ("train", "test"):
        assert (getattr(a, s).X != getattr(b, s).X).nnz == 0 and (getattr(a, s).Y != getattr(b, s).Y).nnz == 0
    assert (a.train.X != c.train.X).nnz > 0


def test_shapes_types_and_normalisation():
    d = _small()
    assert d.train.X.shape == (1500, 400) and d.test.X.shape == (500, 400)
    assert d.train.Y.shape == (1500, 60) and d.test.Y.shape == (500, 60)
    for m in (d.train.X, d.test.X, d.train.Y):
        assert m.format == "csr" and m.dtype == np.float32 and m.has_sorted_indices
    assert np.all(d.train.Y.data == 1.0) and d.train.Y.max() == 1.0  # no repeated labels within a row
    norms = sp.linalg.norm(d.train.X, axis=1)
    np.testing.assert_allclose(norms, 1.0, rtol=1e-5)
    assert d.train.X.min() >= 0


@pytest.mark.parametrize("mean", [1.0, 3.0, 8.5])
def test_mean_labels_close_to_target_and_rows_not_empty(mean):
    d = _small(mean_labels=mean, n_labels=200)
    k = d.train.Y.getnnz(axis=1)
    assert abs(k.mean() - mean) < 0.06 * mean + 0.02
    assert k.min() >= 1


def test_label_frequencies_are_heavy_tailed():
    d = _small(n_train=4000, n_labels=400, mean_labels=4.0)
    freq = np.sort(d.train.Y.getnnz(axis=0))[::-1]
    top_decile_share = freq[:40].sum() / freq.sum()
    assert top_decile_share > 0.4  # a uniform law gives 0.1; r^-1 over 400 labels gives ~0.6
    assert freq[0] > 20 * max(np.median(freq), 1)
    # log-log slope of frequency vs rank on the head is near -1 (the exponent)
    r = np.arange(1, 41)
    slope = np.polyfit(np.log(r), np.log(freq[:40]), 1)[0]
    assert -1.4 < slope < -0.6


def test_signal_is_learnable_by_nearest_centroid():
    d = _small(n_train=2000, n_test=500, n_features=500, n_labels=50, mean_labels=2.0)
    centroids = (d.train.Y.T @ d.train.X).toarray()  # (L, D)
    centroids /= np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)
    top1 = np.asarray((d.test.X @ centroids.T).argmax(axis=1)).ravel()
    p_at_1 = d.test.Y[np.arange(d.test.n), top1].mean()
    popular = np.asarray(d.train.Y.sum(axis=0)).ravel().argmax()
    baseline = d.test.Y[:, popular].mean()  # best constant prediction
    assert p_at_1 > 0.6 and p_at_1 > 2 * baseline
    noise = _small(n_train=2000, n_test=500, n_features=500, n_labels=50, mean_labels=2.0, signal=0.0)
    c0 = (noise.train.Y.T @ noise.train.X).toarray()
    top0 = np.asarray((noise.test.X @ c0.T).argmax(axis=1)).ravel()
    assert noise.test.Y[np.arange(noise.test.n), top0].mean() < p_at_1 / 2  # the signal is what makes it learnable


def test_presets_match_table_1():
    assert (PRESETS["eurlex"].n_train, PRESETS["eurlex"].n_test, PRESETS["eurlex"].n_features,
            PRESETS["eurlex"].n_labels, PRESETS["eurlex"].mean_labels) == (15449, 3865, 186104, 3956, 5.30)
    assert (PRESETS["wiki10"].n_train, PRESETS["wiki10"].n_labels, PRESETS["wiki10"].mean_labels) == (14146, 30938, 18.64)
    assert (PRESETS["amazon670k"].n_train, PRESETS["amazon670k"].n_test, PRESETS["amazon670k"].n_labels) == (490449, 153025, 670091)


def test_from_config_preset_overrides_then_scale():
    d = synthetic_from_config(SyntheticConfig(preset="eurlex", scale=0.01, n_features=3000), seed=0)
    assert (d.train.n, d.test.n, d.n_features, d.n_labels) == (154, 39, 3000, 3956)
    d = synthetic_from_config(SyntheticConfig(n_train=100, n_test=40, n_features=80, n_labels=12, scale=0.5), seed=0)
    assert (d.train.n, d.test.n, d.n_features, d.n_labels) == (50, 20, 80, 12)
    assert abs(d.train.Y.getnnz(axis=1).mean() - 5.0) < 1.5  # default mean_labels 5


def test_from_config_missing_sizes():
    with pytest.raises(PoxmInputError, match=r"synthetic.n_test: required without a preset \(missing: n_test, n_labels"):
        synthetic_from_config(SyntheticConfig(n_train=10, n_features=5), seed=0)


@pytest.mark.parametrize("kw, exc, frag", [
    ({"n_train": 0}, ValueError, "n_train: expected an int >= 1"),
    ({"n_labels": 1}, ValueError, "n_labels: expected an int >= 2"),
    ({"n_features": 2.5}, TypeError, "n_features: expected an int"),
    ({"mean_labels": 0.0}, ValueError, "mean_labels: expected a finite number > 0"),
    ({"signal": 1.5}, ValueError, "signal: expected a share in [0, 1]"),
    ({"seed": -1}, ValueError, "seed: expected an int >= 0"),
])
def test_bad_arguments(kw, exc, frag):
    with pytest.raises(exc) as e:
        _small(**kw)
    assert frag in str(e.value)


# Calibration of the presets against the datasets they imitate (docs/data.md, studies/synthetic_calibration.py).
# Real EUR-Lex-4K: the most frequent label is on ~7.6% of instances, the five most frequent on ~6.1% on average.

def _preset_sample(preset, scale, n_features, seed=0):
    return synthetic_from_config(SyntheticConfig(preset=preset, scale=scale, n_features=n_features), seed=seed)


def _head_shares(Y):
    freq = np.sort(Y.getnnz(axis=0))[::-1]
    return freq[0] / Y.shape[0], freq[:5].mean() / Y.shape[0]


@pytest.fixture(scope="module")
def eurlex_sample():
    return _preset_sample("eurlex", 0.2, 1000)


def test_eurlex_preset_label_statistics_match_the_real_dataset(eurlex_sample):
    d = eurlex_sample
    k = d.train.Y.getnnz(axis=1)
    assert abs(k.mean() - 5.30) < 0.15 and k.min() >= 1
    head, top5 = _head_shares(d.train.Y)
    assert 0.04 < head < 0.12 and 0.03 < top5 < 0.10  # a plain r^-1 law over 3,956 labels gives ~0.46 / ~0.24
    freq = d.train.Y.getnnz(axis=0)
    assert np.median(freq) <= 3  # a long tail: half the labels on at most ~3 of 3,090 instances


@pytest.mark.parametrize("preset, scale, band", [("wiki10", 0.1, (0.02, 0.12)), ("amazon670k", 0.01, (0.001, 0.02))])
def test_large_presets_have_a_light_head(preset, scale, band):
    d = _preset_sample(preset, scale, 3000)
    head, _ = _head_shares(d.train.Y)
    assert band[0] < head < band[1]
    assert abs(d.train.Y.getnnz(axis=1).mean() - PRESETS[preset].mean_labels) < 0.05 * PRESETS[preset].mean_labels


def test_eurlex_preset_a_linear_model_beats_the_popularity_ranking(eurlex_sample):
    d = eurlex_sample
    centroids = (d.train.Y.T @ d.train.X).toarray()  # (L, D) nearest-centroid: a linear model
    centroids /= np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)
    S = d.test.X @ centroids.T
    top5 = np.argsort(-S, axis=1, kind="stable")[:, :5]
    Yte = d.test.Y.toarray()
    p_model = np.take_along_axis(Yte, top5, axis=1).mean(axis=0)  # hit rate per rank position
    popular = np.argsort(-d.train.Y.getnnz(axis=0), kind="stable")[:5]
    p_pop = Yte[:, popular].mean(axis=0)
    assert p_pop[0] < 0.15  # the popularity ranking's P@1 stays low
    assert p_model[0] > 3 * p_pop[0] and p_model.mean() > 2 * p_pop.mean()  # P@1 and P@5


def test_recalibrating_a_preset_changes_the_prepare_cache_key(monkeypatch):
    import dataclasses

    from poxm_core.config.schema import load_config
    from poxm_core.data import synthetic
    from poxm_core.prepare.cache import cache_keys
    cfg = load_config(data={"name": "s", "datasets": [{"name": "synthetic", "synthetic": {"preset": "eurlex", "scale": 0.01},
                                                       "variants": [{"name": "A", "alpha": 0.5}]}],
                            "methods": {"dm": {}}})
    before = cache_keys(cfg, "synthetic", 0).data[1]
    assert cache_keys(cfg, "synthetic", 0).data[1] == before
    moved = dict(synthetic.PRESETS, eurlex=dataclasses.replace(synthetic.PRESETS["eurlex"], signal=0.5))
    monkeypatch.setattr(synthetic, "PRESETS", moved)
    monkeypatch.setattr("poxm_core.prepare.cache.PRESETS", moved)
    assert cache_keys(cfg, "synthetic", 0).data[1] != before
