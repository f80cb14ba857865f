"""Headline tables for docs/results/README.md from finished sweeps: test R@5 (x100, mean ± std over
seeds) per method and variant, (p, lambda) chosen by each validation criterion, and greedy P@5; then
the protocol checks (POXM's R@5 against the logging policy's per variant and criterion, POXM's
greedy P@5 against the logging model's on A, the skylines' P@1).

    .venv/bin/python scripts/headline.py RUN_DIR [RUN_DIR ...]      (prints Markdown)
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from orchestration.report.build import read_rows
from orchestration.selection import select

METHODS = ["logging", "dm", "banditnet", "pm_banditnet", "poxm", "wpoxm", "dr_poxm", "skyline", "skyline_e2e"]
NAMES = {"logging": "Logging policy", "dm": "Direct Method", "banditnet": "BanditNet", "pm_banditnet": "PM-BanditNet",
         "poxm": "POXM", "wpoxm": "wPOXM", "dr_poxm": "DR-POXM", "skyline": "*Skyline, frozen inputs*",
         "skyline_e2e": "*Skyline, end to end*"}


def _cell(v: pd.Series) -> str:
    v = 100 * v.dropna()
    return "—" if v.empty else (f"{v.mean():.2f} ± {v.std(ddof=1):.2f}" if len(v) > 1 else f"{v.mean():.2f}")


def table(rows: pd.DataFrame, criterion: str, metric: str) -> pd.DataFrame:
    m = table_values(rows, criterion, metric)
    out = m.groupby(["method", "variant"]).value.apply(_cell).unstack("variant")
    return out.reindex([x for x in METHODS if x in out.index])


def main(run_dirs: list[str]) -> None:
    for rd in run_dirs:
        rows = read_rows(Path(rd) / "results" / "rows.csv")
        order = list(dict.fromkeys(rows.variant))
        for crit, metric in (("SNIS", "R@5"), ("IS", "R@5"), ("PIS", "R@5"), ("SNIS-LB", "R@5"), ("SNIS", "P@5")):
            if crit not in set(rows.loc[rows.split == "val", "metric"]):
                continue
            t = table(rows, crit, metric)[order]
            print(f"\n### {Path(rd).name}: test {metric}, (p, λ) by validation {crit}\n")
            print("| method | " + " | ".join(order) + " |")
            print("|---" * (len(order) + 1) + "|")
            for m, r in t.iterrows():
                print(f"| {NAMES.get(m, m)} | " + " | ".join(str(r[v]) if isinstance(r[v], str) else "—" for v in order) + " |")
        checks(rows)


def _mean(rows: pd.DataFrame, criterion: str, metric: str, method: str, variant: str) -> float:
    v = table_values(rows, criterion, metric)
    v = v[(v.method == method) & (v.variant == variant)].value
    return float(100 * v.mean()) if len(v) else float("nan")


def table_values(rows: pd.DataFrame, criterion: str, metric: str) -> pd.DataFrame:
    sel = select(rows, criterion)
    sel = sel[sel.selection != "oracle"][["dataset", "variant", "method", "seed", "p", "lam"]]
    fin = rows[rows.final & (rows.split == "test") & (rows.metric == metric)]
    return fin.merge(sel, on=["dataset", "variant", "method", "seed", "p", "lam"])


def checks(rows: pd.DataFrame) -> None:
    """Issue 8's acceptance checks from the rows (means over seeds, x100)."""
    order = list(dict.fromkeys(rows.variant))
    crits = [c for c in ("SNIS", "IS", "PIS", "SNIS-LB") if c in set(rows.loc[rows.split == "val", "metric"])]
    print("\n#### checks: POXM test R@5 against the logging policy's (mean over seeds)\n")
    print("| variant | logging | " + " | ".join(f"POXM ({c})" for c in crits) + " |")
    print("|---" * (len(crits) + 2) + "|")
    for v in order:
        lg = _mean(rows, "SNIS", "R@5", "logging", v)
        cells = []
        for c in crits:
            x = _mean(rows, c, "R@5", "poxm", v)
            cells.append(f"{x:.2f} {'yes' if x > lg else 'no'}")
        print(f"| {v} | {lg:.2f} | " + " | ".join(cells) + " |")
    if "A" in order:
        lg, px = _mean(rows, "SNIS", "P@5", "logging", "A"), _mean(rows, "SNIS", "P@5", "poxm", "A")
        print(f"\nGreedy P@5 on A: POXM (SNIS) {px:.2f}, logging model {lg:.2f}: {'yes' if px >= lg else 'no'}")
        for m in ("skyline", "skyline_e2e"):
            print(f"P@1 {m} (A): {_mean(rows, 'SNIS', 'P@1', m, 'A'):.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
