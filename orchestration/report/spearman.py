"""The report's rank correlations: how well each validation criterion orders the (p, λ) grid as test
R@5 does, per variant and seed, pooled over the grid methods and per method (spearman_<d>)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from orchestration.report.aggregate import MISSING, Cell
from orchestration.report.method_names import criterion_title, method_list, method_name
from orchestration.report.table_format import Table
from orchestration.selection import (DEFAULT_CRITERION, ORACLE_METRIC, PAPER_CRITERION, POINT, SELECT_SPLIT,
                                     is_criterion, order_criteria)


SPEARMAN_COLUMNS = ["dataset", "variant", "seed", "scope", "criterion", "rho", "n"]
POOLED = "pooled"


def grid_methods(rows: pd.DataFrame, dataset: str | None = None) -> list[str]:
    """Methods with a (p, λ) grid: some final row uses p (>= 0) or λ (finite). Paper order first."""
    f = rows[rows["final"]] if dataset is None else rows[rows["final"] & (rows["dataset"] == dataset)]
    used = f[(f["p"] >= 0) | np.isfinite(f["lam"].to_numpy(dtype=float))]["method"].unique()
    return [m for m in method_list(list(used)) if m in set(used)]


def _spearman(x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    ok = np.isfinite(x) & np.isfinite(y)
    n = int(ok.sum())
    if n < 3:
        return math.nan, n
    x, y = x[ok], y[ok]
    if (x == x[0]).all() or (y == y[0]).all():   # a constant input has no rank correlation (scipy: nan)
        return math.nan, n
    # scipy.stats.spearmanr's statistic, computed as it does (the correlation matrix of the two rank
    # columns), without its p-value and argument handling: most of its time, thousands of calls a report
    ranks = np.column_stack((_average_ranks(x), _average_ranks(y)))
    return float(np.corrcoef(ranks, rowvar=False)[1, 0]), n


def _average_ranks(a: np.ndarray) -> np.ndarray:
    """scipy.stats.rankdata(a): ranks 1..n, tied values share their mean rank (whole or half numbers,
    exact in floating point, so these are scipy's numbers)."""
    order = np.argsort(a, kind="mergesort")
    inv = np.empty(len(a), dtype=np.intp)
    inv[order] = np.arange(len(a))
    s = a[order]
    first = np.r_[True, s[1:] != s[:-1]]
    dense = first.cumsum()[inv]
    bounds = np.r_[np.nonzero(first)[0], len(a)]
    return 0.5 * (bounds[dense] + bounds[dense - 1] + 1)


def spearman_data(rows: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Rank correlation of each validation criterion with test R@5 across the (p, λ) grid points.

    For each (variant, seed) and each criterion (every final split-'val' metric except ESS, loss and
    *_se: ``selection.val_criteria``), the Spearman correlation (scipy.stats.spearmanr) between the
    criterion's value and the test R@5 of the same grid point, over the points of the methods with a
    grid (``grid_methods``): pooled over those methods (scope 'pooled') and per method (scope = the
    method). A point counts where both values are finite; rho is NaN with fewer than 3 points (or a
    constant input). Columns ``SPEARMAN_COLUMNS``: dataset, variant, seed, scope, criterion, rho, n.
    """
    f = rows[rows["final"] & (rows["dataset"] == dataset)]
    methods = grid_methods(f)
    f = f[f["method"].isin(methods)]
    val = f[(f["split"] == SELECT_SPLIT) & f["metric"].map(is_criterion)]
    criteria = order_criteria(val["metric"].unique())
    r5 = f[(f["split"] == ORACLE_METRIC[0]) & (f["metric"] == ORACLE_METRIC[1])]
    if not criteria or r5.empty:
        return pd.DataFrame(columns=SPEARMAN_COLUMNS)
    last = lambda d: d.sort_values("epoch", kind="stable").drop_duplicates(POINT + ["metric"], keep="last")  # noqa: E731
    # set_index/unstack, not pivot_table: keys with a NaN λ must survive, and no key combination
    # that never ran may appear
    wide = last(val).set_index(POINT + ["metric"])["value"].unstack("metric").reindex(columns=criteria)
    r5 = last(r5).set_index(POINT)["value"].rename("_R5")
    pts = wide.join(r5, how="outer").reset_index()
    recs = []
    for (v, seed), grp in pts.groupby(["variant", "seed"], sort=True):
        # numpy columns and masks once per (variant, seed): not a frame filtered per scope and criterion
        meth, y = grp["method"].to_numpy(), grp["_R5"].to_numpy(dtype=float)
        crit = {c: grp[c].to_numpy(dtype=float) for c in criteria}
        scopes = [(POOLED, np.ones(len(grp), dtype=bool))] + [(m, meth == m) for m in methods if (meth == m).any()]
        for scope, at in scopes:
            for c in criteria:
                rho, n = _spearman(crit[c][at], y[at])
                recs.append({"dataset": dataset, "variant": str(v), "seed": int(seed), "scope": scope,
                             "criterion": c, "rho": rho, "n": n})
    return pd.DataFrame(recs, columns=SPEARMAN_COLUMNS)


def _rho_text(v: float) -> str:
    return f"{v:+.2f}" if math.isfinite(v) else MISSING


def spearman_table(dataset: str, data: pd.DataFrame, criterion: str = DEFAULT_CRITERION) -> Table:
    """Per variant: pooled rows per seed, their mean ± std over seeds, then per grid method the
    mean ± std over seeds; one column per criterion (the run's selection criterion marked).
    The CSV holds every (variant, seed, scope, criterion) value (`spearman_data`), per seed."""
    d = data[data["dataset"] == dataset] if len(data) else data
    criteria = order_criteria(d["criterion"].unique()) if len(d) else []
    marks = {c: [w for w, on in (("selection", c == criterion), ("paper's", c == PAPER_CRITERION)) if on]
             for c in criteria}
    columns = ["Grid points", "points"] + [c + (f" ({', '.join(marks[c])})" if marks[c] else "") for c in criteria]
    rows: list[list[str]] = []
    sections: dict[int, str] = {}
    for v in sorted(d["variant"].unique()) if len(d) else []:
        dv = d[d["variant"] == v]
        seeds = sorted(dv["seed"].unique())
        sections[len(rows)] = f"variant {v}"
        # the variant's rows grouped once (positions, in row order), not filtered per seed, scope and criterion
        by_seed = dv.groupby(["scope", "seed"], sort=False).indices
        by_criterion = dv.groupby(["scope", "criterion"], sort=False).indices
        rho, n_points, crit = dv["rho"].to_numpy(dtype=float), dv["n"].to_numpy(), dv["criterion"].to_numpy()
        for s in seeds:
            at = by_seed.get((POOLED, s), [])
            ps = dict(zip(crit[at], rho[at]))
            rows.append([f"all grid methods, seed {s}", str(int(n_points[at].max())) if len(at) else "0"]
                        + [_rho_text(float(ps[c])) if c in ps else MISSING for c in criteria])
        scopes = [POOLED] + [m for m in method_list(list(dv["scope"].unique())) if m in set(dv["scope"]) and m != POOLED]
        for scope in scopes:
            if scope == POOLED and len(seeds) < 2:
                continue
            cells = []
            for c in criteria:
                vals = rho[by_criterion.get((scope, c), [])]
                fin = vals[np.isfinite(vals)]
                cell = Cell(float(fin.mean()) if len(fin) else math.nan,
                            float(fin.std(ddof=1)) if len(fin) > 1 else math.nan, len(fin), len(seeds))
                cells.append(cell.text(scale=1.0))
            per_seed = [int(n_points[at].max()) for (sc, _), at in by_seed.items() if sc == scope]
            lo, hi = (min(per_seed), max(per_seed)) if per_seed else (0, 0)
            npts = str(hi) if lo == hi else f"{lo}–{hi}"
            label = "all grid methods" if scope == POOLED else method_name(scope)
            rows.append([f"{label}, mean over seeds", npts] + cells)
    notes = [f"Spearman rank correlation, across the finished (p, λ) grid points, between each criterion — "
             "the trained policy's value estimated on the held-out validation slice of the logged data — and "
             "the test R@5 of the same point: +1 means the criterion orders the grid exactly as test R@5 does. "
             "“All grid methods”: the points of every method with a grid (p or λ used) pooled, per seed; "
             "“mean over seeds”: mean ± std of the per-seed correlations; points: grid points per seed. "
             "“—”: fewer than 3 points (or a constant criterion). "
             f"Selection reads only the validation log (criterion: {criterion}); test R@5 is used here only to "
             "measure how well each criterion would select. Per-seed values of every method: the CSV."]
    if not rows:
        notes.append("No method with a (p, λ) grid and both validation estimates and test R@5 here.")
    frame = d.assign(rho=d["rho"].astype(float)) if len(d) else pd.DataFrame(columns=SPEARMAN_COLUMNS)
    return Table(name=f"spearman_{dataset}",
                 title=f"Rank correlation of each selection criterion with test R@5 across the grid — {dataset} "
                       f"(selection: {criterion_title(criterion)})",
                 columns=columns, rows=rows, sections=sections, notes=notes, frame=frame)
