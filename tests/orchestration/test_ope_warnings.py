"""`poxm ope` flags what makes a row's numbers unsafe where they are shown (an effective sample size
below 1 % of the log's rows, an estimate or interval outside a click rate's [0, 1]) and writes under
the runs folder unless --out says otherwise."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from orchestration.report.ope_truth import ope_table, ope_warnings
from poxm_core.config.schema import default_data_root

OBD = default_data_root() / "obd"


def _row(**kw):
    base = dict(campaign="women", target="random", log="bts", estimator="DR", value=0.005, stderr=0.001,
                ci_low=0.003, ci_high=0.007, ess=5000.0, truth=0.0046, truth_stderr=0.0007, rel_error=0.1,
                rel_error_boot=0.2, covers=True, z=0.3, n=10_000)
    return SimpleNamespace(**{**base, **kw})


def test_warnings_hand_values():
    assert ope_warnings(_row()) == ""
    assert ope_warnings(_row(ess=99.0)) == "low ESS (99 < 100)"           # 1 % of 10,000 rows
    assert ope_warnings(_row(ess=100.0)) == ""
    # women, random <- bts, DR in the published table: ESS 2, -0.085 %, [-1.963, 1.793] %
    assert ope_warnings(_row(ess=2.0, value=-0.00085, ci_low=-0.01963, ci_high=0.01793)) == \
        "low ESS (2 < 100); estimate < 0; interval leaves [0, 1]"
    assert ope_warnings(_row(value=1.2, ci_low=math.nan, ci_high=math.nan, ess=math.nan)) == "estimate > 1"


def test_the_table_carries_the_warning_column_and_says_what_it_means():
    t = ope_table(pd.DataFrame([vars(_row()), vars(_row(ess=2.0, value=-0.00085, ci_low=-0.02, ci_high=0.02))]))
    assert t.columns[-1] == "warning" and t.rows[0][-1] == "" and t.rows[1][-1].startswith("low ESS (2 < 100)")
    assert any("low ESS: an effective sample size below 1 % of the log's rows" in n for n in t.notes)


@pytest.mark.skipif(not (OBD / "original").is_dir(), reason="OBD sample not in the data root")
def test_ope_writes_under_the_runs_folder_by_default(tmp_path, monkeypatch, capsys):
    from orchestration.cli import main
    monkeypatch.chdir(tmp_path)
    assert main(["ope", "--campaigns", "women", "--n-boot", "2", "--clusters", "0"]) == 0
    out = tmp_path / "runs" / "ope-obd"
    assert (out / "ope.md").is_file() and (out / "ope.csv").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
    text = capsys.readouterr().out
    assert "runs/ope-obd/ope.md" in text and "with a warning" in text
    md = (out / "ope.md").read_text()
    assert "| women | random ← bts | IS |" in md and "low ESS (" in md
