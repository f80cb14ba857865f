"""The advice poxm prints for a damaged trial result ("remove done.json and run `poxm resume` to
recompute that trial") works while Ray Tune's saved experiment is there: the resume fits a fresh Tuner
for the trial Tune counts as finished, and the trial is done again. A real local sweep (Ray on
127.0.0.1), in-process."""
from __future__ import annotations

import pytest
from conftest import cli

from orchestration.rundir import RunDir, recomputed_trials


@pytest.mark.slow
def test_remove_done_json_then_resume_recomputes_the_trial(tmp_path, capsys, monkeypatch):
    from conftest import write_cfg
    monkeypatch.setenv("POXM_STATE_DIR", str(tmp_path / "state"))
    cfg = write_cfg(tmp_path / "c.yaml", resources={"cpus_per_trial": 1}, mlflow={"enabled": False})
    rc, out, err = cli(capsys, "run", cfg, "--runs-dir", tmp_path / "runs", "--quiet")
    assert rc == 0, err[-3000:]
    rd = RunDir(next((tmp_path / "runs").glob("round5-*")))
    name = rd.read_sweep()["trials"][0]
    assert any((tmp_path / "state").rglob("experiment_state-*.json")), "no saved Tune experiment to test against"
    rows = rd.trial(name) / "rows.csv"
    rows.write_text(rows.read_text()[:-40])                # damaged: a truncated last line
    rc, out, err = cli(capsys, "report", rd.root, "--no-mlflow")
    assert rc == 2 and f"remove {rd.trial(name) / 'done.json'} and run `poxm resume" in err, err
    (rd.trial(name) / "done.json").unlink()                # the advice, followed
    assert recomputed_trials(rd, [name]) == [name]
    rc, out, err = cli(capsys, "resume", rd.root, "--quiet")
    assert rc == 0, err[-3000:]
    assert (rd.trial(name) / "done.json").is_file() and rows.read_text().endswith("\n")
    assert recomputed_trials(rd, rd.read_sweep()["trials"]) == []
