"""Prefix-product (slate-unbiased) IS, registry name 'pis' (docs/estimators.md, docs/estimators.md).

(a) hand-computed values on a 3-instance, ell = 2 log; NumPy == Torch; differentiable.
(b) seeded simulation: the prefix estimator is unbiased for the deployed slate value of a
    Plackett-Luce policy, while pruned IS (same log, same pi) is measurably biased for it.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from poxm_core.estimators import (ESTIMATORS, IS, PrefixIS, get_estimator, importance_weights,
                                  importance_weights_torch, pl_log_conditionals, pl_log_conditionals_torch)

# ------------------------------------------------------------------------------- (a) by hand
# One context, A = [L] with L = 3 labels, exp(scores) = [1, 2, 3] (total mass 6).
SCORES = np.log(np.array([[1.0, 2.0, 3.0]] * 3))
ACTIONS = np.array([[2, 0],     # pi: 3/6 = 1/2, then 1/(6-3) = 1/3
                    [1, 2],     # pi: 2/6 = 1/3, then 3/(6-2) = 3/4
                    [0, 1]])    # pi: 1/6,       then 2/(6-1) = 2/5
Q = np.array([[1 / 2, 1 / 4],   # ratios pi/q: 1,   4/3
              [1 / 6, 1 / 2],   # ratios pi/q: 2,   3/2
              [1 / 4, 1 / 2]])  # ratios pi/q: 2/3, 4/5
R = np.array([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
# prefix weights w_ij = prod_{k<=j} ratio_ik:
#   [1, 1*4/3 = 4/3], [2, 2*3/2 = 3], [2/3, 2/3*4/5 = 8/15]
W_PREFIX = np.array([[1.0, 4 / 3], [2.0, 3.0], [2 / 3, 8 / 15]])
W_PRUNED = np.array([[1.0, 4 / 3], [2.0, 3 / 2], [2 / 3, 4 / 5]])
# per-instance terms t_i = sum_j w_ij r_ij: 1 + 4/3 = 7/3 ; 0*2 + 3 = 3 ; 2/3 + 0 = 2/3
T_PREFIX = np.array([7 / 3, 3.0, 2 / 3])
V_PREFIX = 2.0                     # (7/3 + 3 + 2/3) / 3 = 6/3
# deviations from 2: 1/3, 1, -4/3 ; squares sum 1/9 + 1 + 16/9 = 26/9 ; / (n-1) = 13/9 ; / n -> 13/27
SE_PREFIX = math.sqrt(13 / 27)
# ESS = (sum w)^2 / sum w^2: sum w = (15+20+30+45+10+8)/15 = 128/15 ;
# sum w^2 = (225+400+900+2025+100+64)/225 = 3714/225 ; ESS = 16384/3714 = 8192/1857
ESS_PREFIX = 8192 / 1857
# pruned IS on the same log: t = 7/3, 0*2 + 3/2, 2/3 -> (14/6 + 9/6 + 4/6)/3 = 1.5
V_PRUNED = 1.5


def test_prefix_weights_and_value_by_hand():
    w = importance_weights(pl_log_conditionals(SCORES, ACTIONS), Q, pruned=False)
    np.testing.assert_allclose(w, W_PREFIX, rtol=1e-13)
    est = get_estimator("pis")
    assert isinstance(est, PrefixIS)
    np.testing.assert_allclose(est.per_sample(w, R), T_PREFIX, rtol=1e-13)
    e = est.estimate(w, R)
    assert e.value == pytest.approx(V_PREFIX, rel=1e-13)
    assert e.stderr == pytest.approx(SE_PREFIX, rel=1e-12)
    assert e.ess == pytest.approx(ESS_PREFIX, rel=1e-12) and e.n == 3
    z = 1.959963984540054
    assert (e.ci_low, e.ci_high) == pytest.approx((2 - z * SE_PREFIX, 2 + z * SE_PREFIX), rel=1e-12)
    # the pruned weights give a different number (and are what 'is' is normally fed)
    w_pruned = importance_weights(pl_log_conditionals(SCORES, ACTIONS), Q)
    np.testing.assert_allclose(w_pruned, W_PRUNED, rtol=1e-13)
    assert IS().value(w_pruned, R) == pytest.approx(V_PRUNED, rel=1e-13)


def test_prefix_numpy_equals_torch_and_is_differentiable():
    s = torch.tensor(SCORES, requires_grad=True)
    w = importance_weights_torch(pl_log_conditionals_torch(s, torch.tensor(ACTIONS)), torch.tensor(Q), pruned=False)
    np.testing.assert_allclose(w.detach().numpy(), W_PREFIX, rtol=1e-13)
    v = PrefixIS().value_torch(w, torch.tensor(R))
    assert v.item() == pytest.approx(PrefixIS().value(W_PREFIX, R), rel=1e-13)
    assert v.item() == pytest.approx(V_PREFIX, rel=1e-13)
    v.backward()
    assert s.grad is not None and torch.isfinite(s.grad).all() and s.grad.abs().sum() > 0
    # d/dw (1/n) sum_ij w_ij r_ij = r / n
    wt = torch.tensor(W_PREFIX, requires_grad=True)
    PrefixIS().value_torch(wt, torch.tensor(R)).backward()
    np.testing.assert_allclose(wt.grad.numpy(), R / 3)


def test_weights_hook_says_which_weights_each_estimator_takes():
    assert ESTIMATORS["pis"] is PrefixIS and PrefixIS.weights == "prefix"
    for name, cls in ESTIMATORS.items():
        if name != "pis":
            assert cls.weights == "pruned", name


# ---------------------------------------------------------------------------- (b) simulation
L, ELL, N = 6, 3, 200_000


def _pl_prob(logits, seq):
    """Probability of the ordered prefix `seq` under Plackett-Luce (without replacement) on [L]."""
    e = np.exp(logits)
    p, rem = 1.0, e.sum()
    for y in seq:
        p *= e[y] / rem
        rem -= e[y]
    return p


def test_prefix_is_unbiased_for_the_slate_value_and_pruned_is_is_not():
    rng = np.random.default_rng(0)
    rho_logits = rng.normal(scale=0.5, size=L)        # fairly flat logging policy
    pi_logits = rng.normal(scale=1.5, size=L)         # a different, more peaked target
    mu = rng.uniform(0.05, 0.9, size=L)               # Bernoulli reward probability of each label
    # exact deployed slate value of pi: all 6*5*4 ordered slates
    truth = sum(_pl_prob(pi_logits, s) * mu[list(s)].sum() for s in itertools.permutations(range(L), ELL))
    # exact target of the pruned weights: prefix from rho, j-th pick from pi given that prefix
    v_pruned = 0.0
    for j in range(ELL):
        for prefix in itertools.permutations(range(L), j):
            e = np.exp(pi_logits)
            e[list(prefix)] = 0.0
            v_pruned += _pl_prob(rho_logits, prefix) * (e * mu).sum() / e.sum()

    # log: N slates from PL(rho) (Gumbel top-ell), conditional propensities q, Bernoulli rewards
    actions = np.argsort(-(rho_logits + rng.gumbel(size=(N, L))), axis=1)[:, :ELL]
    rho = np.exp(rho_logits) / np.exp(rho_logits).sum()
    rho_a = rho[actions]
    q = rho_a / (1.0 - np.concatenate([np.zeros((N, 1)), np.cumsum(rho_a, axis=1)[:, :-1]], axis=1))
    r = (rng.random((N, ELL)) < mu[actions]).astype(float)
    logpi = pl_log_conditionals(np.broadcast_to(pi_logits, (N, L)), actions)

    pis = get_estimator("pis").estimate(importance_weights(logpi, q, pruned=False), r)
    pruned = get_estimator("is").estimate(importance_weights(logpi, q, pruned=True), r)

    assert abs(pis.value - truth) < 4 * pis.stderr, (pis.value, truth, pis.stderr)
    # pruned IS targets v_pruned, not the slate value; the gap is many standard errors here
    assert abs(pruned.value - v_pruned) < 4 * pruned.stderr, (pruned.value, v_pruned, pruned.stderr)
    assert abs(pruned.value - truth) > 4 * pruned.stderr, (pruned.value, truth, pruned.stderr)
    assert abs(v_pruned - truth) > 10 * pruned.stderr
    # the price of unbiasedness: a larger standard error and a smaller ESS than the pruned weights
    assert pis.stderr > pruned.stderr and pis.ess < pruned.ess
