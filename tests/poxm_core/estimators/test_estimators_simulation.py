"""Estimators by simulation: what each one is unbiased for, and the paper's Theorem 1.

A small world: 4 equally likely contexts, m = 6 actions, logging rho (softmax, full support), target
pi (softmax), Bernoulli rewards with mean mu(x, y) > 0 only on the relevant set Psi(x). Slates are
drawn from rho without replacement (Gumbel top-ell). The exact targets are computed by enumerating
prefixes (docs/estimators.md, "What each estimator is unbiased for"):

  V_pruned(A) = sum_j E_x E_{y_<j ~ rho} sum_{y in A \\ y_<j} pi_A(y | x, y_<j) mu(x, y)  (pruned weights)
  V(pi_A)     = sum_j E_x E_{y_1..j ~ pi_A} mu(x, y_j)                                 (product weights)

Each check: mean of R replicated estimates within 4 standard errors of the replication mean.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from poxm_core.estimators import (DR, IS, SIS, SNIS, Translated, importance_weights, pl_expectations,
                                  pl_log_conditionals, sis_weights)

N_CTX, M = 4, 6
R_REP, N_PER = 200, 250          # replications x instances per replication


def _world(seed: int, relevant_ranks: tuple[int, ...]):
    """rho logits, pi logits, mu (N_CTX, M); relevant actions are given by their rank under rho."""
    rng = np.random.default_rng(seed)
    rho_logits = rng.normal(scale=1.0, size=(N_CTX, M))
    rho = np.exp(rho_logits) / np.exp(rho_logits).sum(1, keepdims=True)
    order = np.argsort(-rho, axis=1, kind="stable")          # candidates in rho order
    rank = np.argsort(order, axis=1)                          # rank[x, y]
    pi_logits = rng.normal(scale=1.5, size=(N_CTX, M))
    mu = np.zeros((N_CTX, M))
    for r in relevant_ranks:
        mu[np.arange(N_CTX), order[:, r]] = rng.uniform(0.3, 0.9, size=N_CTX)
    return dict(rho=rho, order=order, rank=rank, s=pi_logits, mu=mu)


def _simulate(wd, ell: int, seed: int):
    rng = np.random.default_rng(seed)
    n = R_REP * N_PER
    x = rng.integers(0, N_CTX, size=n)
    logrho = np.log(wd["rho"][x])
    actions = np.argsort(-(logrho + rng.gumbel(size=logrho.shape)), axis=1)[:, :ell]   # PL(rho) slates
    rho_a = np.take_along_axis(wd["rho"][x], actions, axis=1)
    q = rho_a / (1.0 - np.concatenate([np.zeros((n, 1)), np.cumsum(rho_a, axis=1)[:, :-1]], axis=1))
    r = (rng.random((n, ell)) < np.take_along_axis(wd["mu"][x], actions, axis=1)).astype(float)
    return x, actions, q, r


def _pl_prob(logits, seq, allowed):
    """Probability of the ordered prefix `seq` under Plackett-Luce on `allowed` with these logits."""
    e = np.where(allowed, np.exp(logits), 0.0)
    p, rem = 1.0, e.sum()
    for y in seq:
        p *= e[y] / rem
        rem -= e[y]
    return p


def _value_pruned(wd, A, ell):
    total = 0.0
    for x in range(N_CTX):
        e = np.where(A[x], np.exp(wd["s"][x]), 0.0)
        for j in range(ell):
            for prefix in itertools.permutations(range(M), j):
                pr = _pl_prob(np.log(wd["rho"][x]), prefix, np.ones(M, bool))
                keep = e.copy()
                keep[list(prefix)] = 0.0          # earlier picks in A removed; those outside A have e = 0
                total += pr * (keep * wd["mu"][x]).sum() / keep.sum() / N_CTX
    return total


def _value_slate(wd, A, ell):
    total = 0.0
    for x in range(N_CTX):
        for slate in itertools.permutations(np.flatnonzero(A[x]), ell):
            total += _pl_prob(wd["s"][x], slate, A[x]) * wd["mu"][x][list(slate)].sum() / N_CTX
    return total


def _replicated(terms: np.ndarray) -> tuple[float, float]:
    est = terms.reshape(R_REP, N_PER).mean(axis=1)
    return float(est.mean()), float(est.std(ddof=1) / np.sqrt(R_REP))


def _assert_unbiased(terms, truth, label):
    mean, se = _replicated(terms)
    assert abs(mean - truth) < 4 * se, f"{label}: mean {mean:.5f} vs truth {truth:.5f} (se {se:.5f})"


@pytest.fixture(scope="module")
def slate_world():
    wd = _world(seed=10, relevant_ranks=(0, 1))               # Psi = top-2 of rho, Phi = top-3 covers it
    ell, p = 3, 3
    x, actions, q, r = _simulate(wd, ell, seed=11)
    scores_all = wd["s"][x]
    scores_phi = np.take_along_axis(scores_all, wd["order"][x], axis=1)
    cand_pos = np.take_along_axis(wd["rank"][x], actions, axis=1)
    A_all = np.ones((N_CTX, M), bool)
    A_phi = wd["rank"] < p
    return dict(wd=wd, ell=ell, p=p, x=x, actions=actions, q=q, r=r, scores_all=scores_all,
                scores_phi=scores_phi, cand_pos=cand_pos, A_all=A_all, A_phi=A_phi)


def test_pruned_is_and_sis_are_unbiased_for_the_pruned_value(slate_world):
    d = slate_world
    w_is = importance_weights(pl_log_conditionals(d["scores_all"], d["actions"]), d["q"])
    w_sis = sis_weights(d["scores_phi"], d["cand_pos"], d["q"], p=d["p"])
    v_all, v_phi = _value_pruned(d["wd"], d["A_all"], d["ell"]), _value_pruned(d["wd"], d["A_phi"], d["ell"])
    _assert_unbiased(IS().per_sample(w_is, d["r"]), v_all, "IS pruned")
    _assert_unbiased(SIS().per_sample(w_sis, d["r"]), v_phi, "sIS pruned")
    # translated: E[w_ij] = 1 at every position (pi_A(.|x, y_<j) sums to 1 on A \ y_<j), so the
    # target is V_pruned - lam * ell
    _assert_unbiased(Translated(shift=0.8).per_sample(w_sis, d["r"]), v_phi - 0.8 * d["ell"], "translated")
    # the pruned target is not the slate value for ell > 1 (so the test distinguishes them)
    assert abs(v_all - _value_slate(d["wd"], d["A_all"], d["ell"])) > 0.01


def test_product_weights_are_unbiased_for_the_slate_value(slate_world):
    d = slate_world
    w_is = importance_weights(pl_log_conditionals(d["scores_all"], d["actions"]), d["q"], pruned=False)
    w_sis = sis_weights(d["scores_phi"], d["cand_pos"], d["q"], p=d["p"], pruned=False)
    _assert_unbiased(IS().per_sample(w_is, d["r"]), _value_slate(d["wd"], d["A_all"], d["ell"]), "IS product")
    _assert_unbiased(SIS().per_sample(w_sis, d["r"]), _value_slate(d["wd"], d["A_phi"], d["ell"]), "sIS product")


def test_dr_is_unbiased_with_a_wrong_reward_model_and_snis_is_consistent(slate_world):
    d = slate_world
    w = sis_weights(d["scores_phi"], d["cand_pos"], d["q"], p=d["p"])
    rng = np.random.default_rng(12)
    rhat_ctx = np.clip(d["wd"]["mu"] + rng.normal(scale=0.3, size=d["wd"]["mu"].shape), 0, 1)   # biased model
    rhat_phi = np.take_along_axis(rhat_ctx[d["x"]], d["wd"]["order"][d["x"]], axis=1)[:, :d["p"]]
    pos = np.where(d["cand_pos"] < d["p"], d["cand_pos"], -1)
    dm = pl_expectations(d["scores_phi"][:, :d["p"]], rhat_phi, pos)
    rhat_logged = np.take_along_axis(rhat_ctx[d["x"]], d["actions"], axis=1)
    v_phi = _value_pruned(d["wd"], d["A_phi"], d["ell"])
    _assert_unbiased(DR().per_sample(w, d["r"], dm_term=dm, rhat_logged=rhat_logged), v_phi, "DR")
    # the DM term alone is biased here (so DR's correction is doing the work)
    assert abs(dm.sum(1).mean() - v_phi) > 0.02
    # SNIS is a ratio: consistent, checked on the pooled sample with its delta-method stderr
    est = SNIS().estimate(w, d["r"])
    assert abs(est.value - v_phi) < 4 * est.stderr


# ------------------------------------------------------------------------ Theorem 1 (ell = 1)
def _theorem_world(relevant_ranks, p=3, seed=20):
    wd = _world(seed=seed, relevant_ranks=relevant_ranks)
    x, actions, q, r = _simulate(wd, 1, seed=seed + 1)
    scores_all = wd["s"][x]
    in_phi = np.take_along_axis(wd["rank"][x], actions, axis=1) < p
    pi = np.exp(wd["s"]) / np.exp(wd["s"]).sum(1, keepdims=True)
    phi = wd["rank"] < p
    psi = wd["mu"] > 0
    truth = dict(
        V=(pi * wd["mu"]).sum(1).mean(),                                          # V(pi)
        V_restricted=((pi * wd["mu"] * phi).sum(1) / (pi * phi).sum(1)).mean(),  # V(pi^Phi)
        bias_truncated=-(pi * wd["mu"] * ~phi).sum(1).mean(),                     # -E_x sum_{y notin Phi} pi mu
        kappa=(pi * (psi & ~phi)).sum(1).mean(),                                  # E_x pi(Psi cap Phi^0 | x)
    )
    # the Theorem's estimator: pi on its full support, truncated (not renormalised) to Phi
    w_trunc = importance_weights(pl_log_conditionals(scores_all, np.where(in_phi, actions, -1)), q)
    # the POXM estimator (paper Eq. no-replacement): pi restricted AND renormalised on Phi
    scores_phi = np.take_along_axis(scores_all, wd["order"][x], axis=1)
    cand_pos = np.take_along_axis(wd["rank"][x], actions, axis=1)
    w_sis = sis_weights(scores_phi, cand_pos, q, p=p)
    w_is = importance_weights(pl_log_conditionals(scores_all, actions), q)
    return truth, w_trunc, w_sis, w_is, r


def test_theorem1_when_phi_covers_the_relevant_actions():
    truth, w_trunc, w_sis, w_is, r = _theorem_world(relevant_ranks=(0, 2))        # Psi inside Phi^3
    assert truth["kappa"] == 0.0 and truth["bias_truncated"] == 0.0
    _assert_unbiased(IS().per_sample(w_is, r), truth["V"], "IS")
    _assert_unbiased(IS().per_sample(w_trunc, r), truth["V"], "truncated sIS (Theorem 1)")
    # renormalised sIS is unbiased for the restricted policy pi^Phi, which differs from V(pi)
    # by E_x V(x) (1 - pi(Phi|x)) / pi(Phi|x) >= 0 even under coverage
    _assert_unbiased(SIS().per_sample(w_sis, r), truth["V_restricted"], "sIS (renormalised)")
    mean, se = _replicated(SIS().per_sample(w_sis, r))
    assert truth["V_restricted"] - truth["V"] > 10 * se


def test_theorem1_bias_when_phi_misses_a_relevant_action():
    truth, w_trunc, w_sis, w_is, r = _theorem_world(relevant_ranks=(0, 4))        # rank 4 outside Phi^3
    assert truth["bias_truncated"] < 0 and abs(truth["bias_truncated"]) <= truth["kappa"]   # r_max = 1
    _assert_unbiased(IS().per_sample(w_trunc, r), truth["V"] + truth["bias_truncated"], "truncated sIS bias")
    mean, se = _replicated(IS().per_sample(w_trunc, r))
    assert abs(mean - truth["V"]) > 4 * se                      # the bias is really there
    _assert_unbiased(SIS().per_sample(w_sis, r), truth["V_restricted"], "sIS (renormalised)")
    _assert_unbiased(IS().per_sample(w_is, r), truth["V"], "IS")
