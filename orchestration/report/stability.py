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
from orchestration.report.tables import method_list, method_name
from orchestration.selection import PAPER_CRITERION, selection_label

STABILITY_COLUMNS = ["criterion", "dataset", "variant", "method", "p", "lam", "share", "n_modal", "n_seeds",
                     "n_distinct"]


def stability(selection: pd.DataFrame, criterion: str) -> pd.DataFrame:
    """Modal (p, lam), its share of seeds, and the number of distinct choices, per (dataset, variant,
    method) with more than one grid point, for the honest choice by `criterion`. Columns
    ``STABILITY_COLUMNS`` (p -1 and lam NaN where the method does not use them)."""
    s = selection[(selection["selection"] == selection_label(criterion)) & (selection["n_points"] > 1)]
    recs = []
    for (d, v, m), g in s.groupby(["dataset", "variant", "method"], sort=True):
        pts = g.drop_duplicates("seed").assign(_lam=g["lam"].astype(float).fillna(math.inf))
        counts = pts.groupby(["p", "_lam"], sort=True).size().reset_index(name="k")
        top = counts.sort_values(["k", "p", "_lam"], ascending=[False, True, True], kind="stable").iloc[0]
        lam = float(top["_lam"])
        recs.append({"criterion": criterion, "dataset": d, "variant": v, "method": m, "p": int(top["p"]),
                     "lam": lam if math.isfinite(lam) else math.nan, "share": int(top["k"]) / len(pts),
                     "n_modal": int(top["k"]), "n_seeds": len(pts), "n_distinct": len(counts)})
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
    for d, v, m in keys:
        row = [d, v, method_name(m)]
        for c in criteria:
            r = frame[(frame["criterion"] == c) & (frame["dataset"] == d) & (frame["variant"] == v)
                      & (frame["method"] == m)]
            if r.empty:
                row += [MISSING, MISSING]
                continue
            r = r.iloc[0]
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
