"""The advice poxm prints for a damaged trial result ("remove done.json and run `poxm resume` to
recompute that trial") works while Ray Tune's saved experiment is there: the resume fits a fresh Tuner
for the trial Tune counts as finished, and the trial is done again. A real local sweep (Ray on
127.0.0.1), in-process."""
from __future__ import annotations

import pytest
from tests.cli_peers import cli

from orchestration.rundir import RunDir, recomputed_trials

pytestmark = pytest.mark.usefixtures("no_user_settings")   # the user's settings reset around each test


@pytest.mark.slow
@pytest.mark.timeout(1500)    # two sweeps through real Ray: ~4.5 min on the loaded 2-core machine
def test_remove_done_json_then_resume_recomputes_the_trial(tmp_path, capsys, monkeypatch):
    from tests.cli_peers import write_cfg
    monkeypatch.setenv("POXM_STATE_DIR", str(tmp_path / "state"))
    cfg = write_cfg(tmp_path / "c.yaml", resources={"cpus_per_trial": 1}, mlflow={"enabled": False})
    rc, out, err = cli(capsys, "run", cfg, "--runs-dir", tmp_path / "runs", "--quiet")
    assert rc == 0, err[-3000:]
    rd = RunDir(next((tmp_path / "runs").glob("checks-*")))
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


def test_a_trial_that_finished_once_makes_resume_fit_a_fresh_tuner(tmp_path):
    """Without Ray: a trial with an attempt in timing.json and no done.json (its done.json removed to
    recompute it) means Ray Tune's saved experiment does not cover the plan (tune_covers), so the resume
    fits a fresh Tuner, which runs it; a trial that never finished, or one that is done, does not."""
    from tests.cli_peers import planned

    from orchestration.rundir import write_json
    from orchestration.stages.merge import tune_covers
    from orchestration.stages.plan import plan_from_run_dir
    rd = planned(tmp_path)
    plan = plan_from_run_dir(rd.root)
    name = plan.names[0]
    assert tune_covers(plan)
    write_json(rd.trial(name) / "timing.json", {"attempts": []})          # started, never finished
    assert tune_covers(plan)
    write_json(rd.trial(name) / "timing.json", {"attempts": [{"run_trial_s": 1.0}]})
    write_json(rd.trial(name) / "done.json", {"epoch": 1})
    assert tune_covers(plan)                                               # finished and done
    (rd.trial(name) / "done.json").unlink()                                # the advice, followed
    assert not tune_covers(plan)
