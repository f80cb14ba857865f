"""The files of a published report that hold data: the final rows, cut into files small enough for a
repository, and the selected heads' per-instance test values on their way there.

A run keeps every head's per-instance test values (results/test_instances.npz: every grid point of
every trial, hundreds of MB for a full benchmark). The claims read only the heads a criterion selected:
a stage's folder (`scripts/device.sh publish fold`) keeps those (instances/<dataset>_<variant>.npz: the
heads of every honest selection, not the oracle's; float16, whose relative rounding of 5e-4 on one
instance's value moves an interval's width by far less than its last printed digit). A published folder
keeps only the sums its claims read of them (moments/, instance_moments.py), computed from those
half-precision values; folders published before that keep the arrays, which are read the same way.
The final rows are kept one file per dataset (rows-<dataset>.csv.xz: xz holds them in three quarters of
gzip's bytes, and writes the same bytes for the same rows); rows-<dataset>.csv.gz and the single
rows.csv.gz of folders published before are read as well. A published folder keeps only the final rows its
tables and figures read (`kept_rows`): every validation row, test R@5 at every grid point, and every test row
of the heads a selection chose (the run's criterion, the paper's SNIS, the test-best oracle); the run
directory and MLflow keep every row.
"""
from __future__ import annotations

import io
import lzma
from pathlib import Path

import numpy as np
import pandas as pd

from orchestration.report.claims import instance_key
from orchestration.selection import POINT, select_run

METRICS = ("R@5", "PSR@5", "P@5")
ORACLE = "oracle"


def selected_keys(selection: pd.DataFrame) -> list[str]:
    """The keys (claims.instance_key) of every head an honest criterion selected, each metric."""
    s = selection[selection["selection"] != ORACLE].drop_duplicates(["dataset", "variant", "seed", "method", "p", "lam"])
    return sorted({instance_key(r.dataset, r.variant, r.seed, r.method, r.p, r.lam, m)
                   for r in s.itertuples(index=False) for m in METRICS})


def write_selected(instances_npz: Path, selection: pd.DataFrame, out_dir: Path,
                   datasets: list[str] | None = None) -> int:
    """Write the selected heads' arrays of `instances_npz` as float16 into `out_dir`, one file per
    (dataset, variant) (`<dataset>_<variant>.npz`: each stays small enough for a repository), only
    `datasets` where given; returns the number of arrays written."""
    sel = selection if datasets is None else selection[selection["dataset"].astype(str).isin(datasets)]
    keys = selected_keys(sel)
    out_dir.mkdir(parents=True, exist_ok=True)
    n = 0
    with np.load(instances_npz) as z:
        have = set(z.files)
        for d, v in sorted({tuple(k.split("|", 2)[:2]) for k in keys}):
            arrays = {k: z[k].astype(np.float16) for k in keys if k in have and k.split("|", 2)[:2] == [d, v]}
            tmp = out_dir / f".{d}_{v}.npz.tmp"
            with open(tmp, "wb") as fh:
                np.savez_compressed(fh, **arrays)
            tmp.replace(out_dir / f"{d}_{v}.npz")
            n += len(arrays)
    return n


ROW_DIGITS = "%.7g"


def write_rows(rows: pd.DataFrame, folder: Path) -> list[Path]:
    """The final rows as one xz-compressed CSV per dataset (rows-<dataset>.csv.xz), each written then renamed.
    Values keep 7 significant digits (ROW_DIGITS): the tables show 4-5, and full float64 text took 40 % more
    room in docs/results, which a clone carries."""
    out = []
    for d, g in rows.groupby(rows["dataset"].astype(str), sort=True):
        path = folder / f"rows-{d}.csv.xz"
        tmp = folder / f".rows-{d}.tmp.csv.xz"
        g.to_csv(tmp, index=False, float_format=ROW_DIGITS, compression={"method": "xz", "preset": 9})
        tmp.replace(path)
        out.append(path)
    return out


# The test metrics a table or figure reads at every grid point, not only at the selected heads: R@5, for the
# rank correlation of each criterion with test R@5 across the grid (spearman_<d>), the robustness figure's POXM
# test R@5 per p (figures.per_p_data) and the test-best (oracle) choice (selection.select). Every other test
# metric (R@1/3, P@k, nDCG@k, nDCR@k, PSP@k, PSR@k, truncated_mass) is read only at the heads a selection chose:
# the headline, results, greedy and selection tables, the claims, gap shares, landscape, split variance,
# sharpness figure and logging statistics.
GRID_TEST_METRICS = ("R@5",)
TEST_SPLIT = "test"


def _points(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame`'s grid points (selection.POINT) in one dtype per column, so that rows and a selection read
    back from CSV match (a NaN λ matches a NaN λ)."""
    return pd.DataFrame({"dataset": frame["dataset"].astype(str).to_numpy(),
                         "variant": frame["variant"].astype(str).to_numpy(),
                         "method": frame["method"].astype(str).to_numpy(),
                         "seed": pd.to_numeric(frame["seed"]).astype("int64").to_numpy(),
                         "p": pd.to_numeric(frame["p"]).astype("int64").to_numpy(),
                         "lam": pd.to_numeric(frame["lam"]).astype("float64").to_numpy()})[POINT]


def kept_rows(rows: pd.DataFrame, selection: pd.DataFrame) -> pd.DataFrame:
    """The final rows a published folder keeps, in their order: what its tables and figures read.

    docs/results must stay within 15 MB (tests/project/test_published_results.py), and a run's test rows
    at grid points no criterion chose are about half its rows' compressed bytes while the report reads
    only R@5 of them (GRID_TEST_METRICS). Kept: every row outside split 'test' (the validation estimates and
    V_true: selection and the estimator figures read them at every point), the test rows of GRID_TEST_METRICS
    at every point, and every test row of a grid point `selection` holds under any label (`selection`:
    RunSelection.frame(), the run's criterion's, the oracle's and the paper's choices, every seed); a grid
    point none of whose rows would be kept keeps them all, so that no point leaves the grid. Selection on
    the kept rows chooses the same heads, so a report rebuilt from them equals the one built from every
    row. The run directory and MLflow keep every row."""
    keep = (rows["split"].astype(str) != TEST_SPLIT).to_numpy() | rows["metric"].astype(str).isin(
        GRID_TEST_METRICS).to_numpy()
    if keep.all():
        return rows
    pts = _points(rows)
    chosen = _points(selection).drop_duplicates().assign(_chosen=True)
    keep |= pts.merge(chosen, on=POINT, how="left")["_chosen"].notna().to_numpy()
    # a point left with no row at all keeps its rows (it still counts among the grid's points)
    keep |= ~pd.Series(keep).groupby([pts[c] for c in POINT], dropna=False, sort=False).transform("any").to_numpy()
    return rows[keep]


def as_published(rows: pd.DataFrame, criterion: str | None = None) -> pd.DataFrame:
    """`rows` as a rebuild reads them back from write_rows' files (7 significant digits, datasets in name
    order): a report built from these equals the one rebuilt later from the folder. With `criterion` (the
    run's selection criterion), only the rows the tables read (`kept_rows`) under the selection a report
    makes of the rows so rounded (selection.select_run by `criterion`, the paper's beside it)."""
    parts = [pd.read_csv(io.StringIO(g.to_csv(index=False, float_format=ROW_DIGITS)))
             for _, g in rows.groupby(rows["dataset"].astype(str), sort=True)]
    out = pd.concat(parts, ignore_index=True) if parts else rows
    if criterion is None or out.empty:
        return out
    return kept_rows(out, select_run(out, criterion).frame()).reset_index(drop=True)


def row_files(folder: Path) -> list[Path]:
    """A published folder's row files: rows-<dataset>.csv.xz (or .gz), or the single rows.csv.gz of older folders."""
    one = folder / "rows.csv.gz"
    return [one] if one.is_file() else sorted([*folder.glob("rows-*.csv.xz"), *folder.glob("rows-*.csv.gz")])


def read_rows(folder: Path) -> pd.DataFrame:
    """Every row of a published folder (`row_files`), in one frame."""
    return pd.concat([pd.read_csv(f) for f in row_files(folder)], ignore_index=True)


def load_arrays(files) -> dict[str, np.ndarray]:
    """Every array of the existing .npz (or xz-compressed .npz.xz) `files`, in one dict (a later file's
    key wins; keys name their dataset, variant and seed, so files of different runs or trials never collide)."""
    arrays: dict[str, np.ndarray] = {}
    for f in map(Path, files):
        if f.is_file():
            src = io.BytesIO(lzma.decompress(f.read_bytes())) if f.name.endswith(".xz") else f
            with np.load(src) as z:
                arrays.update({k: z[k] for k in z.files})
    return arrays


def read_published_instances(folder: Path) -> dict[str, np.ndarray]:
    """Every array of a published folder's instances/<dataset>_<variant>.npz.xz (or .npz) files ({} when
    it has none)."""
    return load_arrays(sorted([*(folder / "instances").glob("*.npz"), *(folder / "instances").glob("*.npz.xz")]))


def published_source(folder: Path):
    """A published folder's per-instance terms as one instance_moments source: its kept moments
    (moments/), and the arrays of a folder published before moments were kept (instances/); None when it
    has neither."""
    from orchestration.report.instance_moments import ArrayMoments, read_moments
    kept, arrays = read_moments(folder), read_published_instances(folder)
    if not kept and not arrays:
        return None
    return ArrayMoments({k: a.astype(np.float16) for k, a in arrays.items()}, kept=kept)
