"""What a sweep's result costs Ray Tune's event loop on the driver.

Every result a trial reports runs the Tuner's callbacks on Tune's loop, which meanwhile schedules and
starts no trial. On an H200 running 8 trials of 60 heads they took 0.5-0.9 s a result: each epoch report
carried every head's metrics (about 700 numbers), and Ray Tune's own TensorBoard logger wrote each one.
These tests fail when a result's cost grows with the heads or with the number of trials:

- Ray gets only the keys the driver reads, however many heads report metrics;
- the callbacks, completed as Tuner.fit completes them, hold no TensorBoard or CSV logger, and the JSON
  logger writes the same bytes a result for 1 head and for 60;
- the early report reads the trials' done.json files a fixed number of times over a run, not once a result.
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from orchestration.stages.ray_session import DRIVER_KEYS, RaySession


def _metrics(heads: int) -> dict:
    """An epoch's metrics as the trainer hands them on: every head's loss and estimates, with errors."""
    names = ("loss", "IS", "IS_se", "sIS", "sIS_se", "SNIS", "SNIS_se", "ESS", "DR", "DR_se", "V", "V_se")
    return {f"poxm_p{h}_lam0.9/{m}": 0.5 + h for h in range(heads) for m in names}


class _Api:
    """ray.tune as RaySession sees it: what each report hands Ray."""
    def __init__(self):
        self.reports = []
        self.Checkpoint = SimpleNamespace(from_directory=lambda d: d)

    def report(self, metrics, checkpoint=None):
        self.reports.append(dict(metrics))


class _Files:
    store = None

    def set_state(self, *a, **k):
        pass


def _reported(monkeypatch, tmp_path, heads: int, epochs: int = 4) -> list[dict]:
    """The results Ray gets from a trial of `heads` heads over `epochs` epochs (every one due)."""
    from orchestration.stages.epoch_reports import EpochReports
    api = _Api()
    monkeypatch.setattr(RaySession, "_api", lambda self: api)
    rep = EpochReports(trial="t", files=_Files(), out_dir=tmp_path, logger=None, pace=None, crash=None,
                       epochs=epochs, member=0, heads=heads, head_epochs_before=0, packed=False,
                       session=RaySession("tune"))
    for e in range(1, epochs + 1):
        rep(e, _metrics(heads), None)
    RaySession("tune").report({"member_finished": 1, "member": 0, "head_epochs": heads * epochs, "finished": 1})
    return api.reports


def test_ray_gets_only_what_the_driver_reads(monkeypatch, tmp_path):
    got = _reported(monkeypatch, tmp_path, heads=60)
    assert [r["epoch"] for r in got[:-1]] == [1, 2, 3, 4] and [r["head_epochs"] for r in got[:-1]] == [60, 120, 180, 240]
    assert all(set(r) <= DRIVER_KEYS for r in got)
    assert got[-1] == {"member_finished": 1, "member": 0, "head_epochs": 240, "finished": 1}
    assert all({"epoch", "member", "head_epochs"} <= set(r) for r in got[:-1])     # what the progress bar reads


class _Trial:
    """What Tune's logger callbacks and ours read of a trial."""
    def __init__(self, path, name):
        self.local_path, self.trial_id, self.status = str(path), name, "RUNNING"
        self.config = {"trial": {"name": name, "members": [name], "heads": 60}}
        self.checkpoint, self.evaluated_params, self.last_result = None, {"trial": name}, {}

    def init_local_path(self):
        pass

    def __hash__(self):
        return id(self)


def _plan(tmp_path):
    from orchestration.stages.plan import plan_sweep
    from poxm_core.config.schema import load_config
    data = {"name": "cb", "seeds": [0], "mlflow": {"enabled": False},
            "datasets": [{"name": "synthetic", "synthetic": {"n_train": 50, "n_test": 20, "n_features": 30,
                                                              "n_labels": 10}, "variants": [{"name": "A", "alpha": 0.5}]}],
            "methods": {"logging": {}, "poxm": {"p": [2], "lam": [0.9]}}}
    return plan_sweep(load_config(data=data), runs_dir=tmp_path / "runs", check_data=False)


def _json_bytes_per_result(monkeypatch, tmp_path, heads: int, counted: list) -> list[int]:
    """Run a trial's results through the Tuner's callbacks, completed as Tuner.fit completes them;
    the bytes Tune's JSON logger wrote for each result."""
    from ray.tune.callback import CallbackList
    from ray.tune.utils.callback import _create_default_callbacks

    from orchestration.stages.progress import SweepProgress
    from orchestration.stages.tune import json_logger_only, tune_callbacks
    import tensorboardX
    monkeypatch.setattr(tensorboardX.SummaryWriter, "add_scalar",
                        lambda self, *a, **k: counted.append(a[0]), raising=True)
    plan = _plan(tmp_path / f"h{heads}")
    with json_logger_only():
        callbacks = _create_default_callbacks(tune_callbacks(plan, SweepProgress(1, enabled=False, epochs=4)))
    names = {type(c).__name__ for c in callbacks}
    assert "TBXLoggerCallback" not in names and "CSVLoggerCallback" not in names and "JsonLoggerCallback" in names
    trial = _Trial(tmp_path / f"trial{heads}", plan.names[0])
    (tmp_path / f"trial{heads}").mkdir()
    cbs = CallbackList(callbacks)
    sizes, result_file = [], tmp_path / f"trial{heads}" / "result.json"
    for i, r in enumerate(_reported(monkeypatch, tmp_path, heads)[:-1], start=1):
        cbs.on_trial_result(iteration=i, trials=[trial], trial=trial,
                            result={**r, "training_iteration": i, "time_this_iter_s": 1.0, "trial_id": trial.trial_id})
        sizes.append(len(json.loads(result_file.read_text().splitlines()[-1])))
    return sizes


def test_a_result_costs_the_loop_the_same_for_1_head_and_60(monkeypatch, tmp_path):
    counted: list = []
    one = _json_bytes_per_result(monkeypatch, tmp_path, 1, counted)
    sixty = _json_bytes_per_result(monkeypatch, tmp_path, 60, counted)
    assert one == sixty and len(sixty) == 4
    assert counted == []         # no TensorBoard scalar written on the loop


def test_json_logger_only_is_restored(monkeypatch):
    from orchestration.stages.tune import LOGGERS_ENV, json_logger_only
    env = {LOGGERS_ENV: "0"}
    with json_logger_only(env):
        assert env[LOGGERS_ENV] == "1"
    assert env == {LOGGERS_ENV: "0"}
    env = {}
    with json_logger_only(env):
        pass
    assert env == {}


@pytest.mark.parametrize("n", [5, 50])
def test_the_early_report_reads_done_files_a_fixed_number_of_times(monkeypatch, tmp_path, n):
    """n trials finish one by one: done.json files read twice in all (once at the first, once to confirm
    the last), not once a result; the hook is called once, when the last one is done."""
    import orchestration.stages.trial as trial_mod
    from orchestration.stages import tune

    names = [f"t{i}" for i in range(n)]
    reads = []
    real = trial_mod.done_trials
    monkeypatch.setattr(trial_mod, "done_trials", lambda root, ns: reads.append(1) or real(root, ns))
    started = []
    monkeypatch.setattr("orchestration.report.figure_pool.prestart", lambda procs=None: started.append(1))
    called = []
    tune._ALL_DONE[str(tmp_path)] = lambda: called.append(len(reads))
    try:
        cb = tune.ReportEarly(tmp_path, names)
        for i, name in enumerate(names):
            (tmp_path / "trials" / name).mkdir(parents=True)
            (tmp_path / "trials" / name / "done.json").write_text("{}")
            t = SimpleNamespace(config={"trial": {"name": name}})
            cb.on_trial_result(i, [], t, {"epoch": 3, "member": 0})          # an epoch: nothing read
            cb.on_trial_result(i, [], t, {"member_finished": 1, "member": 0, "finished": 1})
            assert called == ([] if i < n - 1 else [2])
        tune.wait_prestarted(tmp_path)
    finally:
        tune._ALL_DONE.pop(str(tmp_path), None)
    assert len(reads) == 2
    assert started == [1]           # the report's drawing processes: started once, off the loop
    import sys
    assert "orchestration.report.build" in sys.modules      # and its modules imported


def test_the_early_report_counts_trials_a_restarted_job_found_done(monkeypatch, tmp_path):
    """A job whose trials were done before (a retry after a crash) reports 'skipped': the files are read again."""
    from orchestration.stages import tune
    monkeypatch.setattr("orchestration.report.figure_pool.prestart", lambda procs=None: False)
    names = ["a", "b"]
    called = []
    tune._ALL_DONE[str(tmp_path)] = lambda: called.append(1)
    try:
        cb = tune.ReportEarly(tmp_path, names)
        for n in names:
            (tmp_path / "trials" / n).mkdir(parents=True)
        (tmp_path / "trials/a/done.json").write_text("{}")
        cb.on_trial_result(0, [], SimpleNamespace(config={"trial": {"name": "a"}}), {"member_finished": 1, "member": 0})
        (tmp_path / "trials/b/done.json").write_text("{}")     # finished without its report reaching the driver
        assert called == []
        cb.on_trial_result(1, [], SimpleNamespace(config={"trial": {"name": "b"}}),
                           {"finished": 1, "skipped": 1, "member": 0})
        assert called == [1]
        tune.wait_prestarted(tmp_path)
    finally:
        tune._ALL_DONE.pop(str(tmp_path), None)
