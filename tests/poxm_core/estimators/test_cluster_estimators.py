"""MIPS and OffCEM (docs/estimators.md, "MIPS and OffCEM"): hand-computed values, NumPy == Torch, and on
the known-answer bandit: unbiased where each one's assumption holds, biased where it does not, and MIPS's
variance below sIS's, the more so the larger the support.

The known-answer checks are paired: on each logged prefix the exact target term
sum_{k < p} pi_Phi(k | x_i, y_i,<j) mu(x_i, candidate k) is known (mu the true click probability), so
the mean of (estimator's t_i - exact t_i) over a large log must be 0 within 4 standard errors.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from poxm_core.bandit.known_answer import make_world, sample_contexts, simulate_log
from poxm_core.estimators import (ESTIMATORS, SIS, ValidationLog, pl_conditional_table_torch, pl_log_conditionals,
                                  selector_pos)
from poxm_core.estimators.mips import MIPS, cluster_weights, cluster_weights_torch
from poxm_core.estimators.offcem import OffCEM, offcem_terms, offcem_terms_torch
from poxm_core.estimators.validation import validation_estimates


# ------------------------------------------------------------------------------------ by hand

def _hand_log() -> ValidationLog:
    """n = 2, ell = 2, K = 3, p = 2, L = 4 actions in clusters (0, 0, 1, 1).
    Row 0: C = (0, 2, 1), rho (.5, .3, .2), slate (0, 1); row 1: C = (3, 1, 0), rho (.6, .25, .15), slate (1, 3).
    fhat on the candidates: row 0 (.2, .5, .1), row 1 (.4, .3, .6)."""
    q = np.array([[0.5, 0.2 / 0.5], [0.25, 0.6 / 0.75]])
    r = np.array([[1.0, 0.0], [1.0, 1.0]])
    pi = np.array([[[0.6, 0.4], [0.0, 1.0]],       # pi on Phi^2 at each position (prefix's column 0)
                   [[0.3, 0.7], [1.0, 0.0]]])
    with np.errstate(divide="ignore"):
        logpi_sel = np.log(np.array([[0.6, 0.0], [0.7, 1.0]]))
    arrays = {"action_cluster": np.array([0, 0, 1, 1]), "candidates": np.array([[0, 2, 1], [3, 1, 0]]),
              "cand_pos": np.array([[0, 2], [1, 0]]), "rho_candidates": np.array([[0.5, 0.3, 0.2], [0.6, 0.25, 0.15]]),
              "pi_selector": pi, "rhat_candidates": np.array([[0.2, 0.5, 0.1], [0.4, 0.3, 0.6]])}
    return ValidationLog({"selector": logpi_sel}, q, r, arrays=arrays)


HAND_W = [[6 / 7, 0.0], [7 / 4, 5 / 4]]
# w00: cluster 0 = candidates {0, 1} of row 0: pi .6 (candidate 1 outside Phi^2), rho .5 + .2     -> 6/7
# w01: cluster 0, position 1: pi 0 (the only cluster-0 column of Phi^2 was logged)                 -> 0
# w10: cluster 0 = columns 1, 2: pi .7, rho .25 + .15 = .4                                         -> 7/4
# w11: cluster 1 = column 0: pi 1, rho .6 / (1 - .25) = .8                                         -> 5/4


def test_mips_by_hand():
    log = _hand_log()
    np.testing.assert_allclose(MIPS().weights_on(log), HAND_W, rtol=1e-14)
    est = MIPS().estimate_on(log)
    assert est.value == pytest.approx((6 / 7 + 7 / 4 + 5 / 4) / 2, rel=1e-14)   # 27/14
    assert est.stderr == pytest.approx((3 - 6 / 7) / 2, rel=1e-14)


def test_offcem_by_hand():
    # dm: row 0 .6*.2 + .4*.5 = .32, then 1*.5 = .5; row 1 .3*.4 + .7*.3 = .33, then 1*.4 = .4
    # fhat at the logged action: row 0 .2, .1; row 1 .3, .4
    t0 = 0.32 + 6 / 7 * (1 - 0.2) + 0.5 + 0.0 * (0 - 0.1)
    t1 = 0.33 + 7 / 4 * (1 - 0.3) + 0.4 + 5 / 4 * (1 - 0.4)
    log = _hand_log()
    dm, rl = offcem_terms(log.arrays["pi_selector"], log.arrays["rhat_candidates"], log.arrays["cand_pos"])
    np.testing.assert_allclose(dm, [[0.32, 0.5], [0.33, 0.4]], rtol=1e-14)
    np.testing.assert_allclose(rl, [[0.2, 0.1], [0.3, 0.4]], rtol=1e-14)
    est = OffCEM().estimate_on(log)
    assert est.value == pytest.approx((t0 + t1) / 2, rel=1e-14)
    assert est.stderr == pytest.approx(abs(t1 - t0) / 2, rel=1e-12)
    # with fhat = 0 it is MIPS
    zero = dataclasses.replace(log, arrays={**log.arrays, "rhat_candidates": np.zeros((2, 3))})
    assert OffCEM().estimate_on(zero).value == pytest.approx(MIPS().estimate_on(log).value, rel=1e-14)


def test_singletons_give_sis_and_one_cluster_weight_one():
    log = _hand_log()
    single = dataclasses.replace(log, arrays={**log.arrays, "action_cluster": np.arange(4)})
    np.testing.assert_allclose(MIPS().weights_on(single), SIS().weights_on(log), rtol=1e-14)
    one = dataclasses.replace(log, arrays={**log.arrays, "action_cluster": np.zeros(4, dtype=int)})
    # pi's whole remaining mass on Phi^2 (1 at every position here) over rho's (1)
    np.testing.assert_allclose(MIPS().weights_on(one), np.ones((2, 2)), rtol=1e-14)


def test_registered_and_reported_only_with_their_arrays():
    assert ESTIMATORS["mips"] is MIPS and ESTIMATORS["offcem"] is OffCEM
    log = _hand_log()
    got = validation_estimates(log.logpi, log.q, log.r, arrays=dict(log.arrays))
    assert got["MIPS"].value == pytest.approx(27 / 14, rel=1e-14) and "OffCEM" in got
    no_rhat = {k: v for k, v in log.arrays.items() if k != "rhat_candidates"}
    got = validation_estimates(log.logpi, log.q, log.r, arrays=no_rhat)
    assert "MIPS" in got and "OffCEM" not in got                  # no reward model: like DR, skipped
    assert "MIPS" not in validation_estimates(log.logpi, log.q, log.r)


def test_numpy_and_torch_agree():
    g = np.random.default_rng(3)
    n, ell, K, p, L = 40, 3, 7, 5, 12
    cand = np.stack([g.permutation(L)[:K] for _ in range(n)])
    rho = g.dirichlet(np.ones(K), size=n)
    cp = np.stack([g.permutation(K)[:ell] for _ in range(n)])
    rho_y = np.take_along_axis(rho, cp, 1)
    q = rho_y / (1 - np.concatenate([np.zeros((n, 1)), np.cumsum(rho_y, 1)[:, :-1]], 1))
    table = pl_conditional_table_torch(torch.tensor(g.normal(size=(n, p))), selector_pos(torch.tensor(cp), p)).numpy()
    clus = g.integers(0, 3, size=L)[cand]
    rhat = g.random((n, K))
    w = cluster_weights(table, rho, clus, cp, q)
    tt = torch.tensor(table, requires_grad=True)
    wt = cluster_weights_torch(tt, torch.tensor(rho), torch.tensor(clus), torch.tensor(cp), torch.tensor(q))
    np.testing.assert_allclose(wt.detach().numpy(), w, rtol=1e-12)
    dm, rl = offcem_terms(table, rhat, cp)
    dmt, rlt = offcem_terms_torch(tt, torch.tensor(rhat), torch.tensor(cp))
    np.testing.assert_allclose(dmt.detach().numpy(), dm, rtol=1e-12)
    np.testing.assert_allclose(rlt.numpy(), rl, rtol=1e-12)
    r = (g.random((n, ell)) < 0.3).astype(float)
    v = OffCEM().value(w, r, dm_term=dm, rhat_logged=rl)
    vt = OffCEM().value_torch(wt, torch.tensor(r), dm_term=dmt, rhat_logged=rlt)
    assert float(vt.detach()) == pytest.approx(v, rel=1e-12)
    assert float(MIPS().value_torch(wt, torch.tensor(r))) == pytest.approx(MIPS().value(w, r), rel=1e-12)
    vt.backward()
    assert torch.isfinite(tt.grad).all()


# ------------------------------------------------------------------------------------ known answers

def clustered(world, n_clusters: int, seed: int = 0):
    """The world with every label's true weights and bias those of its cluster's first label: the reward
    depends on the action only through its cluster. Returns (world, cluster of each label)."""
    cluster = np.random.default_rng(seed).integers(0, n_clusters, size=world.L)
    head = np.array([np.flatnonzero(cluster == c)[0] if np.any(cluster == c) else 0 for c in range(n_clusters)])
    return dataclasses.replace(world, A=world.A[head[cluster]], c=world.c[head[cluster]]), cluster


def paired_terms(world, cluster, n: int, p: int, seed: int, fhat_shift=None):
    """Per-instance terms of sIS, MIPS, OffCEM and the exact target on a log of n instances of `world`;
    the policy: softmax of the true logits (x 1.5) on Phi^p. fhat = mu + fhat_shift[cluster] (None: 0.1)."""
    ctx = sample_contexts(world, n, seed)
    log = simulate_log(world, ctx, seed + 1)
    scores = 1.5 * np.take_along_axis(world.true_logits(ctx.X), ctx.cand[:, :p], 1)
    pos = selector_pos(log.cand_pos, p)
    table = pl_conditional_table_torch(torch.tensor(scores), torch.tensor(pos)).numpy()
    exact = np.einsum("ijk,ik->i", table, ctx.cand_probs[:, :p])
    shift = np.full(cluster.max() + 1, 0.1) if fhat_shift is None else fhat_shift
    fhat = np.clip(ctx.cand_probs + shift[cluster[ctx.cand]], 0, 1)
    arrays = {"action_cluster": cluster, "candidates": ctx.cand, "cand_pos": log.cand_pos,
              "rho_candidates": np.exp(ctx.log_rho), "pi_selector": table, "rhat_candidates": fhat}
    vlog = ValidationLog({"selector": pl_log_conditionals(scores, pos)}, log.q, log.rewards, arrays=arrays)
    w_sis, w_mips = SIS().weights_on(vlog), MIPS().weights_on(vlog)
    dm, rl = offcem_terms(table, fhat, log.cand_pos)
    return {"sIS": SIS().per_sample(w_sis, log.rewards), "MIPS": MIPS().per_sample(w_mips, log.rewards),
            "OffCEM": OffCEM().per_sample(w_mips, log.rewards, dm_term=dm, rhat_logged=rl),
            "DM": dm.sum(1), "exact": exact}


def _z(t, exact):
    d = t - exact
    return d.mean() / (d.std(ddof=1) / np.sqrt(d.size))


def test_unbiased_where_the_reward_is_cluster_only():
    world, cluster = clustered(make_world(L=40, K=20, ell=3, seed=1), n_clusters=4)
    t = paired_terms(world, cluster, n=40_000, p=10, seed=5,
                     fhat_shift=np.array([0.1, -0.05, 0.2, 0.0]))   # fhat wrong by cluster: DM biased
    for name in ("sIS", "MIPS", "OffCEM"):
        assert abs(_z(t[name], t["exact"])) < 4, name
    assert abs(_z(t["DM"], t["exact"])) > 10


def test_offcem_unbiased_mips_not_where_only_fhat_knows_the_within_cluster_effects():
    world = make_world(L=40, K=20, ell=3, seed=2)                   # rewards differ within a cluster
    cluster = np.random.default_rng(0).integers(0, 3, size=world.L)
    t = paired_terms(world, cluster, n=40_000, p=10, seed=7, fhat_shift=np.array([0.15, -0.05, 0.1]))
    assert abs(_z(t["OffCEM"], t["exact"])) < 4
    assert abs(_z(t["MIPS"], t["exact"])) > 6


def test_mips_variance_below_sis_and_falls_with_the_support():
    """Three clusters; the number of labels L (and K = L/2, p = K/2) doubles twice: the actions per cluster
    grow, so sIS's weights spread over more actions while MIPS's stay over three clusters. Measured ratios
    Var(MIPS) / Var(sIS) at seeds 3, 4, 5: (.53, .47, .33), (.46, .31, .28), (.31, .25, .20)."""
    ratios = []
    for L, K in ((20, 10), (40, 20), (80, 40)):
        world, cluster = clustered(make_world(L=L, K=K, ell=3, seed=3), n_clusters=3)
        t = paired_terms(world, cluster, n=20_000, p=K // 2, seed=11)
        ratios.append(np.var(t["MIPS"]) / np.var(t["sIS"]))
    assert ratios[0] < 1 and ratios[2] < ratios[1] < ratios[0], ratios


@pytest.mark.slow          # one tiny trial (~20 s on 2 busy cores)
def test_a_trial_reports_them_and_selection_picks_by_them(tmp_path):
    """Every head's final validation rows carry MIPS and OffCEM (a reward model is fitted); per-epoch rows
    MIPS only (no reward model there, as for DR); `selection.criterion: MIPS` picks the p with the larger MIPS."""
    from orchestration.selection import select, val_criteria
    from poxm_core.training import run_trial, trial_specs
    from tests.trial_fixtures import tiny_config, tiny_prepared

    cfg = tiny_config({"logging": {}, "dm": {"lr": 0.01}, "poxm": {"p": [2, 4], "lam": [0.5], "lr": 0.01}}, epochs=1)
    spec = trial_specs(cfg, "seed")[0]
    df = run_trial(cfg, spec, tiny_prepared(), tmp_path, progress=False)
    fin = df[df["final"].astype(bool) & (df.split == "val")]
    for label in ("MIPS", "OffCEM"):
        got = fin[fin.metric == label]
        assert len(got) == len(spec.heads) and np.isfinite(got.value).all()
        assert label in val_criteria(df)
    per_epoch = set(df[~df["final"].astype(bool) & (df.split == "val")].metric)
    assert "MIPS" in per_epoch and "OffCEM" not in per_epoch
    sel = select(df, criterion="MIPS")
    chosen = sel[(sel.method == "poxm") & (sel.selection == "mips")]
    pts = fin[(fin.metric == "MIPS") & (fin.method == "poxm")].set_index("p").value
    assert int(chosen.p.iloc[0]) == int(pts.idxmax())
