"""How large each term of a claim's variance is, measured on a published results folder.

The variance of a claim cell's mean difference (inference.py) is V = σ_a²/n + σ_b²/m + σ_e²/(nm), the
seeds', the test instances' and their interaction's parts, each estimated from the cell's two-way layout
of per-instance differences:

  seed part         v_seed − v_int        (training randomness; averages out with more seeds)
  instance part     v_inst − v_int        (the one shared test split; more seeds never shrink it)
  interaction part  v_int                 (a seed's gain differing between instances)

Per cell of the claims table that has per-instance values (a published folder keeps the claims'
moments, moments/*.npz.xz), the share of each part in their sum, and which part is largest:

    python -m orchestration.report.claims_variance docs/results/real-data [--criterion IS]

A part estimated below zero (its mean square under the interaction's) counts as 0 (its share is 0);
the shares are of the sum of the parts so counted.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from orchestration.report.claims import claims
from orchestration.report.claims_family import default_family
from orchestration.report.inference import SEEDS_AND_INSTANCES
from orchestration.report.instances import published_source, read_rows
from orchestration.selection import PAPER_CRITERION, select

PARTS = ("seed", "instance", "interaction")


def shares(frame: pd.DataFrame) -> pd.DataFrame:
    """Per row of a claims frame with per-instance values: the three parts (module docstring), each
    one's share of their sum, the largest part, and the share the instance term had in the interval
    before the interaction was counted once (v_inst / (v_seed + v_inst))."""
    f = frame[frame["interval"] == SEEDS_AND_INSTANCES].copy()
    if f.empty:
        return f.assign(**{p: [] for p in PARTS}, dominant=[], old_instance_share=[])
    v_int = f["v_int"].to_numpy(dtype=float)
    parts = np.stack([np.maximum(f["v_seed"].to_numpy(dtype=float) - v_int, 0.0),
                      np.maximum(f["v_inst"].to_numpy(dtype=float) - v_int, 0.0), v_int], axis=1)
    total = parts.sum(axis=1, keepdims=True)
    share = np.divide(parts, total, out=np.zeros_like(parts), where=total > 0)
    for j, p in enumerate(PARTS):
        f[p] = share[:, j]
    f["dominant"] = [PARTS[j] for j in share.argmax(axis=1)]
    f["old_instance_share"] = f["v_inst"] / (f["v_seed"] + f["v_inst"])
    return f


def folder_shares(folder: Path, criteria: tuple[str, ...] = ("IS", PAPER_CRITERION)) -> pd.DataFrame:
    """`shares` of every claim cell a published folder can rebuild (its final rows, selection by each
    of `criteria` on the validation rows, its per-instance arrays), every cell in the default family."""
    rows = read_rows(folder)
    rows = rows[rows["final"]]
    instances = published_source(folder)
    frames = [claims(rows, select(rows, c), c, instances, family=default_family()) for c in criteria]
    return shares(pd.concat([f for f in frames if len(f)], ignore_index=True))


def summary(s: pd.DataFrame) -> str:
    """Median share of each part and the cells each part dominates (one line each), per criterion."""
    out = []
    for crit, g in s.groupby("criterion", sort=False):
        out.append(f"{crit}: {len(g)} cells with per-instance values")
        for p in PARTS:
            out.append(f"  {p:<12} median share {100 * g[p].median():5.1f} % (quartiles "
                       f"{100 * g[p].quantile(0.25):.1f}–{100 * g[p].quantile(0.75):.1f} %), largest in "
                       f"{int((g['dominant'] == p).sum())} of {len(g)} cells")
        out.append(f"  instance term's share of v_seed + v_inst (the interval before): median "
                   f"{100 * g['old_instance_share'].median():.1f} %")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="a published results folder (docs/results/<name>)")
    ap.add_argument("--criterion", action="append", help="criteria to select by (default: IS and SNIS)")
    ap.add_argument("--csv", type=Path, help="also write every cell's shares here")
    a = ap.parse_args(argv)
    s = folder_shares(a.folder, tuple(a.criterion or ("IS", PAPER_CRITERION)))
    if a.csv is not None:
        s.to_csv(a.csv, index=False)
    print(summary(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
