"""How large each term of a claim's variance is (orchestration/report/claims_variance.py): the parts and
shares against hand-computed values, a part estimated below zero counted as 0, and the numbers
docs/report.md quotes measured again on the published real-data folder."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from orchestration.report.claims_variance import folder_shares, shares, summary
from orchestration.report.inference import SEEDS_AND_INSTANCES, SEEDS_ONLY

ROOT = Path(__file__).resolve().parents[3]


def _frame():
    return pd.DataFrame([
        # parts: seed 0.5 - 0.1 = 0.4, instance 0.3 - 0.1 = 0.2, interaction 0.1: shares 4/7, 2/7, 1/7
        {"criterion": "IS", "interval": SEEDS_AND_INSTANCES, "v_seed": 0.5, "v_inst": 0.3, "v_int": 0.1},
        # the instance mean square below the interaction's: its part 0; seed 0.8, interaction 0.2
        {"criterion": "IS", "interval": SEEDS_AND_INSTANCES, "v_seed": 1.0, "v_inst": 0.1, "v_int": 0.2},
        # instance-dominated: seed 0.05, instance 0.85, interaction 0.1
        {"criterion": "IS", "interval": SEEDS_AND_INSTANCES, "v_seed": 0.15, "v_inst": 0.95, "v_int": 0.1},
        {"criterion": "IS", "interval": SEEDS_ONLY, "v_seed": 1.0, "v_inst": 0.0, "v_int": 0.0}])   # no instances


def test_parts_and_shares_hand_computed():
    s = shares(_frame())
    assert len(s) == 3                                          # the seeds-only row has no test-set terms
    assert s[["seed", "instance", "interaction"]].to_numpy().ravel() == pytest.approx(
        [4 / 7, 2 / 7, 1 / 7, 0.8, 0.0, 0.2, 0.05, 0.85, 0.1])
    assert s["dominant"].tolist() == ["seed", "seed", "instance"]
    assert s["old_instance_share"].tolist() == pytest.approx([0.3 / 0.8, 0.1 / 1.1, 0.95 / 1.1])
    text = summary(s)
    assert "IS: 3 cells" in text and "largest in 1 of 3 cells" in text and "median share  28.6 %" in text


@pytest.mark.slow
def test_the_shares_docs_report_quotes():
    """docs/report.md, "How large each term is": the published real-data run at P under IS."""
    s = folder_shares(ROOT / "docs" / "results" / "real-data", ("IS",))
    assert len(s) == 32 and (s["dominant"] == "seed").sum() == 30 and (s["dominant"] == "instance").sum() == 2
    assert (s["seed"].median(), s["instance"].median(), s["interaction"].median()) == pytest.approx(
        (0.910, 0.037, 0.041), abs=0.001)
    assert (ROOT / "docs" / "report.md").read_text().count("91.0 %") >= 1
