"""Estimator accuracy against ground truth on the known-answer bandit: bias, spread and RMSE of every
value estimator of a fixed target policy as the number of labels L and the selector size p grow, with
the recorded propensities and with estimated ones (docs/estimators.md, "MIPS and OffCEM" and "Logs
without propensities").

World (`poxm_core.bandit.known_answer`): L labels, K = L/2 candidates, slates of ell = 3; labels fall
into 4 clusters at random. Two reward regimes: 'cluster' (every label's true weights are its cluster's:
the reward depends on the action only through its cluster, MIPS's assumption) and 'free' (the
default world: rewards differ within a cluster). Target policy: softmax of the true logits on Phi^p.
Truth: V_pruned, what the pruned per-position weights estimate, = the mean over a large log of the
exact per-prefix terms sum_{k<p} pi(k | x, y_<j) mu(x, k) (its standard error is printed).

Estimators on each of R logs of n instances: sIS (= IS here, the policy lives on Phi^p), SNIS, DR and
OffCEM with the reward model fhat = 0.7 mu + 0.3 mean(mu) (a shrunk truth: right order, wrong scale),
MIPS (clusters as above). Propensities: 'true' (the simulator's q and rho) or 'estimated' (rank-bias
softmax over C(x) fitted on the log itself, 5-fold cross-fitted: the logging scores are not known
here, so the model is misspecified, as it is for a real log).

    python -m studies.estimator_accuracy                   # the defaults, ~15 min on 2 busy CPU cores
    python -m studies.estimator_accuracy --Ls 20 80 --ps 5 --reps 20 --out /tmp/acc.csv

Also `--learn`: POXM and DR-POXM (studies/known_answer.py's learners) trained on one log of n with the
true and with the estimated q; the true value of each learned policy, beside V(rho) and V*.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from poxm_core.bandit.estimated_propensity import crossfit_log_rho, slate_propensities  # noqa: E402
from poxm_core.bandit.known_answer import make_world, sample_contexts, simulate_log  # noqa: E402
from poxm_core.estimators import (DR, SIS, SNIS, ValidationLog, pl_conditional_table_torch,  # noqa: E402
                                  pl_log_conditionals, selector_pos)
from poxm_core.estimators.mips import MIPS  # noqa: E402
from poxm_core.estimators.offcem import OffCEM, offcem_terms  # noqa: E402

N_CLUSTERS = 4
ESTIMATORS = ("sIS", "SNIS", "DR", "MIPS", "OffCEM")


def world_of(L: int, regime: str, seed: int):
    """(world, cluster (L,)): the known-answer world with K = L/2, ell = 3; 'cluster' ties every label's
    true weights to its cluster's first label."""
    world = make_world(L=L, K=L // 2, ell=3, seed=seed)
    cluster = np.random.default_rng(seed).integers(0, N_CLUSTERS, size=L)
    if regime == "cluster":
        head = np.array([np.flatnonzero(cluster == c)[0] if np.any(cluster == c) else 0 for c in range(N_CLUSTERS)])
        world = dataclasses.replace(world, A=world.A[head[cluster]], c=world.c[head[cluster]])
    return world, cluster


def _policy(world, ctx, log, p):
    scores = np.take_along_axis(world.true_logits(ctx.X), ctx.cand[:, :p], 1)
    pos = selector_pos(log.cand_pos, p)
    return scores, pos, pl_conditional_table_torch(torch.tensor(scores), torch.tensor(pos)).numpy()


def truth(world, p: int, n: int, seed: int) -> tuple[float, float]:
    """V_pruned of the target policy and its standard error, from the exact per-prefix terms of a log of n."""
    ctx = sample_contexts(world, n, seed)
    log = simulate_log(world, ctx, seed + 1)
    _, _, table = _policy(world, ctx, log, p)
    t = np.einsum("ijk,ik->i", table, ctx.cand_probs[:, :p])
    return float(t.mean()), float(t.std(ddof=1) / np.sqrt(n))


def estimates(world, cluster, p: int, n: int, seed: int, props: str) -> dict[str, float]:
    """Every estimator's value on one log of n instances, with 'true' or 'estimated' propensities."""
    ctx = sample_contexts(world, n, seed)
    log = simulate_log(world, ctx, seed + 1)
    scores, pos, table = _policy(world, ctx, log, p)
    rho, q = np.exp(ctx.log_rho), log.q
    if props == "estimated":
        log_rho, _ = crossfit_log_rho(None, log.cand_pos, K=world.K, folds=5, seed=seed, whole=False)
        q, _ = slate_propensities(log_rho, log.cand_pos)
        rho = np.exp(log_rho)
    fhat = 0.7 * ctx.cand_probs + 0.3 * ctx.cand_probs.mean()
    dm, rl = offcem_terms(table, fhat, log.cand_pos)
    arrays = {"action_cluster": cluster, "candidates": ctx.cand, "cand_pos": log.cand_pos, "rho_candidates": rho,
              "pi_selector": table, "rhat_candidates": fhat}
    vlog = ValidationLog({"selector": pl_log_conditionals(scores, pos)}, q, log.rewards,
                         {"dm_term": dm, "rhat_logged": rl}, arrays)
    w = vlog.importance_weights("selector")       # SNIS and DR on the selector's weights (the policy's support)
    return {"sIS": SIS().estimate_on(vlog).value, "SNIS": SNIS().estimate(w, log.rewards).value,
            "DR": DR().estimate(w, log.rewards, dm_term=dm, rhat_logged=rl).value,
            "MIPS": MIPS().estimate_on(vlog).value, "OffCEM": OffCEM().estimate_on(vlog).value}


def accuracy(Ls, ps, regimes, reps: int, n: int, n_truth: int, seed: int) -> pd.DataFrame:
    rows = []
    for regime in regimes:
        for L in Ls:
            world, cluster = world_of(L, regime, seed)
            for p in ps:
                if p > world.K:
                    continue
                v, v_se = truth(world, p, n_truth, seed + 7919)
                print(f"{regime} L={L} p={p}: truth {v:.4f} (se {v_se:.4f})", flush=True)
                for props in ("true", "estimated"):
                    est = pd.DataFrame([estimates(world, cluster, p, n, seed + 1000 * r, props) for r in range(reps)])
                    print(f"  {props}: " + ", ".join(f"{e} {est[e].mean() - v:+.4f} ({est[e].std(ddof=1):.4f})"
                                                      for e in ESTIMATORS), flush=True)
                    for e in ESTIMATORS:
                        err = est[e].to_numpy() - v
                        rows.append({"regime": regime, "L": L, "p": p, "propensities": props, "estimator": e,
                                     "truth": v, "truth_se": v_se, "bias": err.mean(), "sd": err.std(ddof=1),
                                     "rmse": float(np.sqrt(np.mean(err ** 2))), "reps": reps, "n": n})
    return pd.DataFrame(rows)


def learning(L: int, p: int, n: int, n_eval: int, lam: float, seed: int) -> pd.DataFrame:
    """POXM and DR-POXM trained with the true and the estimated q on one log; true values."""
    from poxm_core.bandit.known_answer import logging_value, optimal_value
    from studies.known_answer import train_dm, train_dr_poxm, train_poxm, value_softmax

    world, _ = world_of(L, "free", seed)
    ctx = sample_contexts(world, n, seed)
    log = simulate_log(world, ctx, seed + 1)
    log_rho, _ = crossfit_log_rho(None, log.cand_pos, K=world.K, folds=5, seed=seed, whole=False)
    q_hat, rho_hat = slate_propensities(log_rho, log.cand_pos)
    ev = sample_contexts(world, n_eval, seed + 99)
    rows = []
    dm = train_dm(log, world.m)
    for props, lg in (("true", log), ("estimated", dataclasses.replace(log, q=q_hat, rho=rho_hat))):
        for name, pol in (("poxm", train_poxm(lg, p, lam)), ("dr_poxm", train_dr_poxm(lg, p, dm))):
            rows.append({"method": name, "propensities": props, "V": value_softmax(pol, ev, p, world.ell)})
    base = {"V_rho": logging_value(ev, world.ell), "V_star": optimal_value(ev, p, world.ell)}
    return pd.DataFrame(rows).assign(**base, L=L, p=p, n=n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--Ls", type=int, nargs="+", default=[20, 40, 80])
    ap.add_argument("--ps", type=int, nargs="+", default=[5, 10])
    ap.add_argument("--regimes", nargs="+", default=["cluster", "free"], choices=["cluster", "free"])
    ap.add_argument("--reps", type=int, default=12, help="logs per cell")
    ap.add_argument("--n", type=int, default=2000, help="instances per log")
    ap.add_argument("--n-truth", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--learn", action="store_true", help="also POXM/DR-POXM with true vs estimated q")
    ap.add_argument("--out", type=Path, help="CSV of the accuracy table")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    df = accuracy(a.Ls, a.ps, a.regimes, a.reps, a.n, a.n_truth, a.seed)
    if a.out:
        df.to_csv(a.out, index=False, float_format="%.6g")
    wide = df.pivot_table(index=["regime", "L", "p", "estimator"], columns="propensities", values=["bias", "rmse"])
    with pd.option_context("display.width", 200, "display.max_rows", 500, "display.float_format", "{:.4f}".format):
        print(wide)
        print(df.groupby(["regime", "L", "p"])[["truth", "truth_se"]].first())
        if a.learn:
            print(learning(40, 10, a.n * 2, 1000, 0.1, a.seed))
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
