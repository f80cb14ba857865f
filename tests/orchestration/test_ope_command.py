"""`poxm ope` (orchestration/ope.py) in-process: the OBD sample gives the table; a malformed log is one
line, exit 2, nothing written."""
from __future__ import annotations

import tarfile

import pandas as pd
import pytest

from orchestration.cli import main
from poxm_core.config.schema import default_data_root

OBD = default_data_root() / "obd"
pytestmark = pytest.mark.skipif(not (OBD / "original").is_dir(), reason="OBD sample not in the data root")


def _obd_folder(tmp_path, campaign="men"):
    with tarfile.open(next((OBD / "original").glob("obp-*.tar.gz"))) as tar:
        tar.extractall(tmp_path, members=[m for m in tar.getmembers() if f"/{campaign}/" in m.name], filter="data")
    return next(tmp_path.rglob("obd"))


def test_ope_writes_the_table(tmp_path):
    out = tmp_path / "out"
    assert main(["ope", "--campaigns", "men", "--n-boot", "2", "--out", str(out)]) == 0
    df = pd.read_csv(out / "ope.csv")
    assert set(df.estimator) == {"IS", "sIS p=10", "sIS p=20", "SNIS", "DR", "PIS", "DM", "MIPS", "OffCEM"}
    assert set(zip(df.target, df.log)) == {("bts", "random"), ("random", "bts")}
    assert df.truth[df.target == "bts"].iloc[0] == pytest.approx(0.0069)      # TS's click rate in its own log
    assert "| men | bts ← random | IS |" in (out / "ope.md").read_text()


@pytest.mark.parametrize("column, value, message", [
    ("propensity_score", 0.0, "row 5 (line 6), column 'propensity_score': expected a propensity in [1e-06, 1], got 0.0"),
    ("position", 4, "row 5 (line 6), column 'position': expected a position within the slate [1, 3], got 4"),
    ("item_id", 34, "row 5 (line 6), column 'item_id': expected an action of the action set [0, 34), got 34"),
])
def test_malformed_log_is_one_line_exit_2_nothing_written(tmp_path, capsys, column, value, message):
    folder = _obd_folder(tmp_path / "data")
    f = folder / "random" / "men" / "men.csv"
    df = pd.read_csv(f, index_col=0)
    df.loc[df.index[4], column] = value
    df.to_csv(f)
    out = tmp_path / "out"
    assert main(["ope", "--data", str(folder), "--campaigns", "men", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("poxm: error: ") and "\n" not in err
    assert f"{f}: {message}" in err
    assert not out.exists()


def test_missing_column_and_bad_arguments(tmp_path, capsys):
    folder = _obd_folder(tmp_path / "data")
    f = folder / "bts" / "men" / "men.csv"
    pd.read_csv(f, index_col=0).drop(columns="click").to_csv(f)
    assert main(["ope", "--data", str(folder), "--campaigns", "men", "--out", str(tmp_path / "o")]) == 2
    assert "header (line 1), column 'click': required column missing" in capsys.readouterr().err
    assert main(["ope", "--campaigns", "kids", "--out", str(tmp_path / "o")]) == 2
    assert "--campaigns: expected some of all, men, women, got 'kids'" in capsys.readouterr().err
    assert main(["ope", "--p", "ten", "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o").exists()
