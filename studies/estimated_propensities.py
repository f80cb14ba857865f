"""What each method and each selection criterion loses when the logging propensities are estimated from
the log instead of recorded (dataset option `logging_propensities: estimated`, docs/estimators.md §7).

Reads two finished runs of one config (the second with `datasets.0.logging_propensities=estimated`),
as run directories or as their result rows (`results/rows.csv`, or the final rows a results folder keeps):
both train the same heads on the same prepared data and logs (one prepare cache), and differ only in the
rho and q every importance weight reads. For every criterion of the runs' validation rows, the honest
selection (`orchestration.selection.select`) of each run picks a grid point per (method, seed); the table
gives the chosen point's test R@5 with recorded and with estimated propensities, and the paired difference
over seeds. With `--cache-dir`, how far the estimated propensities are from the recorded ones on the
validation log (the model is refitted here exactly as a trial fits it).

  python -m studies.estimated_propensities RUN_RECORDED RUN_ESTIMATED [--cache-dir CACHE] [--out FOLDER]

Writes FOLDER/loss.csv and FOLDER/loss.md (and FOLDER/propensities.csv with --cache-dir). The test split's
labels are read to measure, never to choose.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from orchestration.selection import ORACLE, select, selection_label, val_criteria

COLUMNS = ["method", "criterion", "seeds", "recorded", "estimated", "diff", "diff_sd", "same_point"]


def _rows(run: Path) -> pd.DataFrame:
    """A run directory's result rows, or a rows file (.csv, .csv.xz: the published final rows)."""
    return pd.read_csv(run / "results" / "rows.csv" if run.is_dir() else run)


def loss_table(recorded: pd.DataFrame, estimated: pd.DataFrame) -> pd.DataFrame:
    """One row per (method, criterion): mean test R@5 x 100 of the chosen point under each run, their mean
    paired difference (estimated - recorded) over seeds and its standard deviation, and the share of seeds
    whose chosen (p, lam) is the same in both. Last, per method, the oracle (the grid point best on test):
    what training with estimated propensities costs, apart from selecting with them."""
    out = []
    crits = [c for c in val_criteria(recorded) if c in val_criteria(estimated)]
    for crit, label in [(c, selection_label(c)) for c in crits] + [(crits[0], ORACLE)]:
        a, b = (s[s["selection"] == label] for s in (select(recorded, crit), select(estimated, crit)))
        keys = ["dataset", "variant", "method", "seed"]
        j = a.merge(b, on=keys, suffixes=("_rec", "_est"))
        for m, g in j.groupby("method", sort=False):
            d = 100 * (g["test_R@5_est"] - g["test_R@5_rec"])
            same = (g["p_rec"] == g["p_est"]) & ((g["lam_rec"] == g["lam_est"]) | (g["lam_rec"].isna() & g["lam_est"].isna()))
            out.append({"method": m, "criterion": crit if label != ORACLE else "oracle (test)", "seeds": len(g), "recorded": 100 * g["test_R@5_rec"].mean(),
                        "estimated": 100 * g["test_R@5_est"].mean(), "diff": d.mean(),
                        "diff_sd": d.std(ddof=1) if len(g) > 1 else np.nan, "same_point": same.mean()})
    return pd.DataFrame(out, columns=COLUMNS)


def markdown(t: pd.DataFrame) -> str:
    lines = ["| method | criterion | seeds | R@5 recorded q | R@5 estimated q | difference (sd) | same point |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in t.itertuples(index=False):
        sd = "" if not np.isfinite(r.diff_sd) else f" ({r.diff_sd:.2f})"
        lines.append(f"| {r.method} | {r.criterion} | {r.seeds} | {r.recorded:.2f} | {r.estimated:.2f} | "
                     f"{r.diff:+.2f}{sd} | {r.same_point:.0%} |")
    return "\n".join(lines) + "\n"


def pivot_markdown(t: pd.DataFrame) -> str:
    """The paired differences (estimated - recorded, x 100) as one table: a row per method, a column per
    criterion, then the oracle."""
    crits = list(dict.fromkeys(t["criterion"]))
    lines = ["| method | " + " | ".join(crits) + " |", "|---|" + "---:|" * len(crits)]
    for m, g in t.groupby("method", sort=False):
        cell = {r.criterion: f"{r.diff:+.2f}" for r in g.itertuples(index=False)}
        lines.append(f"| {m} | " + " | ".join(cell.get(c, "") for c in crits) + " |")
    return "\n".join(lines) + "\n"


def propensity_error(run: Path, cache_dir: Path) -> pd.DataFrame:
    """Per seed: the fitted score coefficient a, and on the validation log the median and 90th percentile of
    |log q_hat / q| and the mean total variation between rho_hat and rho over the candidates."""
    from poxm_core.bandit.estimated_propensity import with_estimated_propensities
    from poxm_core.config.schema import load_config
    from poxm_core.prepare.pipeline import load_prepared

    cfg = load_config(run / "config.yaml")
    d = cfg.datasets[0]
    out = []
    for v in d.variants:
        for seed in cfg.seeds:
            prep = load_prepared(cfg, d.name, v.name, seed, cache_dir)
            est = with_estimated_propensities(prep, seed=int(seed))
            lr = np.abs(np.log(est.log_val.q) - np.log(prep.log_val.q)).ravel()
            rows = prep.log_val.instance
            tv = 0.5 * np.abs(est.policy_train.rho[rows] - prep.policy_train.rho[rows]).sum(1)
            out.append({"dataset": d.name, "variant": v.name, "seed": seed, "a": est.meta["propensities"]["a"],
                        "abs_log_q_ratio_median": float(np.median(lr)),
                        "abs_log_q_ratio_p90": float(np.quantile(lr, 0.9)), "rho_tv_mean": float(tv.mean())})
    return pd.DataFrame(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studies.estimated_propensities", description=__doc__.split("\n\n")[0])
    ap.add_argument("recorded", type=Path)
    ap.add_argument("estimated", type=Path)
    ap.add_argument("--cache-dir", type=Path)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    t = loss_table(_rows(a.recorded), _rows(a.estimated))
    print(pivot_markdown(t) + "\n" + markdown(t))
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        t.to_csv(a.out / "loss.csv", index=False, float_format="%.4f")
        (a.out / "loss.md").write_text(pivot_markdown(t) + "\n" + markdown(t))
    if a.cache_dir:
        e = propensity_error(a.recorded, a.cache_dir)
        print(e.to_string(index=False))
        if a.out:
            e.to_csv(a.out / "propensities.csv", index=False, float_format="%.4f")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
