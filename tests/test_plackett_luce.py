"""Position probabilities of Plackett-Luce by quadrature (poxm_core/metrics/position_probs.py) against
enumeration of every ordered prefix, on tiny cases that include peaked, flat, zero and short rows."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from poxm_core.metrics.position_probs import position_sums


def _enumerate(w: np.ndarray, k: int) -> np.ndarray:
    """P[j, l] = P(column j at position l+1): every ordered prefix of length min(k, m+) of the
    positive columns, its probability prod_l w_{y_l} / (mass not yet drawn) with the remaining mass
    summed directly (no 1 - cumsum cancellation on peaked rows)."""
    m = len(w)
    pos = [j for j in range(m) if w[j] > 0]
    P = np.zeros((m, k))
    for perm in itertools.permutations(pos, min(k, len(pos))):
        p, left = 1.0, set(pos)
        for j in perm:
            p *= w[j] / sum(w[i] for i in left)
            left.discard(j)
        for l, j in enumerate(perm):
            P[j, l] += p
    return P


def _rows(seed: int, scale: float, c: int = 4, m: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = np.exp(scale * rng.normal(size=(c, m)))
    w[0, 2] = 0.0                 # a zero-probability column
    w[1, 3:] = 0.0                # a row with fewer positive columns than k
    return w / w.sum(1, keepdims=True)


@pytest.mark.parametrize("scale", [0.1, 1.0, 3.0, 10.0, 40.0])
def test_every_position_matches_enumeration(scale):
    w = _rows(int(scale * 10), scale)
    c, m = w.shape
    got = position_sums(w, np.eye(m)[None].repeat(c, 0), 5)        # (c, 5, m): values = one-hot
    want = np.stack([_enumerate(row, 5) for row in w]).transpose(0, 2, 1)
    assert np.abs(got - want).max() < 1e-10
    assert got[1, 3:].sum() == pytest.approx(0.0, abs=1e-12)        # positions past the 3 positive columns
    assert got[:, 0] == pytest.approx(w)                              # position 1 is pi exactly


def test_weighted_sums_of_few_columns():
    # values non-zero on a few columns (the relevant labels), two value vectors at once
    rng = np.random.default_rng(3)
    w = rng.dirichlet(np.ones(6) * 0.5, size=5)
    vals = np.zeros((5, 6, 2))
    vals[:, 1, 0], vals[:, 4, 0] = 1.0, 1.0
    vals[:, 4, 1], vals[0, 0, 1] = 2.5, 1.5
    got = position_sums(w, vals, 4)
    want = np.stack([np.einsum("jl,jf->lf", _enumerate(w[i], 4), vals[i]) for i in range(5)])
    assert got == pytest.approx(want, abs=1e-11)
    # a row whose values are all zero sums to zero
    assert position_sums(w[:1], np.zeros((1, 6, 1)), 3) == pytest.approx(np.zeros((1, 3, 1)))


def test_torch_quadrature_equals_numpy_quadrature():
    """position_sums_torch (evaluation on a GPU) is the NumPy quadrature to round-off, zero-probability
    columns, rows with fewer positive columns than k and k = 1 included."""
    import torch

    from poxm_core.metrics.position_probs import position_sums, position_sums_torch

    rng = np.random.default_rng(0)
    for c, m, kmax, zero in [(50, 20, 5, 0.3), (30, 100, 5, 0.0), (20, 7, 3, 0.5), (10, 4, 5, 0.2), (40, 50, 1, 0.0)]:
        p = rng.gamma(0.3, size=(c, m))
        p[rng.random((c, m)) < zero] = 0
        p[0] = 0
        p[0, 0] = 1.0                       # one sure label: only position 1
        p /= p.sum(1, keepdims=True)
        hit = rng.random((c, m)) < 0.1
        v = np.stack([hit, hit * rng.random((c, m)) * 5], axis=2).astype(np.float64)
        a = position_sums(p, v, kmax)
        b = position_sums_torch(torch.tensor(p), torch.tensor(v), kmax).numpy()
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)
