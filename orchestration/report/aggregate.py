"""Mean ± std and a bootstrap 95 % interval over seeds of the selected points, with partial and
missing cells made visible.

Pure functions of result rows. A *cell* is (dataset, variant, method, metric). Its status is
  ok       every expected seed has a value
  partial  some expected seeds have a value: shown as "mean ± std (n=2/3)"
  missing  the sweep expects it, no seed has a value: shown as "—"
  not_run  the sweep does not expect it (method not configured): shown as "—", listed apart
The std is the sample standard deviation over seeds (ddof = 1); with one seed there is none and
only the mean is shown. Beside it, `bootstrap_ci`: the percentile bootstrap 95 % interval of the
mean over seeds (seeds resampled with replacement, as rliable does for runs), seeded so that a
report rebuilds identically. With few seeds it is narrow by construction (3 seeds have only 10
distinct resamples): read it as a description of the seeds at hand, not a coverage guarantee.
Below ``inference.MIN_SEEDS`` (3) seeds a cell shows no interval (two seeds' interval is their
min–max), the rule the claims follow.
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from itertools import product
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from orchestration.report.inference import MIN_SEEDS

CELL_KEYS = ["dataset", "variant", "method", "metric"]
N_BOOT = 10_000
BOOT_SEED = 0
EXPECT_KEYS = ["dataset", "variant", "method", "seed"]
MISSING = "—"


@dataclass(frozen=True)
class Cell:
    """One table cell: mean and sample std over `n` of `n_expected` seeds (fractions, not x100)."""
    mean: float = math.nan
    std: float = math.nan
    n: int = 0
    n_expected: int = 0
    ci_lo: float = math.nan   # bootstrap 95 % interval of the mean over seeds (n >= 2)
    ci_hi: float = math.nan

    @property
    def status(self) -> str:
        if self.n == 0:
            return "missing" if self.n_expected > 0 else "not_run"
        return "partial" if self.n < self.n_expected else "ok"

    @property
    def has_interval(self) -> bool:
        """Whether the cell shows its interval: only from MIN_SEEDS seeds on (the claims' rule); below,
        the bootstrap interval of two seeds is in effect their min–max, no statement about a third."""
        return self.n >= MIN_SEEDS and math.isfinite(self.ci_lo) and math.isfinite(self.ci_hi)

    def text(self, scale: float = 100.0, digits: int = 2) -> str:
        """'52.38 ± 1.20 [51.10, 53.40]' (mean ± std [bootstrap 95 % interval], from MIN_SEEDS seeds on),
        '52.38 ± 1.20' (two seeds), '... (n=2/3)', '52.38' (one seed), or '—'."""
        if self.n == 0 or not math.isfinite(self.mean):
            return MISSING
        s = f"{scale * self.mean:.{digits}f}"
        if self.n > 1 and math.isfinite(self.std):
            s += f" ± {scale * self.std:.{digits}f}"
        if self.has_interval:
            s += f" [{scale * self.ci_lo:.{digits}f}, {scale * self.ci_hi:.{digits}f}]"
        if self.status == "partial":
            s += f" (n={self.n}/{self.n_expected})"
        return s


def bootstrap_ci(values, level: float = 0.95, n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (one per seed): resample the seeds
    with replacement `n_boot` times (seeded), take the (1-level)/2 and (1+level)/2 quantiles of the
    resampled means. (nan, nan) with fewer than two finite values. Pure."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) < 2:
        return math.nan, math.nan
    lo, hi = _bootstrap_rows(v[None, :], level, n_boot, seed)
    return float(lo[0]), float(hi[0])


def bootstrap_cis(groups: list[np.ndarray], level: float = 0.95, n_boot: int = N_BOOT,
                  seed: int = BOOT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """`bootstrap_ci` of each array in `groups` (finite values only), as two arrays (lo, hi).

    The same numbers as one call per array: arrays of one length share their resampled positions
    (the generator is seeded alike for every call), so they are resampled together, a matrix at a time."""
    lo, hi = np.full(len(groups), math.nan), np.full(len(groups), math.nan)
    by_len: dict[int, list[int]] = {}
    for i, v in enumerate(groups):
        if len(v) >= 2:
            by_len.setdefault(len(v), []).append(i)
    for at in by_len.values():
        rows = np.array([groups[i] for i in at], dtype=float)
        lo[at], hi[at] = _bootstrap_rows(rows, level, n_boot, seed)
    return lo, hi


@functools.lru_cache(maxsize=32)
def _resample_positions(n: int, n_boot: int, seed: int) -> np.ndarray:
    """The positions `bootstrap_ci` resamples: the first draws of a generator seeded with `seed`, so the
    same for every call with the same (n, n_boot, seed); drawn once."""
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    idx.setflags(write=False)
    return idx


_CHUNK_CELLS = 64   # cells resampled at once: 64 x 10,000 x n doubles, a few MB
_BOOT_THREADS = min(8, os.cpu_count() or 1)    # threads for the chunks (1: in this thread)


def _bootstrap_rows(rows: np.ndarray, level: float, n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of each row's mean; rows of n >= 2 finite values. Each row's
    resampled means and quantiles are computed as for the row alone (the mean over the last axis,
    the quantiles per row), so batching does not change a digit. Chunks of cells go to threads
    (NumPy's take, mean and quantile release the interpreter); each writes only its own cells."""
    idx = _resample_positions(rows.shape[1], n_boot, seed)
    q = [(1 - level) / 2, (1 + level) / 2]
    lo, hi = np.empty(len(rows)), np.empty(len(rows))

    def chunk_at(a: int) -> None:
        chunk = rows[a:a + _CHUNK_CELLS]
        # the resampled values as one (cell x resample, seed) matrix and its row means, as bootstrap_ci
        # takes them for one cell (numpy sums a 3-D array's last axis in another order: other digits)
        resampled = np.take(chunk, idx.ravel(), axis=1).reshape(-1, idx.shape[1])   # take: C order, no copy
        means = resampled.mean(axis=1).reshape(len(chunk), n_boot)
        lo[a:a + _CHUNK_CELLS], hi[a:a + _CHUNK_CELLS] = np.quantile(means, q, axis=1)

    starts = range(0, len(rows), _CHUNK_CELLS)
    threads = min(_BOOT_THREADS, len(starts))
    if threads < 2:
        for a in starts:
            chunk_at(a)
    else:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(threads, thread_name_prefix="poxm-bootstrap") as ex:
            list(ex.map(chunk_at, starts))      # list(): a chunk's error is raised here
    return lo, hi


def seed_stats(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean, sample std (ddof=1), count and bootstrap 95 % interval (ci_lo, ci_hi) over seeds per
    (dataset, variant, method, metric).

    `rows` holds one value per (cell, seed) (e.g. ``selection.selected_rows``); duplicates of a
    (cell, seed) keep the row with the largest epoch. Non-finite values do not count as a seed.
    """
    cols = CELL_KEYS + ["mean", "std", "n", "ci_lo", "ci_hi", "seeds"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    one = rows.sort_values("epoch", kind="stable").drop_duplicates(CELL_KEYS + ["seed"], keep="last")
    one = one[np.isfinite(one["value"].to_numpy(dtype=float))]
    if one.empty:
        return pd.DataFrame(columns=cols)
    g = one.groupby(CELL_KEYS, sort=True)
    out = g["value"].agg(mean="mean", n="count").reset_index()
    # each cell's values and seeds in row order (as groupby hands them to a function), without a
    # Python call per cell through pandas: thousands of cells in a four-dataset sweep
    values = per_group(g, one["value"].to_numpy(dtype=float))
    # np.std(ddof=1) is pandas' Series.std: the two-pass sum((x - mean)^2) / (n - 1), square root
    out["std"] = [float(v.std(ddof=1)) if len(v) > 1 else math.nan for v in values]
    out["ci_lo"], out["ci_hi"] = bootstrap_cis(values)
    out["seeds"] = [tuple(sorted(int(x) for x in s)) for s in per_group(g, one["seed"].to_numpy())]
    return out[cols]


def per_group(g, values: np.ndarray) -> list[np.ndarray]:
    """`values` (aligned with the grouped frame's rows) split per group, in group order, each in row order."""
    codes = g.ngroup().to_numpy()
    keep = codes >= 0                       # -1: a row whose key is missing, in no group (groupby drops it)
    codes, values = codes[keep], values[keep]
    order = np.argsort(codes, kind="stable")
    return np.split(values[order], np.cumsum(np.bincount(codes, minlength=g.ngroups))[:-1])


def expected_from_grid(grid: Iterable[Mapping]) -> pd.DataFrame:
    """Expected (dataset, variant, method, seed) from sweep.json's grid points."""
    recs = [{k: g[k] for k in EXPECT_KEYS} for g in grid]
    df = pd.DataFrame(recs, columns=EXPECT_KEYS)
    if not df.empty:
        df = df.astype({"dataset": str, "variant": str, "method": str, "seed": "int64"})
    return df.drop_duplicates().reset_index(drop=True)


def expected_from_config(config: Mapping) -> pd.DataFrame | None:
    """Expected cells from a resolved sweep config (datasets x variants x methods x seeds), or None."""
    try:
        seeds = [int(s) for s in config.get("seeds", [0])]
        methods = list(config["methods"])
        dv = [(d["name"], v["name"]) for d in config["datasets"] for v in d["variants"]]
    except (KeyError, TypeError, AttributeError):
        return None
    recs = [(d, v, m, s) for (d, v), m, s in product(dv, methods, seeds)]
    return pd.DataFrame(recs, columns=EXPECT_KEYS).astype({"seed": "int64"})


def expected_from_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Fallback when the sweep's grid is unknown: every method seen in a (dataset, variant) is
    expected for every seed seen there."""
    if rows.empty:
        return pd.DataFrame(columns=EXPECT_KEYS)
    recs = []
    for (d, v), sub in rows.groupby(["dataset", "variant"], sort=True):
        for m, s in product(sorted(sub["method"].unique()), sorted(sub["seed"].unique())):
            recs.append((d, v, m, int(s)))
    return pd.DataFrame(recs, columns=EXPECT_KEYS).astype({"seed": "int64"})


def cell_grid(stats: pd.DataFrame, expected: pd.DataFrame, dataset: str, variant: str,
              methods: list[str], metrics: list[str]) -> dict[tuple[str, str], Cell]:
    """Cells of one table (dataset, variant): every (method, metric) asked for, present or not."""
    s = stats[(stats["dataset"] == dataset) & (stats["variant"] == variant)]
    e = expected[(expected["dataset"] == dataset) & (expected["variant"] == variant)]
    n_exp = e.groupby("method")["seed"].nunique().to_dict()
    by = {(r.method, r.metric): r for r in s.itertuples(index=False)}
    out = {}
    for m, k in product(methods, metrics):
        r = by.get((m, k))
        ne = int(n_exp.get(m, 0))
        if r is None:
            out[(m, k)] = Cell(n_expected=ne)
        else:
            # a cell with more seeds than the grid names (grid unknown or widened) is not partial
            out[(m, k)] = Cell(float(r.mean), float(r.std), int(r.n), max(ne, int(r.n)), float(r.ci_lo), float(r.ci_hi))
    return out


def best_cells(cells: Mapping[tuple[str, str], Cell], metrics: list[str], eligible: list[str],
               scale: float = 100.0, digits: int = 2) -> set[tuple[str, str]]:
    """(method, metric) pairs holding the best (largest) mean of each metric among `eligible`
    methods with a value; compared at the displayed precision, so displayed ties are all bold."""
    best: set[tuple[str, str]] = set()
    for k in metrics:
        vals = {m: round(scale * cells[(m, k)].mean, digits) for m in eligible
                if (m, k) in cells and cells[(m, k)].n > 0 and math.isfinite(cells[(m, k)].mean)}
        if vals:
            top = max(vals.values())
            best |= {(m, k) for m, v in vals.items() if v == top}
    return best


def p_set(values: Iterable) -> str:
    """'20' or '10/20': the distinct p chosen over seeds, sorted; '—' when unused (p = -1)."""
    vals = sorted({int(v) for v in values if v is not None and math.isfinite(float(v)) and v >= 0})
    return "/".join(str(v) for v in vals) if vals else MISSING


def lam_set(values: Iterable) -> str:
    """'0.8' or '0.7/0.9': the distinct lambda chosen over seeds, sorted; '—' when unused (nan)."""
    vals = sorted({float(v) for v in values if v is not None and math.isfinite(float(v))})
    return "/".join(_lam_text(v) for v in vals) if vals else MISSING


def _lam_text(v: float) -> str:
    s = f"{v:g}"
    return s if ("." in s or "e" in s or "n" in s) else s + ".0"  # 1.0, not 1, as in the grid
