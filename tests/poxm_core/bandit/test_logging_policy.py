"""Logging-policy variants: rho = softmax_K((ln sigmoid(s) + beta (G - gamma)) / T), hand-computed."""
import math

import numpy as np
import pytest
from scipy import stats

from poxm_core.bandit import build_variant, frozen_gumbel, name_code, noise_key
from poxm_core.bandit.policy import EULER_GAMMA, frozen_uniform, rho_from_scores


def test_beta0_T2_hand_values_and_reordering():
    # rho ∝ sigmoid(s)^(1/2): sqrt(.8808, .5, .2689) / 2.1642 (computed by hand / pocket calculator)
    pol = build_variant(np.array([[7, 3, 5]]), np.array([[0.0, 2.0, -1.0]]), beta=0.0, T=2.0, seed=0)
    np.testing.assert_array_equal(pol.cand, [[3, 7, 5]])
    np.testing.assert_allclose(pol.rho, [[0.43364912253542, 0.32672738851460426, 0.23962348894997576]], rtol=1e-12)
    assert pol.cand.dtype == np.int64 and pol.rho.dtype == np.float64


def test_beta_positive_with_fixed_noise():
    # beta = 1, T = 1: rho ∝ sigmoid(s) e^G (gamma cancels): (1.4522, 0.3704, 0.8929) / 2.7155
    G = np.array([[0.5, -0.3, 1.2]])
    rho = rho_from_scores(np.array([[2.0, 0.0, -1.0]]), beta=1.0, T=1.0, gumbel=G)
    np.testing.assert_allclose(rho, [[0.5347747676397925, 0.13640473974508902, 0.3288204926151186]], rtol=1e-12)
    # beta = 2, T = 3 against the formula written out with math
    s, b, T = [2.0, 0.0, -1.0], 2.0, 3.0
    E = [math.log(1 / (1 + math.exp(-x))) + b * (g - 0.5772156649015329) for x, g in zip(s, G[0])]
    ref = [math.exp(e / T) for e in E]
    np.testing.assert_allclose(rho_from_scores(np.array([s]), b, T, G)[0], np.array(ref) / sum(ref), rtol=1e-12)
    assert abs(EULER_GAMMA - 0.5772156649015329) < 1e-15


def test_build_variant_uses_frozen_noise_per_instance_label():
    rng = np.random.default_rng(0)
    cand = np.stack([rng.choice(50, 6, replace=False) for _ in range(4)])
    sc = rng.normal(size=(4, 6))
    pol = build_variant(cand, sc, beta=1.5, T=5.0, seed=(3, 1, 0))
    G = frozen_gumbel(noise_key((3, 1, 0)), np.arange(4)[:, None], cand)
    rho = rho_from_scores(sc, 1.5, 5.0, G)
    for i in range(4):  # same rho per label, whatever order
        assert dict(zip(pol.cand[i], pol.rho[i])) == pytest.approx(dict(zip(cand[i], rho[i])), rel=1e-12)
        assert np.all(np.diff(pol.rho[i]) <= 0)
    # permuting the candidate columns (or dropping some) leaves each label's noise unchanged
    perm = rng.permutation(6)
    pol2 = build_variant(cand[:, perm], sc[:, perm], 1.5, 5.0, seed=(3, 1, 0))
    np.testing.assert_array_equal(pol2.cand, pol.cand)
    np.testing.assert_allclose(pol2.rho, pol.rho, rtol=1e-12)
    G3 = frozen_gumbel(noise_key((3, 1, 0)), np.arange(4)[:, None], cand[:, :3])
    np.testing.assert_array_equal(G3, G[:, :3])
    # another seed / stream (e.g. the test split) gives other noise
    assert not np.allclose(build_variant(cand, sc, 1.5, 5.0, seed=(3, 1, 1)).rho, pol.rho)
    # rows are the instance ids of the noise
    sub = build_variant(cand[2:], sc[2:], 1.5, 5.0, seed=(3, 1, 0), rows=np.array([2, 3]))
    np.testing.assert_allclose(sub.rho, pol.rho[2:], rtol=1e-12)


def test_frozen_gumbel_is_gumbel_and_independent():
    rows = np.repeat(np.arange(400), 500)
    labs = np.tile(np.arange(500), 400)
    G = frozen_gumbel(noise_key(7), rows, labs)
    assert stats.kstest(G, stats.gumbel_r.cdf).pvalue > 1e-3
    assert abs(G.mean() - EULER_GAMMA) < 0.01 and abs(G.var() - math.pi ** 2 / 6) < 0.03
    U = frozen_uniform(noise_key(7), rows, labs)
    assert U.min() > 0 and U.max() < 1
    # neighbouring (row, label) cells are uncorrelated
    Ug = U.reshape(400, 500)
    assert abs(np.corrcoef(Ug[:, :-1].ravel(), Ug[:, 1:].ravel())[0, 1]) < 0.02
    assert abs(np.corrcoef(Ug[:-1].ravel(), Ug[1:].ravel())[0, 1]) < 0.02
    np.testing.assert_array_equal(G, frozen_gumbel(noise_key(7), rows, labs))
    assert name_code("A") == name_code("A") != name_code("B")


def test_temperature_limits_and_ties():
    cand = np.array([[4, 1, 9]])
    sc = np.array([[1.0, 3.0, 0.0]])
    cold = build_variant(cand, sc, 0.0, 0.01, 0)
    assert cold.cand[0, 0] == 1 and cold.rho[0, 0] > 0.999
    hot = build_variant(cand, sc, 0.0, 1e5, 0)
    np.testing.assert_allclose(hot.rho, 1 / 3, atol=1e-4)
    tie = build_variant(np.array([[9, 2, 5]]), np.zeros((1, 3)), 0.0, 2.0, 0)
    np.testing.assert_array_equal(tie.cand, [[2, 5, 9]])      # equal rho: smaller label id first
    np.testing.assert_allclose(tie.rho.sum(1), 1.0)


@pytest.mark.parametrize("kw, exc, msg", [
    (dict(T=0.0), ValueError, "T must be"),
    (dict(T=float("inf")), ValueError, "T must be"),
    (dict(beta=-1.0), ValueError, "beta must be"),
    (dict(cand_scores=np.zeros((2, 2))), ValueError, "equal"),
    (dict(cand_idx=np.zeros((2, 3))), TypeError, "cand_idx"),
    (dict(cand_scores=np.full((2, 3), np.nan)), ValueError, "finite"),
    (dict(rows=np.arange(3)), ValueError, "rows"),
])
def test_input_checks(kw, exc, msg):
    args = dict(cand_idx=np.zeros((2, 3), np.int64), cand_scores=np.zeros((2, 3)), beta=0.0, T=1.0, seed=0)
    args.update(kw)
    with pytest.raises(exc, match=msg):
        build_variant(**args)
