"""Which selection criterion picks a good (p, lambda) when the truth is known? (issue 8, DESIGN §7)

On the known-answer bandit (`poxm_core.bandit.known_answer`, also `benchmarks/known_answer.py`): for a
logging temperature T and a seed, a training log of n instances and a held-out validation log of
n / 9 (the benchmark's 10 % validation slice), POXM heads on the grid p x lambda, each trained as in
known_answer.py (linear softmax on Phi^p, start at 0, full-batch Adam on minus the translated sIS,
lambda on the loss 1 - r as docs/protocol.md §3, i.e. the reward shifted by 1 - lambda). For every head:
its TRUE value V (exact Plackett-Luce value of its test-time policy on Phi^p, fresh contexts) and every
reported registry estimator on the validation log with the head's test-time support (what a trial
writes: IS, sIS, SNIS, PIS, SNIS-LB; DR needs a reward model and is left out). Each criterion then picks
the head with its largest value; nothing here reads the true values to choose.

Printed per (T, criterion), over seeds: the regret V(best head) - V(chosen head), how often the chosen head
beats the logging policy V(rho), and the Spearman correlation of the criterion with V across the grid.
Tests labels, Bibtex and Delicious are not involved: this is the independent check of a criterion.

  python benchmarks/selection_known_answer.py                         # ~2-4 min on 2 CPU cores
  python benchmarks/selection_known_answer.py --seeds 3 --temperatures 0.25 --out /tmp/sel.csv
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from known_answer import phi_logits, train_poxm, value_softmax  # noqa: E402
from poxm_core.bandit.known_answer import logging_value, make_world, sample_contexts, simulate_log  # noqa: E402
from poxm_core.estimators import pl_log_conditionals, selector_pos, validation_estimates  # noqa: E402


def head_rows(T: float, seed: int, n: int, ps, lams, epochs: int, lr: float, n_eval: int) -> pd.DataFrame:
    """One (T, seed): every head's true value and validation criteria."""
    world = make_world(temperature=T, seed=seed)
    ell = world.ell
    ctx = sample_contexts(world, n, seed=seed * 1000 + 1)
    log = simulate_log(world, ctx, seed=seed * 1000 + 2)
    vctx = sample_contexts(world, max(n // 9, 2), seed=seed * 1000 + 3)
    vlog = simulate_log(world, vctx, seed=seed * 1000 + 4)
    ev = sample_contexts(world, n_eval, seed=10_000 + seed)
    v_rho = logging_value(ev, ell)
    out = []
    for p in ps:
        for lam in lams:
            pol = train_poxm(log, p, 1.0 - lam, epochs=epochs, lr=lr, seed=seed)   # reward shift 1 - lam
            logpi = pl_log_conditionals(phi_logits(pol, vctx, p), selector_pos(vlog.cand_pos, p))
            est = validation_estimates({"policy": logpi, "selector": logpi}, vlog.q, vlog.rewards)
            row = {"T": T, "seed": seed, "p": p, "lam": lam, "V": value_softmax(pol, ev, p, ell), "V_rho": v_rho,
                   "ESS": est["SNIS"].ess}
            row.update({k: e.value for k, e in est.items()})
            out.append(row)
    return pd.DataFrame(out)


def summarise(rows: pd.DataFrame, criteria) -> pd.DataFrame:
    recs = []
    for (T, seed), g in rows.groupby(["T", "seed"]):
        best = g["V"].max()
        for c in criteria:
            chosen = g.loc[g[c].idxmax()]
            rho = spearmanr(g[c], g["V"]).statistic if g[c].nunique() > 1 else np.nan
            recs.append({"T": T, "seed": seed, "criterion": c, "regret": best - chosen["V"],
                         "beats_logging": float(chosen["V"] > chosen["V_rho"]), "spearman": rho,
                         "chosen_p": chosen["p"], "chosen_lam": chosen["lam"]})
    s = pd.DataFrame(recs)
    return (s.groupby(["T", "criterion"], sort=False)
             .agg(regret=("regret", "mean"), regret_max=("regret", "max"), beats_logging=("beats_logging", "mean"),
                  spearman=("spearman", "mean"), seeds=("seed", "nunique")).reset_index())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.5, 0.25])
    ap.add_argument("--seeds", type=int, default=8, help="worlds/logs per temperature (default 8)")
    ap.add_argument("--n", type=int, default=2000, help="training log size (validation: n / 9)")
    ap.add_argument("--ps", type=int, nargs="+", default=[5, 10, 20])
    ap.add_argument("--lams", type=float, nargs="+", default=[0.7, 0.8, 0.9, 1.0])
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--n-eval", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=None, help="write every head's row as CSV here")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.time()
    rows = pd.concat([head_rows(T, s, a.n, a.ps, a.lams, a.epochs, a.lr, a.n_eval)
                      for T in a.temperatures for s in range(a.seeds)], ignore_index=True)
    criteria = [c for c in ("IS", "sIS", "SNIS", "PIS", "SNIS-LB") if c in rows]
    summary = summarise(rows, criteria)
    pd.set_option("display.width", 160)
    print(f"known-answer selection: n={a.n} (validation {a.n // 9}), p {a.ps}, lambda {a.lams}, "
          f"{a.seeds} seeds per T, {time.time() - t0:.0f} s")
    print(rows.groupby("T")[["V_rho", "V"]].agg(["mean", "max"]).round(4).to_string())
    print(summary.round(4).to_string(index=False))
    if a.out:
        tmp = a.out.with_name(a.out.name + ".tmp")
        rows.to_csv(tmp, index=False)
        tmp.replace(a.out)
        print(f"rows -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
