"""The per-instance test values a published report keeps: the selected heads' only, in half precision.

A run keeps every head's per-instance test values (results/test_instances.npz: every grid point of
every trial, hundreds of MB for a full benchmark). The claims read only the heads a criterion selected,
so a published folder keeps those (instances.npz: the heads of every honest selection, not the
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


def write_selected(instances_npz: Path, selection: pd.DataFrame, out: Path, datasets: list[str] | None = None) -> int:
    """Write the selected heads' arrays of `instances_npz` to `out` as float16 (only `datasets` where
    given); returns the number written."""
    keys = selected_keys(selection if datasets is None else selection[selection["dataset"].isin(datasets)])
    with np.load(instances_npz) as z:
        have = set(z.files)
        arrays = {k: z[k].astype(np.float16) for k in keys if k in have}
    tmp = out.with_name(f".{out.name}.tmp")
    with open(tmp, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    tmp.replace(out)
    return len(arrays)
