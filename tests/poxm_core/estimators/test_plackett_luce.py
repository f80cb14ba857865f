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


# ---- peaked rows: probabilities down to float64's smallest denormal ----------------------------------
# A trained policy can put its k-th largest probability below 1e-307 (denormal even): the quadrature's
# upper end log(log(k/TAIL)/pi_(k)) used to overflow (OverflowError on `int(ceil(inf))`) and its nodes
# t = e^x past e^709.8 to be inf. The reference here is independent of the quadrature: every float64 is
# an integer multiple of 2^-1074, so on the integers a_j = pi_j 2^1074 the mass not yet drawn is an exact
# Python integer (no cancellation however peaked the row), a prefix's probability is a product of at most
# k correctly rounded divisions a_y / left, and the sums over prefixes are correctly rounded (math.fsum):
# ~1e-16 from exact rational arithmetic (fractions.Fraction, which takes ~500 times as long).

def _enumerate_exact(w: np.ndarray, k: int) -> np.ndarray:
    """P[j, l] = P(column j at position l+1) of Plackett-Luce on w (normalised exactly), by enumeration."""
    import math

    pos = [j for j in range(len(w)) if w[j] > 0]
    ratios = {j: float(w[j]).as_integer_ratio() for j in pos}          # (n, d), d a power of 2 <= 2^1074
    a = {j: n * ((1 << 1074) // d) for j, (n, d) in ratios.items()}
    total = sum(a.values())
    terms = [[[] for _ in range(k)] for _ in w]
    for perm in itertools.permutations(pos, min(k, len(pos))):
        p, left = 1.0, total
        for j in perm:
            p *= a[j] / left
            left -= a[j]
        for l, j in enumerate(perm):
            terms[j][l].append(p)
    return np.array([[math.fsum(x) for x in row] for row in terms])


def _peaked_rows() -> np.ndarray:
    """Rows of 7 columns whose positive probabilities span float64's range; the first entry is set to
    1 - (sum of the others) so that each row sums to 1 up to one rounding."""
    tiny = 5e-324                                                    # 2^-1074, the smallest denormal
    rows = [
        [1.0, 1e-15, 1e-200, 1e-310, tiny, 0.0, 0.0],               # 1 - 1e-15, then down to 2^-1074
        [1.0, 1e-12, 1e-15, 1e-200, 1e-300, 1e-310, tiny],
        [1.0, 0.0, 1e-300, 1e-305, 1e-308, 2e-320, tiny],            # the 2nd..5th largest all < 1e-299
        [1.0, 0.5, 1e-305, 1e-310, 3e-322, tiny, 0.0],              # two labels of 0.5 carry the mass
        [1.0, 0.3, 1e-100, 1e-100, 1e-309, 1e-309, tiny],           # ties among the tiny ones
        [1.0, tiny, tiny, tiny, 0.0, 0.0, 0.0],                      # only denormals after the first
        [1.0, 1e-310, 0.0, 0.0, 0.0, 0.0, 0.0],                      # fewer positive columns than k
        [1.0, 1e-3, 2e-3, 1e-307, 1e-306, 0.0, 1e-4],                # ordinary head, extreme tail
    ]
    w = np.array(rows)
    w[:, 0] = 0.0
    w[:, 0] = 1.0 - w.sum(1)
    return w


@pytest.mark.parametrize("kmax", [1, 3, 5])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_peaked_rows_down_to_denormals_match_exact_enumeration(kmax, backend):
    """No exception, and every position probability within 1e-9 of exact enumeration (a label of
    probability 1e-310 is at position 4 with probability ~1 when it is the 4th largest)."""
    def run(w, vals):
        if backend == "numpy":
            return position_sums(w, vals, kmax)
        import torch

        from poxm_core.metrics.position_probs import position_sums_torch

        return position_sums_torch(torch.tensor(w), torch.tensor(vals), kmax).numpy()

    w = _peaked_rows()
    c, m = w.shape
    vals = np.eye(m)[None].repeat(c, 0)                              # values one-hot: every column's P
    got = run(w, vals)                                               # (c, kmax, m)
    assert np.isfinite(got).all()
    want = np.stack([_enumerate_exact(row, kmax) for row in w]).transpose(0, 2, 1)
    assert np.abs(got - want).max() < 1e-9
    npos = (w > 0).sum(1)
    for i in range(c):
        for l in range(kmax):   # each position holds exactly one label while enough labels exist, else none
            assert got[i, l].sum() == pytest.approx(1.0 if l < npos[i] else 0.0, abs=1e-9)
    # a row alone (its own number of panels, its own scale) as within the chunk
    for i in range(c):
        assert np.abs(run(w[i:i + 1], vals[i:i + 1])[0] - want[i]).max() < 1e-9
