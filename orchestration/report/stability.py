"""Selection stability: how often a criterion picked the same (p, λ) across seeds.

Per (dataset, variant, method) with a grid (more than one finished point), over the seeds with an
honest choice: the modal (p, λ) (the point chosen for most seeds; ties go to the smaller p, then the
smaller λ, as selection's own ties do), the share of seeds that chose it, and how many distinct
points were chosen. A pure function of a selection frame (``selection.select``).
"""
from __future__ import annotations

import math

import pandas as pd

from orchestration.report.aggregate import MISSING, _lam_text
from orchestration.report.table_format import Table
from orchestration.report.method_names import method_list, method_name
from orchestration.selection import PAPER_CRITERION, selection_label

STABILITY_COLUMNS = ["criterion", "dataset", "variant", "method", "p", "lam", "share", "n_modal", "n_seeds",
                     "n_distinct"]


def stability(selection: pd.DataFrame, criterion: str) -> pd.DataFrame:
    """Modal (p, lam), its share of seeds, and the number of distinct choices, per (dataset, variant,
    method) with more than one grid point, for the honest choice by `criterion`. Columns
    ``STABILITY_COLUMNS`` (p -1 and lam NaN where the method does not use them)."""
    s = selection[(selection["selection"] == selection_label(criterion)) & (selection["n_points"] > 1)]
    if s.empty:
        return pd.DataFrame([], columns=STABILITY_COLUMNS)
    keys = ["dataset", "variant", "method"]
    # all groups at once (a few hundred in a large sweep, each a handful of pandas calls before):
    # a group's first row per seed; per group and (p, λ) the seeds that chose it (k); the modal point
    # is the first after sorting by k (descending), p, λ
    pts = s.drop_duplicates(keys + ["seed"])
    pts = pts.assign(_lam=pts["lam"].astype(float).fillna(math.inf))
    counts = pts.groupby(keys + ["p", "_lam"], sort=True).size().reset_index(name="k")
    top = (counts.sort_values(keys + ["k", "p", "_lam"], ascending=[True] * len(keys) + [False, True, True],
                              kind="stable").drop_duplicates(keys).set_index(keys))
    n_seeds = pts.groupby(keys, sort=True).size()
    n_distinct = counts.groupby(keys, sort=True).size()
    recs = []
    for (d, v, m), n in n_seeds.items():
        t = top.loc[(d, v, m)]
        lam = float(t["_lam"])
        recs.append({"criterion": criterion, "dataset": d, "variant": v, "method": m, "p": int(t["p"]),
                     "lam": lam if math.isfinite(lam) else math.nan, "share": int(t["k"]) / int(n),
                     "n_modal": int(t["k"]), "n_seeds": int(n), "n_distinct": int(n_distinct[(d, v, m)])})
    return pd.DataFrame(recs, columns=STABILITY_COLUMNS)


def _point_text(p: int, lam: float) -> str:
    parts = ([f"p {p}"] if p >= 0 else []) + ([f"λ {_lam_text(lam)}"] if math.isfinite(lam) else [])
    return ", ".join(parts) or MISSING


def stability_table(frames: list[pd.DataFrame], criteria: list[str]) -> Table:
    """Per (dataset, variant, method): for each criterion the modal (p, λ) and 'k/n' seeds that chose it."""
    columns = ["Dataset", "Variant", "Method"]
    for c in criteria:
        h = f"{c} (paper's)" if c == PAPER_CRITERION else c
        columns += [f"{h}: modal (p, λ)", f"{h}: seeds"]
    frame = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) \
        else pd.DataFrame(columns=STABILITY_COLUMNS)
    keys = frame[["dataset", "variant", "method"]].drop_duplicates()
    order = {m: i for i, m in enumerate(method_list(list(keys["method"])))}
    keys = sorted(map(tuple, keys.to_numpy()), key=lambda k: (k[0], k[1], order.get(k[2], len(order))))
    rows = []
    first = {k: pos[0] for k, pos in frame.groupby(["criterion", "dataset", "variant", "method"], sort=False)
             .indices.items()}    # each (criterion, dataset, variant, method)'s first row, found once
    for d, v, m in keys:
        row = [d, v, method_name(m)]
        for c in criteria:
            if (c, d, v, m) not in first:
                row += [MISSING, MISSING]
                continue
            r = frame.iloc[first[(c, d, v, m)]]
            extra = f" ({int(r['n_distinct'])} points)" if r["n_distinct"] > 1 else ""
            row += [_point_text(int(r["p"]), float(r["lam"])), f"{int(r['n_modal'])}/{int(r['n_seeds'])}{extra}"]
        rows.append(row)
    names = ", ".join(f"{c} (the paper's criterion)" if c == PAPER_CRITERION else c for c in criteria)
    notes = [f"Per method with a (p, λ) grid: the point the criterion chose for most seeds (ties: smaller p, "
             f"then smaller λ) and how many seeds chose it; (k points): distinct points chosen over the seeds. "
             f"Criteria: {names}. Per-seed choices: selection.csv."]
    if not rows:
        notes.append("No method with more than one finished grid point.")
    return Table(name="selection_stability", title="Selection stability across seeds", columns=columns,
                 rows=rows, notes=notes, frame=frame)
