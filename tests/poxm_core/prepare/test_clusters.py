"""Label clusters (poxm_core/prepare/clusters.py): k-means of the logging model's label rows."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from poxm_core.common.errors import PoxmInputError
from poxm_core.prepare import clusters as cl


def _blobs(seed: int = 0, per: int = 30, d: int = 8, k: int = 4):
    """k well-separated directions (rows of different norms): the true grouping is known."""
    rng = np.random.default_rng(seed)
    centres = np.linalg.qr(rng.normal(size=(d, d)))[0][:k] * 5.0
    truth = np.repeat(np.arange(k), per)
    E = centres[truth] + rng.normal(scale=0.3, size=(k * per, d))
    E *= rng.uniform(0.2, 3.0, size=(k * per, 1))          # norms vary: the direction decides
    return E.astype(np.float32), truth


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(a[:, None] == a[None, :], b[:, None] == b[None, :])


def test_recovers_separated_groups_whatever_the_norms():
    E, truth = _blobs()
    ids = cl.fit_label_clusters(E, 4, seed=3)
    assert ids.dtype == np.int64 and ids.shape == truth.shape
    assert _same_partition(ids, truth)


def test_deterministic_given_the_seed_and_every_cluster_used():
    rng = np.random.default_rng(1)
    E = rng.normal(size=(200, 5))
    a = cl.fit_label_clusters(E, 17, seed=7)
    assert np.array_equal(a, cl.fit_label_clusters(E, 17, seed=7))
    assert set(np.unique(a)) == set(range(17))
    assert not np.array_equal(a, cl.fit_label_clusters(E, 17, seed=8))


def test_assignment_is_a_lloyd_fixed_point():
    """Each label sits in the cluster whose (normalised) centroid is nearest: computed directly here."""
    rng = np.random.default_rng(2)
    E = rng.normal(size=(120, 4))
    ids = cl.fit_label_clusters(E, 6, seed=0, iters=200)
    U = E / np.linalg.norm(E, axis=1, keepdims=True)
    C = np.stack([U[ids == c].mean(axis=0) for c in range(6)])
    d = ((U[:, None, :] - C[None]) ** 2).sum(-1)
    assert np.array_equal(np.argmin(d, axis=1), ids)


def test_bad_k_is_one_line():
    with pytest.raises(PoxmInputError, match=r"k=0"):
        cl.fit_label_clusters(np.ones((3, 2)), 0, seed=0)
    with pytest.raises(PoxmInputError, match=r"\[1, 3\]"):
        cl.fit_label_clusters(np.ones((3, 2)), 4, seed=0)


def test_candidate_clusters_reads_the_label_map():
    clusters = np.array([2, 0, 1, 1, 0])
    cand = np.array([[4, 0, 3], [1, 2, 0]])
    assert cl.candidate_clusters(clusters, cand).tolist() == [[0, 2, 1], [0, 1, 2]]


def test_label_clusters_cached_content_addressed(tmp_path):
    E, _ = _blobs(seed=4)
    prep = SimpleNamespace(W=E, meta={"candidates": {"key": {"model": "abc123"}}})
    cl._MEMO.clear()
    ids = cl.label_clusters(prep, 4, seed=1, cache_dir=tmp_path)
    (d,) = list((tmp_path / "clusters").iterdir())
    assert json.loads((d / "manifest.json").read_text())["key"] == cl.cluster_key("abc123", 4, 1)
    assert np.array_equal(np.load(d / "clusters.npy"), ids)
    cl._MEMO.clear()                                    # a new process: read back from the cache
    assert np.array_equal(cl.label_clusters(prep, 4, seed=1, cache_dir=tmp_path), ids)
    cl._MEMO.clear()
    cl.label_clusters(prep, 3, seed=1, cache_dir=tmp_path)   # another k: another level
    assert len(list((tmp_path / "clusters").iterdir())) == 2


def test_label_clusters_default_to_the_cache_the_data_came_from(tmp_path):
    E, _ = _blobs(seed=5)
    model_dir = tmp_path / "model" / "m0"
    prep = SimpleNamespace(W=E, meta={"candidates": {"key": {"model": "m0"}}, "dirs": {"model": str(model_dir)}})
    cl._MEMO.clear()
    ids = cl.label_clusters(prep, 4, seed=2)
    (d,) = list((tmp_path / "clusters").iterdir())
    assert np.array_equal(np.load(d / "clusters.npy"), ids)
