"""How much each method searched, and how often its choice sat on the edge of its grid.

An unequal tuning budget biases every comparison, and a choice on the edge of a grid says the grid
may have been too small. Per method (over every dataset, variant and seed of the run), for the honest
choice of one criterion: the grid points it searched (distinct (p, λ) with final validation rows, the
largest over its datasets × variants), and the share of seeds whose chosen p was the smallest or the
largest p searched, likewise for λ, and for either. A grid of one value on an axis has no edge there.
Beside the honest choices, the test-best (oracle) choice's shares: an honest choice on an edge may be
the criterion's noise, an oracle choice on an edge says the best point lies outside the grid
(``oracle_on_edge`` names the methods where it does for more than a quarter of the choices).
A pure function of result rows and a selection frame (``selection.select``).
"""
from __future__ import annotations

import math

import pandas as pd

from orchestration.report.table_format import Table
from orchestration.report.method_names import method_list, method_name
from orchestration.selection import ORACLE, PAPER_CRITERION, selection_label

EDGE_COLUMNS = ["criterion", "method", "points", "p_values", "lam_values", "choices", "p_edge", "lam_edge",
                "any_edge", "p_low", "p_high", "lam_low", "lam_high"]
ORACLE_TITLE = "test-best (oracle)"
# a method whose oracle choice sits on an edge for more than this share of its choices is named
ORACLE_EDGE_SHARE = 0.25


def _values(x: pd.Series) -> list[float]:
    v = sorted({float(a) for a in x if math.isfinite(float(a)) and float(a) >= 0})
    return v


def _edges(value: float, grid: list[float]) -> tuple[bool, bool]:
    """(at the smallest, at the largest) value of a grid axis; (False, False) for an axis of one value."""
    if len(grid) < 2 or not math.isfinite(float(value)):
        return False, False
    return float(value) == grid[0], float(value) == grid[-1]


def grid_edges(rows: pd.DataFrame, selection: pd.DataFrame, criterion: str) -> pd.DataFrame:
    """One row per method with more than one grid point: columns ``EDGE_COLUMNS`` (shares in [0, 1]).
    `criterion`: the honest choice's criterion, or ``selection.ORACLE`` for the test-best choice."""
    val = rows[(rows["split"] == "val") & rows["final"]]
    keys = ["dataset", "variant", "method"]
    grids = {k: (_values(g["p"]), _values(g["lam"]), len(g[["p", "lam"]].drop_duplicates()))
             for k, g in val.groupby(keys, sort=False)}
    label = ORACLE if criterion == ORACLE else selection_label(criterion)
    s = selection[selection["selection"] == label].drop_duplicates(keys + ["seed"])
    out = []
    for m, sm in s.groupby("method", sort=False):
        n, points, ps, lams = 0, 0, set(), set()
        count = dict.fromkeys(("p_low", "p_high", "lam_low", "lam_high", "p_edge", "lam_edge", "any_edge"), 0)
        for r in sm.itertuples(index=False):
            g = grids.get((r.dataset, r.variant, m))
            if g is None or g[2] <= 1:
                continue
            points = max(points, g[2]); ps |= set(g[0]); lams |= set(g[1])
            at = dict(zip(("p_low", "p_high"), _edges(r.p, g[0]))) | dict(zip(("lam_low", "lam_high"), _edges(r.lam, g[1])))
            at |= {"p_edge": at["p_low"] or at["p_high"], "lam_edge": at["lam_low"] or at["lam_high"]}
            at["any_edge"] = at["p_edge"] or at["lam_edge"]
            n += 1
            count = {k: count[k] + at[k] for k in count}
        if n:
            out.append({"criterion": criterion, "method": m, "points": points,
                        "p_values": " ".join(f"{int(p)}" for p in sorted(ps)),
                        "lam_values": " ".join(f"{x:g}" for x in sorted(lams)), "choices": n,
                        **{k: c / n for k, c in count.items()}})
    return pd.DataFrame(out, columns=EDGE_COLUMNS)


def oracle_on_edge(frame: pd.DataFrame, share: float = ORACLE_EDGE_SHARE) -> list[dict]:
    """The methods whose test-best (oracle) choice sits on an edge of the grid for more than `share` of
    their choices, in the paper's order: {method, name, share, reason}, the reason naming each edge held
    by more than `share` (e.g. 'λ at the largest value searched (1.5) for 40 %'), else the largest one."""
    f = frame[frame["criterion"] == ORACLE] if "criterion" in frame else frame
    out = []
    for m in method_list(list(f["method"].unique())):
        r = f[f["method"] == m].iloc[0]
        if not r["any_edge"] > share:
            continue
        ps, lams = str(r["p_values"]).split(), str(r["lam_values"]).split()
        ends = {"p_low": ("p", "smallest", ps[:1]), "p_high": ("p", "largest", ps[-1:]),
                "lam_low": ("λ", "smallest", lams[:1]), "lam_high": ("λ", "largest", lams[-1:])}
        held = [k for k in ends if r[k] > share] or [max(ends, key=lambda k: r[k])]
        reason = ", ".join(f"{ends[k][0]} at the {ends[k][1]} value searched ({' '.join(ends[k][2])}) for "
                           f"{100 * r[k]:.0f} %" for k in held)
        out.append({"method": m, "name": method_name(m), "share": float(r["any_edge"]),
                    "reason": f"its test-best choice sat on an edge of the grid for {100 * r['any_edge']:.0f} % of "
                              f"its choices ({reason} of them)"})
    return out


PAPER_P = (10, 20, 50, 100)
PAPER_LAM = (0.7, 0.8, 0.9, 1.0)


WIDE_P = (2, 5, 10, 20, 50, 100)
WIDE_LAM = (0.5, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5)


def _covers(p_values: str, lam_values: str, want_p, want_lam) -> bool:
    ps = {float(x) for x in str(p_values or "").split()}
    lams = {float(x) for x in str(lam_values or "").split()}
    return (not ps or ps >= set(map(float, want_p))) and (not lams or lams >= set(map(float, want_lam)))


def paper_grid(p_values: str, lam_values: str) -> bool:
    """Whether a method searched at least the paper's values on each axis it uses (a method without p,
    like BanditNet, or without λ, like DR-POXM, is judged on its own axis)."""
    return _covers(p_values, lam_values, PAPER_P, PAPER_LAM)


def wide_grid(p_values: str, lam_values: str) -> bool:
    """Whether a method searched at least the published wide grid on each axis it uses."""
    return _covers(p_values, lam_values, WIDE_P, WIDE_LAM)


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _shares(here: pd.DataFrame, c: str) -> list[str]:
    """p on an edge, λ on an edge, either: the criterion's shares ('—' for an axis of one value)."""
    if c not in here.index:
        return ["—"] * 3
    r = here.loc[c]
    return [_pct(r["p_edge"]) if r["p_values"].count(" ") else "—",
            _pct(r["lam_edge"]) if r["lam_values"].count(" ") else "—", _pct(r["any_edge"])]


def _notes(frame: pd.DataFrame) -> list[str]:
    g = lambda xs: ", ".join(f"{x:g}" for x in xs)   # noqa: E731
    notes = ["Per method: the grid points it searched (the most over its datasets × variants), and the share of its "
             "selected choices (every dataset, variant and seed) whose p, λ or either was the smallest or largest "
             "value searched: a high share says the grid may have stopped short of the best point. "
             f"Published runs search p ∈ {{{g(WIDE_P)}}} × λ ∈ {{{g(WIDE_LAM)}}} for every method that has the "
             f"parameter; the paper's grid, p ∈ {{{g(PAPER_P)}}} × λ ∈ {{{g(PAPER_LAM)}}}, is its subset; a smaller "
             "grid is a CPU convenience."]
    if (frame["criterion"] == ORACLE).any():
        notes.append(f"{ORACLE_TITLE}: the same shares for the choice by test R@5 (uses test labels, never used by the "
                     "tables): an honest choice on an edge may be the criterion's noise, a test-best choice on an edge "
                     "says the best point lies beyond the grid.")
    honest = frame[frame["criterion"] != ORACLE]
    narrow = [method_name(r.method) for r in honest.itertuples(index=False) if not wide_grid(r.p_values, r.lam_values)]
    if narrow:
        notes.append(f"Searched less than the published wide grid: {', '.join(dict.fromkeys(narrow))}.")
    short = [method_name(r.method) for r in honest.itertuples(index=False) if not paper_grid(r.p_values, r.lam_values)]
    if short:
        notes.append(f"Searched less than the paper's grid: {', '.join(dict.fromkeys(short))}; their comparison "
                     "is not the published one.")
    return notes


def grid_edges_table(frames: list[pd.DataFrame], criteria: list[str]) -> Table:
    """The tuning-budget table: per method its grid, then per criterion shown (and, where `frames` holds the
    oracle's, ``grid_edges(..., ORACLE)``, the test-best choice last) the shares on an edge."""
    frame = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) \
        else pd.DataFrame(columns=EDGE_COLUMNS)
    shown = [c for c in criteria if c != ORACLE] + ([ORACLE] if (frame["criterion"] == ORACLE).any() else [])
    columns = ["Method", "grid points", "p searched", "λ searched"]
    for c in shown:
        h = f"{c} (paper's)" if c == PAPER_CRITERION else ORACLE_TITLE if c == ORACLE else c
        columns += [f"{h}: p on an edge", f"{h}: λ on an edge", f"{h}: either"]
    rows = []
    present = set(frame["method"])
    for m in [m for m in method_list(list(present)) if m in present]:
        here = frame[frame["method"] == m].set_index("criterion")
        first = here.iloc[0]
        row = [method_name(m), str(int(first["points"])), first["p_values"] or "—", first["lam_values"] or "—"]
        for c in shown:
            row += _shares(here, c)
        rows.append(row)
    return Table(name="grid_edges", title="Tuning budget: grid points and choices on an edge", columns=columns,
                 rows=rows, notes=_notes(frame), frame=frame)
