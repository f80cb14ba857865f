"""The per-instance test values a published report keeps: the selected heads' only, in half precision.

A run keeps every head's per-instance test values (results/test_instances.npz: every grid point of
every trial, hundreds of MB for a full benchmark). The claims read only the heads a criterion selected,
so a published folder keeps those (instances/<dataset>.npz: the heads of every honest selection, not the
oracle's; float16, whose relative rounding of 5e-4 on one instance's value moves an interval's width by
far less than its last printed digit), and a report rebuilt from the folder computes the same intervals.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from orchestration.report.claims import instance_key

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
    dataset (`<dataset>.npz`: each stays small enough for a repository), only `datasets` where given;
    returns the number of arrays written."""
    sel = selection if datasets is None else selection[selection["dataset"].astype(str).isin(datasets)]
    keys = selected_keys(sel)
    out_dir.mkdir(parents=True, exist_ok=True)
    n = 0
    with np.load(instances_npz) as z:
        have = set(z.files)
        for d in sorted({k.split("|", 1)[0] for k in keys}):
            arrays = {k: z[k].astype(np.float16) for k in keys if k in have and k.split("|", 1)[0] == d}
            tmp = out_dir / f".{d}.npz.tmp"
            with open(tmp, "wb") as fh:
                np.savez_compressed(fh, **arrays)
            tmp.replace(out_dir / f"{d}.npz")
            n += len(arrays)
    return n


def load_arrays(files) -> dict[str, np.ndarray]:
    """Every array of the existing .npz `files`, in one dict (a later file's key wins; keys name their
    dataset, variant and seed, so files of different runs or trials never collide)."""
    arrays: dict[str, np.ndarray] = {}
    for f in files:
        if Path(f).is_file():
            with np.load(f) as z:
                arrays.update({k: z[k] for k in z.files})
    return arrays


def read_published_instances(folder: Path) -> dict[str, np.ndarray]:
    """Every array of a published folder's instances/<dataset>.npz files ({} when it has none)."""
    return load_arrays(sorted((folder / "instances").glob("*.npz")))
