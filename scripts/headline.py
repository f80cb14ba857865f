"""Headline tables for docs/results/README.md from finished sweeps: test R@5 (x100, mean ± std over
seeds) per method and variant, (p, lambda) chosen by each validation criterion, and greedy P@5.

    .venv/bin/python scripts/headline.py RUN_DIR [RUN_DIR ...]      (prints Markdown)
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from orchestration.report.build import read_rows
from orchestration.selection import select

METHODS = ["logging", "dm", "banditnet", "pm_banditnet", "poxm", "wpoxm", "dr_poxm", "skyline", "skyline_e2e"]


def _cell(v: pd.Series) -> str:
    v = 100 * v.dropna()
    return "—" if v.empty else (f"{v.mean():.2f} ± {v.std(ddof=1):.2f}" if len(v) > 1 else f"{v.mean():.2f}")


def table(rows: pd.DataFrame, criterion: str, metric: str) -> pd.DataFrame:
    sel = select(rows, criterion)
    sel = sel[sel.selection != "oracle"][["dataset", "variant", "method", "seed", "p", "lam"]]
    fin = rows[rows.final & (rows.split == "test") & (rows.metric == metric)]
    m = fin.merge(sel, on=["dataset", "variant", "method", "seed", "p", "lam"])
    out = m.groupby(["method", "variant"]).value.apply(_cell).unstack("variant")
    return out.reindex([x for x in METHODS if x in out.index])


def main(run_dirs: list[str]) -> None:
    for rd in run_dirs:
        rows = read_rows(Path(rd) / "results" / "rows.csv")
        order = list(dict.fromkeys(rows.variant))
        for crit, metric in (("SNIS", "R@5"), ("IS", "R@5"), ("PIS", "R@5"), ("SNIS", "P@5")):
            t = table(rows, crit, metric)[order]
            print(f"\n### {Path(rd).name}: test {metric}, (p, λ) by validation {crit}\n")
            print("| method | " + " | ".join(order) + " |")
            print("|---" * (len(order) + 1) + "|")
            for m, r in t.iterrows():
                print(f"| {m} | " + " | ".join(str(r[v]) if isinstance(r[v], str) else "—" for v in order) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
