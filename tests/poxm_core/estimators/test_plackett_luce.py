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


# ---- chunks bounded at the nodes their rows need (POTEC's peaked rows) ---------------------------------

def _mixed_rows(c: int = 60, m: int = 12, seed: int = 0) -> np.ndarray:
    """Ordinary rows with every fifth one peaked as POTEC's two-stage scores are (a second label e^-600
    below the first): those need about 16 times the nodes of the others."""
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.ones(m), size=c)
    w[::5] = 1e-261
    w[::5, 0] = 1.0 - 1e-261 * (m - 1)
    return w


def test_row_nodes_are_what_a_row_alone_takes():
    from poxm_core.metrics.position_probs import ORDER, PANEL_WIDTH, _nodes, row_nodes

    w = np.vstack([_mixed_rows(10, m=7), _peaked_rows()])
    for k in (2, 5):
        got = row_nodes(w, k)
        assert [_nodes(w[i:i + 1], k, PANEL_WIDTH, ORDER)[0].shape[1] for i in range(len(w))] == got.tolist()
    assert got[0] > 10 * got[1]                                 # a peaked row against an ordinary one


def test_groups_keep_each_within_the_bound_and_cover_every_row_once():
    from poxm_core.metrics.position_probs import elements_per_row, node_bounded_groups, row_nodes

    w, k, r = _mixed_rows(), 5, 3
    c, m = w.shape
    nodes = row_nodes(w, k)
    roomy = c * elements_per_row(m, r, k, int(nodes.max()))
    assert [g.tolist() for g in node_bounded_groups(w, r, k, roomy)] == [list(range(c))]   # fits: one group
    bound = c * elements_per_row(m, r, k, 300)                  # what the chunk was sized for
    groups = node_bounded_groups(w, r, k, bound)
    assert len(groups) > 1
    assert sorted(np.concatenate(groups).tolist()) == list(range(c))
    for g in groups:
        assert len(g) == 1 or len(g) * elements_per_row(m, r, k, int(nodes[g].max())) <= bound
    # the ordinary rows are not grouped with a peaked one
    peaked = set(range(0, c, 5))
    assert all(set(g.tolist()) <= peaked or not set(g.tolist()) & peaked for g in groups)


def test_stochastic_metrics_in_bounded_groups_equal_one_chunk(monkeypatch):
    """stochastic_metrics at a small working-array bound: no quadrature call holds more than the bound at
    the nodes it uses, and the metrics equal those of one unbounded chunk within the quadrature's error."""
    import scipy.sparse as sp

    import poxm_core.metrics.slate as slate
    from poxm_core.metrics.position_probs import elements_per_row, row_nodes

    w = _mixed_rows(c=40, m=8)
    c, m = w.shape
    rng = np.random.default_rng(1)
    support = np.stack([rng.permutation(20)[:m] for _ in range(c)])
    Y = sp.csr_matrix((np.ones(2 * c), (np.repeat(np.arange(c), 2), support[:, [0, 3]].ravel())), shape=(c, 20))
    inv = 1.0 + rng.random(20)
    seen = []
    real = slate.position_sums

    def spy(pr, vals, kmax):
        r = int((np.any(vals != 0, axis=2) & (pr > 0)).sum(1).max())
        seen.append(len(pr) * elements_per_row(m, r, kmax, int(row_nodes(pr, kmax).max())))
        return real(pr, vals, kmax)

    monkeypatch.setattr(slate, "position_sums", spy)
    bound = 20 * elements_per_row(m, 2, 5, 300)       # chunks of 20 rows; a peaked row alone takes ~16
    small = slate.stochastic_metrics(Y, support, w, inv, ks=(1, 3, 5), chunk_elems=bound)
    assert len(seen) > c // 20 and max(seen) <= bound
    seen.clear()
    whole = slate.stochastic_metrics(Y, support, w, inv, ks=(1, 3, 5), chunk_elems=1 << 40)
    assert len(seen) == 1                                          # one chunk, one group
    assert small.keys() == whole.keys()
    for key in whole:
        assert small[key] == pytest.approx(whole[key], abs=1e-10), key
