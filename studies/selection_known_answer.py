"""Which selection criterion picks a good (p, lambda) when the truth is known, and how much validation data does it need?

On the known-answer bandit (`poxm_core.bandit.known_answer`, also `studies/known_answer.py`): for a
logging temperature T and a seed, ONE bandit log of n instances. POXM heads on the grid p x lambda, each
trained as in known_answer.py (linear softmax on Phi^p, start at 0, full-batch Adam on minus the
translated sIS, lambda on the loss 1 - r as docs/protocol.md §3, i.e. the reward shifted by 1 - lambda).
The log is used under several validation regimes:

  hold-out f   (--val-fractions): a seeded share f of the instances is the validation log and is held
               out from every gradient step (the heads train on the other 1 - f), as in the real
               pipeline. The selected head is the head trained on 1 - f. (Also recorded: the true value
               if the selected (p, lambda) were retrained on all n, `V_all`.)
  cross-fit K  (--folds): K seeded folds; every head is trained K times, copy k on all folds but k and
               estimated on fold k; the criterion is the mean of the K fold estimates. The selected
               (p, lambda) is then RETRAINED ON ALL n instances, and that head's true value is what counts.

For every head: its TRUE value V (exact Plackett-Luce value of its test-time policy on Phi^p, fresh
contexts) and every reported registry estimator on its validation data with the head's test-time
support (IS, sIS, SNIS, PIS, SNIS-LB, and DR with a reward model: a logistic Direct Method fitted on the
same training instances, MISSPECIFIED by default: it sees --dr-features of the m = 16 features). Each
criterion picks the head with its largest value; nothing here reads the true values to choose.

Printed per (T, regime, criterion), over seeds: the regret V(best head of the regime) - V(chosen head),
the true value of the chosen head, the share of seeds where the chosen head falls BELOW the logging
policy V(rho), and the Spearman correlation of the criterion with V across the grid (for cross-fitting,
with the all-n heads' V). No real data is involved: this is the independent check of a criterion.

  python -m studies.selection_known_answer --seeds 30 --device cuda --workers 16   # docs/protocol.md §6: 142 s
  python -m studies.selection_known_answer --workers 2     # CPU: ~3 CPU-minutes per (T, seed), 18 pairs
  python -m studies.selection_known_answer --seeds 2 --temperatures 0.25 --folds --out /tmp/sel.csv
"""
from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from poxm_core.bandit.known_answer_learners import LinearPolicy, phi_logits, train_dm, value_softmax  # noqa: E402
from poxm_core.bandit import fold_splits, validation_split  # noqa: E402
from poxm_core.bandit.known_answer import (KnownAnswerLog, logging_value, make_world, sample_contexts,  # noqa: E402
                                           simulate_log, subset_log)
from poxm_core.estimators import (importance_weights_torch, pl_expectations, pl_log_conditionals,  # noqa: E402
                                  pl_log_conditionals_torch, selector_pos, validation_estimates)
from poxm_core.estimators.validation import crossfit_values  # noqa: E402

CRITERIA = ("IS", "sIS", "SNIS", "PIS", "SNIS-LB", "DR")


def train_poxm_grid(log: KnownAnswerLog, splits, p: int, shifts, *, epochs: int = 200, lr: float = 0.1,
                    device: str = "cpu") -> list[list[LinearPolicy]]:
    """POXM heads for every (training rows, reward shift) pair in one batched full-batch Adam run.

    heads[s][k] is the head trained on the instances `splits[s]` with reward shift `shifts[k]`: the same
    optimisation as `known_answer.train_poxm(subset_log(log, splits[s]), p, shifts[k])` (parameters at 0,
    Adam on minus the translated sIS over Phi^p; each head has its own parameters and its own loss term,
    and Adam is elementwise, so stacking them changes only the float summation order). `device`: where
    the stacked optimisation runs ("cpu", or "cuda": the same float64 arithmetic).
    """
    contexts = log.contexts
    L, m = contexts.probs.shape[1], contexts.X.shape[1]
    K = len(shifts)
    f64 = {"dtype": torch.float64, "device": device}
    X = torch.as_tensor(contexts.X, **f64)
    cand = torch.as_tensor(contexts.cand[:, :p], device=device)
    pos_all = selector_pos(torch.as_tensor(log.cand_pos, device=device), p)
    q_all = torch.as_tensor(log.q, **f64)
    r_all = torch.as_tensor(log.rewards, **f64)
    rows = [torch.as_tensor(np.asarray(s, dtype=np.int64), device=device) for s in splits]
    # per-row layout: split by split, within a split shift by shift, within a shift the split's rows
    pos = torch.cat([pos_all[ix].repeat(K, 1) for ix in rows])
    q = torch.cat([q_all[ix].repeat(K, 1) for ix in rows])
    r = torch.cat([r_all[ix].repeat(K, 1) for ix in rows])
    shift = torch.cat([torch.as_tensor(np.repeat(np.asarray(shifts, dtype=np.float64), len(ix)), **f64) for ix in rows])
    inv_n = torch.cat([torch.full((K * len(ix),), 1.0 / len(ix), **f64) for ix in rows])
    theta = torch.zeros((len(rows), K * L, m), requires_grad=True, **f64)
    b = torch.zeros((len(rows), K * L), requires_grad=True, **f64)
    opt = torch.optim.Adam([theta, b], lr=lr)
    Xs = [X[ix] for ix in rows]
    cs = [cand[ix].unsqueeze(0).expand(K, -1, -1) for ix in rows]
    for _ in range(epochs):
        opt.zero_grad()
        s = torch.cat([(Xs[i] @ theta[i].T + b[i]).reshape(len(rows[i]), K, L).transpose(0, 1)
                       .gather(2, cs[i]).reshape(K * len(rows[i]), p) for i in range(len(rows))])
        w = importance_weights_torch(pl_log_conditionals_torch(s, pos, check=False), q, check=False)
        loss = -((w * (r - shift[:, None])).sum(1) * inv_n).sum()
        loss.backward()
        opt.step()
    th = theta.detach().cpu().numpy().reshape(len(rows), K, L, m)
    bb = b.detach().cpu().numpy().reshape(len(rows), K, L)
    return [[LinearPolicy(th[i, k].copy(), bb[i, k].copy()) for k in range(K)] for i in range(len(rows))]


def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def head_estimates(pol: LinearPolicy, vlog: KnownAnswerLog, p: int, dm: LinearPolicy | None) -> dict:
    """Every reported estimator of `pol` (test-time support Phi^p) on the validation log `vlog`."""
    vcontexts = vlog.contexts
    s_phi = phi_logits(pol, vcontexts, p)
    pos = selector_pos(vlog.cand_pos, p)
    logpi = pl_log_conditionals(s_phi, pos)
    aux = None
    if dm is not None:
        rhat = _sigmoid(dm.scores(vcontexts.X))
        aux = {"dm_term": pl_expectations(s_phi, np.take_along_axis(rhat, vcontexts.cand[:, :p], 1), pos),
               "rhat_logged": np.take_along_axis(rhat, vlog.actions, 1)}
    return validation_estimates({"policy": logpi, "selector": logpi}, vlog.q, vlog.rewards, aux)


def head_rows(T: float, seed: int, n: int, ps, lams, fracs, folds, epochs: int, lr: float, n_eval: int,
              dr_features: int | None, device: str = "cpu") -> pd.DataFrame:
    """One (T, seed): per regime and head, the true value and the validation criteria."""
    world = make_world(temperature=T, seed=seed)
    ell = world.ell
    contexts = sample_contexts(world, n, seed=seed * 1000 + 1)
    log = simulate_log(world, contexts, seed=seed * 1000 + 2)
    ev = sample_contexts(world, n_eval, seed=10_000 + seed)
    v_rho = logging_value(ev, ell)
    shifts = [1.0 - lam for lam in lams]                                     # reward shift 1 - lambda
    # every (regime, fold) split of the one log: (name, fit_rows, val_rows); "all" trains on everything
    splits = [("all", np.arange(n, dtype=np.int64), None)]
    splits += [(f"{round(100 * f)}%", *validation_split(n, f, seed)) for f in fracs]
    splits += [(f"K={k}", fit, val) for k in folds for fit, val in fold_splits(n, k, seed)]
    dms = [None if val is None or dr_features is None
           else train_dm(subset_log(log, fit), dr_features, epochs=epochs, lr=lr, seed=seed)
           for _, fit, val in splits]
    vlogs = [None if val is None else subset_log(log, val) for _, _, val in splits]
    out = []
    for p in ps:
        heads = train_poxm_grid(log, [fit for _, fit, _ in splits], p, shifts, epochs=epochs, lr=lr, device=device)
        v_all = [value_softmax(h, ev, p, ell) for h in heads[0]]
        est: dict[str, list[list[dict]]] = {}     # regime -> per fold (one for a hold-out) -> per lambda
        V: dict[str, list[float]] = {}            # regime -> per lambda: the true value of the selectable head
        for (name, _, val), hs, vlog, dm in zip(splits, heads, vlogs, dms):
            if val is None:
                continue
            est.setdefault(name, []).append([head_estimates(h, vlog, p, dm) for h in hs])
            # hold-out: the head trained without the slice; cross-fit: the head retrained on all n
            V[name] = v_all if name.startswith("K=") else [value_softmax(h, ev, p, ell) for h in hs]
        for name, folds_est in est.items():
            for k, lam in enumerate(lams):
                row = {"T": T, "seed": seed, "regime": name, "p": p, "lam": lam, "V": V[name][k], "V_all": v_all[k],
                       "V_rho": v_rho, "ESS": float(np.mean([f[k]["SNIS"].ess for f in folds_est]))}
                row.update(crossfit_values([f[k] for f in folds_est]))   # one fold: its own values
                out.append(row)
    return pd.DataFrame(out)


def _job(args) -> pd.DataFrame:
    torch.set_num_threads(1)
    return head_rows(*args)


def choices(rows: pd.DataFrame, criteria) -> pd.DataFrame:
    """Per (T, seed, regime, criterion): the chosen head, its regret, true value, and the Spearman."""
    recs = []
    for (T, seed, regime), g in rows.groupby(["T", "seed", "regime"], sort=False):
        best = g["V"].max()
        for c in criteria:
            chosen = g.loc[g[c].idxmax()]
            rho = spearmanr(g[c], g["V"]).statistic if g[c].nunique() > 1 else np.nan
            recs.append({"T": T, "seed": seed, "regime": regime, "criterion": c, "regret": best - chosen["V"],
                         "V_sel": chosen["V"], "V_sel_all": chosen["V_all"], "V_rho": chosen["V_rho"],
                         "below_logging": float(chosen["V"] < chosen["V_rho"]), "spearman": rho,
                         "chosen_p": chosen["p"], "chosen_lam": chosen["lam"]})
    return pd.DataFrame(recs)


def paired(ch: pd.DataFrame, base: str, base_value: str = "V_sel") -> pd.DataFrame:
    """Per criterion and regime != base: mean and standard error over (T, seed) of V_sel - base_value(base)
    (base_value "V_sel_all": the base regime's choice retrained on all n), and the share of (T, seed) where
    the regime's choice is truly better."""
    v = ch.pivot_table(index=["T", "seed", "criterion"], columns="regime", values="V_sel")
    b = ch.pivot_table(index=["T", "seed", "criterion"], columns="regime", values=base_value)[base]
    out = {}
    for r in v.columns:
        if r == base:
            continue
        d = (v[r] - b).groupby(level="criterion")
        out[(r, "diff")] = d.mean()
        out[(r, "se")] = d.sem()
        out[(r, "better")] = d.apply(lambda x: float((x > 0).mean()))
    return pd.DataFrame(out)


def summarise(ch: pd.DataFrame) -> pd.DataFrame:
    return (ch.groupby(["T", "regime", "criterion"], sort=False)
              .agg(regret=("regret", "mean"), V_sel=("V_sel", "mean"), V_sel_all=("V_sel_all", "mean"),
                   below_logging=("below_logging", "mean"), spearman=("spearman", "mean"),
                   seeds=("seed", "nunique")).reset_index())


def _fraction(text: str) -> float:
    try:
        f = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1), got {text!r}") from None
    if not 0.0 < f < 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1), got {text!r}")
    return f


def _folds(text: str) -> int:
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int >= 2, got {text!r}") from None
    if k < 2:
        raise argparse.ArgumentTypeError(f"expected an int >= 2, got {text!r}")
    return k


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.5, 0.25])
    ap.add_argument("--seeds", type=int, default=6, help="worlds/logs per temperature (default 6)")
    ap.add_argument("--n", type=int, default=2222, help="log size, validation included (default 2222: "
                    "a 10%% slice leaves 2000 training instances)")
    ap.add_argument("--val-fractions", type=_fraction, nargs="*", default=[0.1, 0.2, 0.3],
                    help="hold-out regimes: share of the log held out as the validation log")
    ap.add_argument("--folds", type=_folds, nargs="*", default=[2, 5], help="cross-fitting regimes: K folds")
    ap.add_argument("--ps", type=int, nargs="+", default=[5, 10, 20])
    ap.add_argument("--lams", type=float, nargs="+", default=[0.7, 0.8, 0.9, 1.0])
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--n-eval", type=int, default=2000, help="fresh contexts for the true values")
    ap.add_argument("--dr-features", type=int, default=8,
                    help="features the DR reward model sees (16 = well specified); -1 leaves DR out")
    ap.add_argument("--device", default="cpu", help="where the heads train: cpu (default) or cuda")
    ap.add_argument("--workers", type=int, default=1, help="processes over the (T, seed) pairs (default 1)")
    ap.add_argument("--out", type=Path, default=None, help="write every head's row as CSV here")
    a = ap.parse_args(argv)
    if not a.val_fractions and not a.folds:
        ap.error("--val-fractions, --folds: expected at least one regime")
    if a.seeds < 1 or a.n < 10 or a.n_eval < 1 or a.epochs < 1 or a.workers < 1:
        ap.error("--seeds, --n-eval, --epochs, --workers: expected positive ints, --n >= 10")
    if a.device not in ("cpu", "cuda") or (a.device == "cuda" and not torch.cuda.is_available()):
        ap.error(f"--device: expected cpu or cuda (with a GPU torch sees), got {a.device!r}")
    if not -1 <= a.dr_features <= 16:
        ap.error(f"--dr-features: expected -1 (no DR) or 0..16, got {a.dr_features}")
    torch.set_num_threads(1)
    t0 = time.time()
    dr = None if a.dr_features < 0 else a.dr_features
    jobs = [(T, s, a.n, a.ps, a.lams, a.val_fractions, a.folds, a.epochs, a.lr, a.n_eval, dr, a.device)
            for T in a.temperatures for s in range(a.seeds)]
    if a.workers == 1:
        parts = []
        for job in jobs:
            parts.append(_job(job))
            print(f"  T={job[0]} seed={job[1]}: {time.time() - t0:.0f} s", flush=True)
    else:
        contexts = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(a.workers, len(jobs)), mp_context=contexts) as pool:
            parts = list(pool.map(_job, jobs))
    rows = pd.concat(parts, ignore_index=True)
    criteria = [c for c in CRITERIA if c in rows]
    ch = choices(rows, criteria)
    summary = summarise(ch)
    pd.set_option("display.width", 200)
    regimes = list(dict.fromkeys(rows["regime"]))
    print(f"known-answer selection: n={a.n}, regimes {regimes}, p {a.ps}, lambda {a.lams}, {a.seeds} seeds per T, "
          f"{a.epochs} epochs, DR features {dr}, {time.time() - t0:.0f} s")
    print("true values: V(rho) and the heads trained on all n")
    print(rows[rows["regime"] == regimes[0]].groupby("T")[["V_rho", "V_all"]].agg(["mean", "max"]).round(4).to_string())
    for T, g in summary.groupby("T", sort=False):
        print(f"\nT = {T}: mean regret | true value of the chosen head | share below V(rho) | Spearman")
        wide = g.pivot(index="criterion", columns="regime", values=["regret", "V_sel", "below_logging", "spearman"])
        print(wide.reindex(index=criteria).reindex(columns=regimes, level=1).round(3).to_string())
    pooled = ch.groupby(["regime", "criterion"], sort=False).agg(
        regret=("regret", "mean"), regret_se=("regret", "sem"), V_sel=("V_sel", "mean"),
        V_sel_all=("V_sel_all", "mean"), below=("below_logging", "sum"), spearman=("spearman", "mean")).reset_index()
    print(f"\nall temperatures, {ch.groupby(['T', 'seed']).ngroups} seed-regimes (below = how many chose a head "
          f"below V(rho); V_sel_all = the chosen (p, lambda) retrained on all n):")
    print(pooled.pivot(index="criterion", columns="regime",
                       values=["regret", "regret_se", "V_sel", "V_sel_all", "below", "spearman"])
          .reindex(index=criteria).reindex(columns=regimes, level=1).round(3).to_string())
    for col, what in (("V_sel", ""), ("V_sel_all", ", its choice retrained on all n")):
        pd_ = paired(ch, regimes[0], col)
        if not pd_.empty:
            print(f"\npaired against {regimes[0]}{what} (same world and log): mean difference of the chosen head's "
                  f"true value, its standard error, and the share of seed-regimes where it is higher")
            print(pd_.reindex(index=criteria).round(3).to_string())
    if a.out:
        tmp = a.out.with_name(a.out.name + ".tmp")
        rows.to_csv(tmp, index=False)
        tmp.replace(a.out)
        print(f"rows -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
