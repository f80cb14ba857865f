"""The report's coverage notes: what is missing or partial in a run, never silently dropped (expected
cells without a selected result, grid points without a final row, results outside the expected grid)."""
from __future__ import annotations

import pandas as pd

from orchestration.report.aggregate import EXPECT_KEYS
from orchestration.selection import DEFAULT_CRITERION, POINT, selection_label


def _grid_frame(grid: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame([{k: g.get(k) for k in POINT} for g in grid], columns=POINT)
    df["p"] = pd.to_numeric(df["p"].fillna(-1)).astype("int64")
    df["lam"] = pd.to_numeric(df["lam"]).astype("float64")
    df["seed"] = df["seed"].astype("int64")
    for c in ("dataset", "variant", "method"):
        df[c] = df[c].astype(str)
    return df.drop_duplicates()


def coverage_notes(rows: pd.DataFrame, selection: pd.DataFrame, expected: pd.DataFrame,
                   grid: list[dict] | None, source: str, limit: int = 40,
                   criterion: str = DEFAULT_CRITERION) -> list[str]:
    notes = [f"Expected trials taken from {source}."]
    snis = selection[selection["selection"] == selection_label(criterion)]
    have = set(map(tuple, snis[EXPECT_KEYS].to_numpy()))
    missing = [t for t in map(tuple, expected[EXPECT_KEYS].to_numpy()) if t not in have]
    if missing:
        by: dict[tuple, list] = {}
        for d, v, m, s in missing:
            by.setdefault((d, v, m), []).append(int(s))
        n_exp = expected.groupby(["dataset", "variant", "method"])["seed"].nunique().to_dict()
        items = []
        for (d, v, m), seeds in sorted(by.items()):
            kind = "missing" if len(seeds) == n_exp[(d, v, m)] else "partial"
            items.append(f"{kind}: {d} / {v} / {m}: no selected result for seed(s) {sorted(seeds)} "
                         f"({n_exp[(d, v, m)] - len(seeds)}/{n_exp[(d, v, m)]} seeds present)")
        notes += items[:limit] + ([f"... and {len(items) - limit} more"] if len(items) > limit else [])
    else:
        notes.append("Every expected (dataset, variant, method, seed) has a selected result.")
    if grid is not None:
        g = _grid_frame(grid)
        final = rows[rows["final"]][POINT].drop_duplicates()
        done = g.merge(final.assign(_done=True), on=POINT, how="left")
        todo = done[done["_done"].isna()]
        if len(todo):
            short = (todo.groupby(["dataset", "variant", "method", "seed"]).size().rename("n_missing")
                     .reset_index().merge(g.groupby(["dataset", "variant", "method", "seed"]).size()
                                          .rename("n_grid").reset_index()))
            notes.append(f"{len(todo)} of {len(g)} grid points have no final result; selection ran over "
                         "the finished points only:")
            lines = [f"{r.dataset} / {r.variant} / {r.method} / seed {r.seed}: "
                     f"{r.n_grid - r.n_missing}/{r.n_grid} grid points finished" for r in short.itertuples()]
            notes += lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])
        else:
            notes.append(f"All {len(g)} grid points of sweep.json finished.")
    extra = sorted(set(map(tuple, snis[EXPECT_KEYS].to_numpy())) - set(map(tuple, expected[EXPECT_KEYS].to_numpy())))
    if extra:
        notes.append(f"{len(extra)} result(s) outside the expected grid are included, e.g. {extra[0]}.")
    return notes
