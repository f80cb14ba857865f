"""Slates without replacement from rho: distributions (chi-square), q_j and rho_j by hand, rewards."""
import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from poxm_core.bandit import simulate_log, validation_split
from poxm_core.prepare.prepared import VariantPolicy


def _policy(n, rho_row, labels):
    rho_row = np.asarray(rho_row, float)
    return VariantPolicy(cand=np.tile(np.asarray(labels, np.int64), (n, 1)), rho=np.tile(rho_row, (n, 1)))


def _empty_Y(n, L):
    return sp.csr_matrix((n, L), dtype=np.float32)


def test_validation_split():
    fit, val = validation_split(1000, 0.1, seed=0)
    assert val.size == 100 and fit.size == 900 and fit.dtype == np.int64
    assert np.all(np.diff(fit) > 0) and np.all(np.diff(val) > 0)
    np.testing.assert_array_equal(np.sort(np.concatenate([fit, val])), np.arange(1000))
    f2, v2 = validation_split(1000, 0.1, seed=0)
    np.testing.assert_array_equal(v2, val)
    assert not np.array_equal(validation_split(1000, 0.1, seed=1)[1], val)
    assert validation_split(3, 0.01, 0)[1].size == 1 and validation_split(3, 0.99, 0)[0].size == 1
    with pytest.raises(ValueError, match="frac"):
        validation_split(10, 1.0, 0)
    with pytest.raises(ValueError, match="n_train"):
        validation_split(1, 0.5, 0)


def test_ordered_pairs_follow_sequential_sampling():
    """P(y1 = a, y2 = b) = rho_a rho_b / (1 - rho_a): chi-square over all ordered pairs."""
    rho = np.array([0.5, 0.25, 0.15, 0.1])
    labels = [10, 20, 30, 40]
    n = 40_000
    log = simulate_log(_policy(n, rho, labels), _empty_Y(n, 50), np.arange(n), ell=2, seed=0)
    # first position ~ rho
    first = np.searchsorted(labels, log.actions[:, 0])
    assert stats.chisquare(np.bincount(first, minlength=4), n * rho).pvalue > 1e-3
    # second position given first = label 10 ~ rho_b / (1 - rho_a)
    sel = log.actions[:, 0] == 10
    second = np.searchsorted(labels, log.actions[sel, 1])
    cond = rho[1:] / (1 - rho[0])
    assert stats.chisquare(np.bincount(second, minlength=4)[1:], sel.sum() * cond).pvalue > 1e-3
    # all 12 ordered pairs
    pairs = list(itertools.permutations(range(4), 2))
    expected = np.array([rho[a] * rho[b] / (1 - rho[a]) for a, b in pairs])
    code = {p: i for i, p in enumerate(pairs)}
    obs = np.bincount([code[(a, b)] for a, b in zip(first, np.searchsorted(labels, log.actions[:, 1]))],
                      minlength=12)
    assert stats.chisquare(obs, n * expected).pvalue > 1e-3


def test_third_position_conditional():
    rho = np.array([0.4, 0.3, 0.2, 0.1])
    n = 30_000
    log = simulate_log(_policy(n, rho, [0, 1, 2, 3]), _empty_Y(n, 4), np.arange(n), ell=3, seed=5)
    sel = (log.actions[:, 0] == 0) & (log.actions[:, 1] == 1)
    cond = rho[2:] / (1 - rho[0] - rho[1])
    obs = np.bincount(log.actions[sel, 2], minlength=4)[2:]
    assert stats.chisquare(obs, sel.sum() * cond).pvalue > 1e-3


def test_q_rho_cand_pos_rewards_by_hand():
    rng = np.random.default_rng(0)
    n, K, L, ell = 50, 8, 30, 5
    cand = np.stack([rng.choice(L, K, replace=False) for _ in range(n)])
    rho = rng.dirichlet(np.ones(K) * 0.5, size=n)
    order = np.lexsort((cand, -rho), axis=-1)
    pol = VariantPolicy(np.take_along_axis(cand, order, 1), np.take_along_axis(rho, order, 1))
    Y = sp.random(n, L, density=0.2, random_state=1, format="csr", dtype=np.float32)
    Y.data[:] = 1.0
    rows = np.array([3, 7, 8, 20, 49])
    log = simulate_log(pol, Y, rows, ell, seed=11)
    log.validate_against(pol.cand)
    Yd = Y.toarray()
    for t, i in enumerate(rows):
        lookup = dict(zip(pol.cand[i], pol.rho[i]))
        used = 0.0
        for j in range(ell):
            y = log.actions[t, j]
            assert log.rho[t, j] == pytest.approx(lookup[y], rel=1e-12)
            assert log.q[t, j] == pytest.approx(lookup[y] / (1 - used), rel=1e-9)
            assert pol.cand[i, log.cand_pos[t, j]] == y
            assert log.rewards[t, j] == Yd[i, y]
            used += lookup[y]
    assert log.q[:, 0] == pytest.approx(log.rho[:, 0], rel=1e-12)
    np.testing.assert_array_equal(log.instance, rows)
    assert log.rewards.dtype == np.float32 and log.q.dtype == np.float64


def test_reproducible_and_row_independent():
    rng = np.random.default_rng(3)
    n, K = 40, 10
    pol = VariantPolicy(np.tile(np.arange(K), (n, 1)), rng.dirichlet(np.ones(K), size=n))
    pol = VariantPolicy(*[np.take_along_axis(a, np.lexsort((pol.cand, -pol.rho), axis=-1), 1)
                          for a in (pol.cand, pol.rho)])
    Y = _empty_Y(n, K)
    a = simulate_log(pol, Y, np.arange(n), 5, seed=1)
    b = simulate_log(pol, Y, np.arange(n), 5, seed=1)
    np.testing.assert_array_equal(a.actions, b.actions)
    part = simulate_log(pol, Y, np.arange(20, 40), 5, seed=1)
    np.testing.assert_array_equal(part.actions, a.actions[20:])
    assert not np.array_equal(simulate_log(pol, Y, np.arange(n), 5, seed=2).actions, a.actions)


def test_peaked_rho_keeps_q_in_range():
    rho = np.array([1 - 3e-15, 1e-15, 1e-15, 1e-15])
    log = simulate_log(_policy(5, rho, [0, 1, 2, 3]), _empty_Y(5, 4), np.arange(5), 3, seed=0)
    assert np.all(log.q <= 1.0) and np.all(log.q > 0)
    np.testing.assert_allclose(log.q[:, 1:], 1 / 3 * np.array([1.0, 1.5]) * np.ones((5, 2)), rtol=1e-6)


@pytest.mark.parametrize("kw, exc, msg", [
    (dict(ell=5), ValueError, "ell must be"),
    (dict(ell=2.0), TypeError, "ell"),
    (dict(rows=np.array([0, 9])), ValueError, "rows"),
    (dict(rows=np.array([1, 1])), ValueError, "distinct"),
    (dict(Y=_empty_Y(3, 4)), ValueError, "Y has"),
    (dict(Y=np.zeros((4, 4))), TypeError, "Y"),
    (dict(policy=_policy(4, [1.0, 0.0, 0.0, 0.0], [0, 1, 2, 3])), ValueError, "fewer than the slate size"),
])
def test_input_checks(kw, exc, msg):
    args = dict(policy=_policy(4, [0.4, 0.3, 0.2, 0.1], [0, 1, 2, 3]), Y=_empty_Y(4, 4), rows=np.arange(4),
                ell=2, seed=0)
    args.update(kw)
    with pytest.raises(exc, match=msg):
        simulate_log(**args)
