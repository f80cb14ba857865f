"""The report's logging-policy statistics per variant (logging_<d>): prepare.csv's values, the
logging policy's own metrics taken from the logging trial's test rows where it ran."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from orchestration.report.aggregate import MISSING
from orchestration.report.table_format import Table


def _stat_text(vals: np.ndarray, scale: float, counts: bool) -> str:
    """'20000' for a count (every seed an integer), '20000 ± 12' over seeds; else '%.2f' values."""
    mean, sd = scale * vals.mean(), (scale * vals.std(ddof=1) if len(vals) > 1 else math.nan)
    if counts and mean == round(mean):
        return f"{int(round(mean))}" + (f" ± {sd:.0f}" if len(vals) > 1 and sd > 0 else "")
    if counts:
        return f"{mean:.1f}" + (f" ± {sd:.1f}" if len(vals) > 1 else "")
    return f"{mean:.2f}" + (f" ± {sd:.2f}" if len(vals) > 1 else "")


LOGGING_POLICY_PREFIX = "logging_policy/"


def logging_policy_values(prepare: pd.DataFrame, rows: pd.DataFrame | None) -> pd.DataFrame:
    """prepare.csv with its 'logging_policy/<metric>' values replaced, per (dataset, variant, seed),
    by the logging method's final test row of that metric where one exists.

    Both are the expected test reward of rho's slates, but computed by two evaluations (the prepare
    stage's and the logging trial's); they can differ (e.g. an exact value against a Monte-Carlo one
    from a cache written by an older evaluation). The results tables show the trial's, so every place
    of the report shows that one value."""
    if rows is None or rows.empty or prepare.empty:
        return prepare
    lg = rows[(rows["method"] == "logging") & rows["final"] & (rows["split"] == "test")]
    if lg.empty:
        return prepare
    lg = lg.sort_values("epoch", kind="stable").drop_duplicates(["dataset", "variant", "seed", "metric"], keep="last")
    lg = lg.assign(metric=LOGGING_POLICY_PREFIX + lg["metric"].astype(str), seed=lg["seed"].astype("int64"))
    keys = ["dataset", "variant", "seed", "metric"]
    base = prepare.assign(seed=pd.to_numeric(prepare["seed"], errors="coerce"))
    is_lp = base["metric"].str.startswith(LOGGING_POLICY_PREFIX)
    ours = lg[lg["metric"].isin(set(base.loc[is_lp, "metric"]))][keys + ["value"]]
    merged = base.merge(ours.rename(columns={"value": "_trial"}), on=keys, how="left")
    merged["value"] = merged["_trial"].where(merged["_trial"].notna(), merged["value"])
    extra = ours.merge(base[keys], on=keys, how="left", indicator=True)
    extra = extra[extra["_merge"] == "left_only"].drop(columns="_merge")
    return pd.concat([merged.drop(columns="_trial"), extra], ignore_index=True)[list(prepare.columns)]


AS_IS_STATS = ("variant/T", "match/n_heldout")


def logging_stats_table(dataset: str, prepare: pd.DataFrame, rows: pd.DataFrame | None = None) -> Table:
    """Logging-policy statistics (prepare.csv) per variant: every metric, mean ± std over seeds.

    Values in [0, 1] are shown x100; others (e.g. entropies) as they are. With `rows`, the
    logging_policy/* metrics are the logging method's test rows (``logging_policy_values``)."""
    prepare = logging_policy_values(prepare[prepare["dataset"] == dataset], rows)
    sub = prepare[prepare["dataset"] == dataset]
    variants = sorted(sub["variant"].unique())
    cov = sub[sub["metric"].str.startswith("covering@")]
    other = sorted(set(sub["metric"]) - set(cov["metric"]))
    ks = sorted(int(m.split("@")[1]) for m in cov["metric"].unique())
    show_cov = [f"covering@{k}" for k in ks if k in (1, 5, 10, 20, 50, 100) or k == ks[-1]]
    metrics = other + show_cov
    columns = ["Statistic"] + [f"variant {v}" for v in variants]
    rows, recs = [], []
    at = sub.groupby(["variant", "metric"], sort=False).indices     # (variant, metric) -> its rows, in order
    values = sub["value"].to_numpy(dtype=float)
    for k in metrics:
        row = [k]
        for v in variants:
            vals = values[at.get((v, k), [])]
            vals = vals[np.isfinite(vals)]
            if not len(vals):
                row.append(MISSING)
                continue
            # data/* are dataset facts (sizes, propensity A/B), never rates: shown as they are
            # a temperature (variant/T) or a count is never a rate, whatever its range: shown as it is
            frac = (not k.startswith("data/") and k not in AS_IS_STATS
                    and bool(np.all((vals >= 0) & (vals <= 1))))
            sc = 100.0 if frac else 1.0
            txt = _stat_text(vals, sc, counts=not frac and bool(np.all(vals == np.round(vals))))
            row.append(txt)
            recs.append({"dataset": dataset, "variant": v, "metric": k, "scale": sc,
                         "mean": sc * vals.mean(), "std": sc * vals.std(ddof=1) if len(vals) > 1 else math.nan,
                         "n": len(vals)})
        rows.append(row)
    notes = ["Rates and fractions ×100, dataset facts (data/*) as they are, counts as integers (mean ± std over "
             "seeds where there are several); covering@k: share of test instances' true labels "
             "inside the top-k of ρ; logging_model/*: greedy ranking of the logging model; logging_policy/*: "
             "expected test reward of ρ's slates, the logging trial's values (as in the results tables) where it "
             "ran. “—”: not recorded for that variant. Full covering curve: the covering figure and the CSV."]
    return Table(name=f"logging_{dataset}", title=f"Logging policy statistics — {dataset}",
                 columns=columns, rows=rows, notes=notes, frame=pd.DataFrame(recs))
