"""The share of the logging → skyline gap each method closes: the figure comparable across datasets.

Per (dataset, variant, method) and seed, at the selected heads, on test R@5 (a greedy method's P@5):
share_s = (R@5(method) − R@5(logging)) / (R@5(skyline) − R@5(logging)), 0 at the logging policy, 1
at the supervised skyline (the paper's end-to-end one where the run trained it, else the head on the
frozen features); reported: the mean over seeds and the range. The paper's Table 2 gives the same
ratio for its datasets (e.g. POXM at EUR-Lex A: (R@5 POXM − 31.23) / (61.10 − 31.23)). A pure function
of result rows and a selection frame.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from orchestration.report.claims import _last_values, _per_seed
from orchestration.report.table_format import Table
from orchestration.report.method_names import method_list, method_name
from orchestration.selection import selected_rows, selection_label

GAP_COLUMNS = ["criterion", "dataset", "variant", "method", "skyline", "share", "share_min", "share_max", "n"]
REFERENCES = ("logging", "skyline", "skyline_e2e")


def gap_shares(rows: pd.DataFrame, selection: pd.DataFrame, criterion: str, metric: str = "R@5") -> pd.DataFrame:
    label = selection_label(criterion)
    sel = selection[selection["selection"] == label]
    if sel.empty:
        return pd.DataFrame(columns=GAP_COLUMNS)
    values = _last_values(selected_rows(rows, sel, label, split="test"))
    out = []
    for (d, v), g in sel.groupby(["dataset", "variant"], sort=True):
        d, v = str(d), str(v)
        methods = set(g["method"].astype(str))
        sky = "skyline_e2e" if "skyline_e2e" in methods else "skyline" if "skyline" in methods else None
        if sky is None or "logging" not in methods:
            continue
        lo, hi = _per_seed(values, d, v, "logging", metric), _per_seed(values, d, v, sky, metric)
        for m in sorted(methods - set(REFERENCES)):
            x = _per_seed(values, d, v, m, metric)
            seeds = sorted(set(x.index) & set(lo.index) & set(hi.index))
            gap = hi.loc[seeds].to_numpy(float) - lo.loc[seeds].to_numpy(float)
            ok = np.abs(gap) > 1e-12
            if not ok.any():
                continue
            s = (x.loc[seeds].to_numpy(float)[ok] - lo.loc[seeds].to_numpy(float)[ok]) / gap[ok]
            out.append({"criterion": criterion, "dataset": d, "variant": v, "method": m, "skyline": sky,
                        "share": float(s.mean()), "share_min": float(s.min()), "share_max": float(s.max()),
                        "n": int(len(s))})
    return pd.DataFrame(out, columns=GAP_COLUMNS)


def gap_table(frame: pd.DataFrame) -> Table:
    """Rows (dataset, variant), a column per method: the mean share ×100 and its range over seeds."""
    present = set(frame["method"])
    methods = [m for m in method_list(list(present)) if m in present]
    columns = ["Dataset", "Variant"] + [method_name(m) for m in methods]
    rows = []
    for (d, v), g in frame.groupby(["dataset", "variant"], sort=True):
        g = g.set_index("method")
        cells = []
        for m in methods:
            if m not in g.index:
                cells.append("—")
                continue
            r = g.loc[m]
            rng = f" [{100 * r['share_min']:.0f}, {100 * r['share_max']:.0f}]" if r["n"] > 1 else ""
            cells.append(f"{100 * r['share']:.0f}{rng}")
        rows.append([d, v] + cells)
    sky = sorted(set(frame["skyline"])) if len(frame) else []
    notes = ["Share of the gap between the logging policy and the supervised skyline closed by each method, on "
             "test R@5 at the selected heads (×100: 0 = the logging policy, 100 = the skyline; negative = below "
             "the logging policy), "
             + ("mean over seeds [min, max]" if len(frame) and int(frame["n"].max()) > 1 else "at one seed")
             + ". Skyline: "
             + (", ".join(sky) if sky else "—") + " (skyline_e2e is the paper's, trained end to end)."]
    if len(frame) and not math.isfinite(float(frame["share"].mean())):
        notes.append("Some cells are undefined (a skyline no better than the logging policy).")
    return Table(name="gap_share", title="Share of the logging → skyline gap each method closes", columns=columns,
                 rows=rows, notes=notes, frame=frame)
