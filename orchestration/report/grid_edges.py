"""How much each method searched, and how often its choice sat on the edge of its grid.

An unequal tuning budget biases every comparison, and a choice on the edge of a grid says the grid
may have been too small. Per method (over every dataset, variant and seed of the run), for the honest
choice of one criterion: the grid points it searched (distinct (p, λ) with final validation rows, the
largest over its datasets × variants), and the share of seeds whose chosen p was the smallest or the
largest p searched, likewise for λ, and for either. A grid of one value on an axis has no edge there.
A pure function of result rows and a selection frame (``selection.select``).
"""
from __future__ import annotations

import math

import pandas as pd

from orchestration.report.table_format import Table
from orchestration.report.method_names import method_list, method_name
from orchestration.selection import PAPER_CRITERION, selection_label

EDGE_COLUMNS = ["criterion", "method", "points", "p_values", "lam_values", "choices", "p_edge", "lam_edge",
                "any_edge"]


def _values(x: pd.Series) -> list[float]:
    v = sorted({float(a) for a in x if math.isfinite(float(a)) and float(a) >= 0})
    return v


def grid_edges(rows: pd.DataFrame, selection: pd.DataFrame, criterion: str) -> pd.DataFrame:
    """One row per method with more than one grid point: columns ``EDGE_COLUMNS`` (shares in [0, 1])."""
    val = rows[(rows["split"] == "val") & rows["final"]]
    keys = ["dataset", "variant", "method"]
    grids = {k: (_values(g["p"]), _values(g["lam"]), len(g[["p", "lam"]].drop_duplicates()))
             for k, g in val.groupby(keys, sort=False)}
    s = selection[selection["selection"] == selection_label(criterion)].drop_duplicates(keys + ["seed"])
    out = []
    for m, sm in s.groupby("method", sort=False):
        n = p_edge = lam_edge = any_edge = 0
        points, ps, lams = 0, set(), set()
        for r in sm.itertuples(index=False):
            g = grids.get((r.dataset, r.variant, m))
            if g is None or g[2] <= 1:
                continue
            gp, gl, npts = g
            points = max(points, npts); ps |= set(gp); lams |= set(gl)
            pe = len(gp) > 1 and float(r.p) in (gp[0], gp[-1])
            le = len(gl) > 1 and math.isfinite(float(r.lam)) and float(r.lam) in (gl[0], gl[-1])
            n += 1; p_edge += pe; lam_edge += le; any_edge += pe or le
        if n:
            out.append({"criterion": criterion, "method": m, "points": points,
                        "p_values": " ".join(f"{int(p)}" for p in sorted(ps)),
                        "lam_values": " ".join(f"{x:g}" for x in sorted(lams)), "choices": n,
                        "p_edge": p_edge / n, "lam_edge": lam_edge / n, "any_edge": any_edge / n})
    return pd.DataFrame(out, columns=EDGE_COLUMNS)


PAPER_P = (10, 20, 50, 100)
PAPER_LAM = (0.7, 0.8, 0.9, 1.0)


def paper_grid(p_values: str, lam_values: str) -> bool:
    """Whether a method searched at least the paper's values on each axis it uses (a method without p,
    like BanditNet, or without λ, like DR-POXM, is judged on its own axis)."""
    ps = {float(x) for x in str(p_values or "").split()}
    lams = {float(x) for x in str(lam_values or "").split()}
    return (not ps or ps >= set(map(float, PAPER_P))) and (not lams or lams >= set(PAPER_LAM))


def grid_edges_table(frames: list[pd.DataFrame], criteria: list[str]) -> Table:
    frame = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) \
        else pd.DataFrame(columns=EDGE_COLUMNS)
    columns = ["Method", "grid points", "p searched", "λ searched"]
    for c in criteria:
        h = f"{c} (paper's)" if c == PAPER_CRITERION else c
        columns += [f"{h}: p on an edge", f"{h}: λ on an edge", f"{h}: either"]
    rows = []
    present = set(frame["method"])
    for m in [m for m in method_list(list(present)) if m in present]:
        here = frame[frame["method"] == m].set_index("criterion")
        first = here.iloc[0]
        row = [method_name(m), str(int(first["points"])), first["p_values"] or "—", first["lam_values"] or "—"]
        for c in criteria:
            if c not in here.index:
                row += ["—"] * 3
                continue
            r = here.loc[c]
            pct = lambda x: f"{100 * x:.0f} %"   # noqa: E731
            row += [pct(r["p_edge"]) if r["p_values"].count(" ") else "—",
                    pct(r["lam_edge"]) if r["lam_values"].count(" ") else "—", pct(r["any_edge"])]
        rows.append(row)
    notes = ["Per method: the grid points it searched (the most over its datasets × variants; the paper's grids "
             "are p ∈ {10, 20, 50, 100} × λ ∈ {0.7, 0.8, 0.9, 1.0}), and the share of its selected choices "
             "(every dataset, variant and seed) whose p, λ or either was the smallest or largest value searched: "
             "a high share says the grid may have stopped short of the best point. The paper's grids, the same "
             "for every method, are what published runs search; a smaller grid is a CPU convenience."]
    short = [method_name(r.method) for r in frame.itertuples(index=False) if not paper_grid(r.p_values, r.lam_values)]
    if short:
        notes.append(f"Searched less than the paper's grid: {', '.join(dict.fromkeys(short))}; their comparison "
                     "is not the published one.")
    return Table(name="grid_edges", title="Tuning budget: grid points and choices on an edge", columns=columns,
                 rows=rows, notes=notes, frame=frame)
