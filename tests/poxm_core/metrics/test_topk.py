"""Chunked top-k against a dense reference (with exact ties), and a 670k-label run with tiny chunks."""
import numpy as np
import pytest
import torch

from poxm_core.model import chunked_topk
from poxm_core.model import topk as topk_mod


def _reference(Z, W, b, k):
    S = Z.astype(np.float64) @ W.T.astype(np.float64) + b
    ids = np.arange(W.shape[0])
    idx = np.stack([np.lexsort((ids, -s))[:k] for s in S])
    return idx, np.take_along_axis(S, idx, 1)


@pytest.mark.parametrize("chunk_mb", [256, 1e-3, 1e-4, 2e-5])
@pytest.mark.parametrize("k", [1, 5, 37])
def test_matches_dense_reference_with_ties(chunk_mb, k):
    rng = np.random.default_rng(0)
    # small integers: scores are exact in float32 and many of them tie
    Z = rng.integers(-1, 2, (13, 3)).astype(np.float32)
    W = rng.integers(-2, 3, (37, 3)).astype(np.float32)
    b = rng.integers(0, 2, 37).astype(np.float32)
    idx, sc = chunked_topk(Z, W, b, k, chunk_mb=chunk_mb)
    ridx, rsc = _reference(Z, W, b, k)
    assert idx.dtype == np.int64 and sc.dtype == np.float32 and idx.shape == (13, k)
    np.testing.assert_array_equal(idx, ridx)
    np.testing.assert_array_equal(sc, rsc.astype(np.float32))


def test_random_scores():
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(50, 8)).astype(np.float32)
    W = rng.normal(size=(300, 8)).astype(np.float32)
    b = rng.normal(size=300).astype(np.float32)
    idx, sc = chunked_topk(Z, W, b, 10, chunk_mb=1e-3)
    ridx, rsc = _reference(Z, W, b, 10)
    np.testing.assert_array_equal(idx, ridx)
    np.testing.assert_allclose(sc, rsc, rtol=1e-5, atol=1e-5)


def test_670k_labels_small_chunk_no_n_by_L_block(monkeypatch):
    n, d, L, k = 3, 4, 670_000, 7
    rng = np.random.default_rng(2)
    Z = rng.normal(size=(n, d)).astype(np.float32)
    W = rng.normal(size=(L, d)).astype(np.float32)
    b = np.zeros(L, np.float32)
    W[123_456] = 1000 * Z[0] / np.linalg.norm(Z[0]) ** 2  # a clear winner for row 0 in a late label chunk
    largest = []
    real = torch.addmm

    def spy(bias, a, w):
        out = real(bias, a, w)
        largest.append(out.numel())
        return out

    monkeypatch.setattr(topk_mod.torch, "addmm", spy)
    idx, sc = chunked_topk(Z, W, b, k, chunk_mb=1)
    assert max(largest) * 4 <= 2**20 < n * L * 4      # every score block within the 1 MiB budget
    assert len(largest) > 1
    assert idx[0, 0] == 123_456
    ridx, rsc = _reference(Z, W, b, k)
    np.testing.assert_array_equal(idx, ridx)
    np.testing.assert_allclose(sc, rsc, rtol=1e-5, atol=1e-4)


def test_input_checks():
    Z, W, b = np.zeros((2, 3), np.float32), np.zeros((5, 3), np.float32), np.zeros(5, np.float32)
    with pytest.raises(ValueError, match="k must be"):
        chunked_topk(Z, W, b, 6)
    with pytest.raises(TypeError, match="k"):
        chunked_topk(Z, W, b, 2.0)
    with pytest.raises(ValueError, match="disagree"):
        chunked_topk(Z, W[:, :2], b, 2)
    with pytest.raises(ValueError, match="chunk_mb"):
        chunked_topk(Z, W, b, 2, chunk_mb=0)
    # all-equal scores: ids 0..k-1 in order
    idx, _ = chunked_topk(Z, W, b, 3, chunk_mb=1e-5)
    np.testing.assert_array_equal(idx, [[0, 1, 2], [0, 1, 2]])
