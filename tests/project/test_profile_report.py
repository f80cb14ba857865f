"""benchmarks/profile_report.py assembles a run directory from a published folder (its default source,
docs/results/real-data: rows-<dataset>.csv.xz and prepare.csv.xz since the lean repository)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from benchmarks.profile_report import assemble
from orchestration.report.instances import read_rows

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "docs" / "results" / "real-data"


def test_a_published_folder_becomes_a_run_directory_of_its_trials(tmp_path):
    names = assemble(SRC, tmp_path / "rd", epochs=0)
    rows = read_rows(SRC)
    cells = rows[["dataset", "variant", "seed"]].drop_duplicates()
    assert len(names) == len(cells) and len(set(names)) == len(names)
    sweep = json.loads((tmp_path / "rd" / "sweep.json").read_text())
    assert sweep["trials"] == names and len(sweep["grid"]) == len(rows[["dataset", "variant", "method", "p", "lam",
                                                                        "seed"]].drop_duplicates())
    one = pd.read_csv(tmp_path / "rd" / "trials" / names[0] / "rows.csv")
    d, v, s = names[0].rsplit("-", 2)
    assert len(one) == len(rows[(rows.dataset == d) & (rows.variant == v) & (rows.seed == int(s[1:]))])
    assert len(pd.read_csv(tmp_path / "rd" / "results" / "prepare.csv")) > 0
