"""The report built while Ray winds down: the Tune callback that notices every trial is done (and
starts the report's drawing processes at the first), and the sweep's thread that gathers and reports."""
from __future__ import annotations

import pickle
import threading

import pytest

from orchestration.stages import sweep as sw
from orchestration.stages import tune as ts
from orchestration.rundir import write_json


def test_the_callback_calls_the_hook_once_when_every_trial_is_done(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from orchestration.report import figure_pool
    started = []
    monkeypatch.setattr(figure_pool, "prestart", lambda: started.append(1))
    calls = []
    monkeypatch.setitem(ts._ALL_DONE, str(tmp_path), lambda: calls.append(1))
    cb = ts.ReportEarly(tmp_path, ["a", "b"])
    # Tune pickles its callbacks with the experiment: the copy finds the hook by run directory
    cb = pickle.loads(pickle.dumps(cb))
    a, b = (SimpleNamespace(config={"trial": {"name": n}}) for n in "ab")
    cb.on_trial_result(0, [], a, {"epoch": 3})
    assert started == [] and calls == []
    write_json(tmp_path / "trials" / "a" / "done.json", {})
    cb.on_trial_result(0, [], a, {"member_finished": 1})
    ts.wait_prestarted(tmp_path)           # started on a thread of its own, off Tune's loop
    assert started == [1] and calls == []              # drawing processes at the first trial, b not done
    write_json(tmp_path / "trials" / "b" / "done.json", {})
    cb.on_trial_result(0, [], b, {"member_finished": 1, "finished": 1})
    cb.on_trial_result(0, [], b, {"member_finished": 1})
    assert started == [1] and calls == [1]
    other = ts.ReportEarly(tmp_path / "elsewhere", ["a"])        # no hook for its run directory: nothing
    other.on_trial_result(0, [], a, {"member_finished": 1})
    ts.wait_prestarted(tmp_path / "elsewhere")


def test_the_early_report_runs_once_and_hands_over_its_result_or_error(monkeypatch):
    gate, runs = threading.Event(), []

    def fake(plan, prep, say):
        gate.wait(5)
        runs.append(1)
        if prep == "fail":
            raise RuntimeError("report broke")
        return ("prepared", 1.0, "rows", "report", 2.0)
    monkeypatch.setattr(sw, "gather_select_report", fake)
    early = sw.EarlyReport(None, "ok", print)
    assert early.result() is None                        # never started: the sweep reports as always
    early.start()
    early.start()
    gate.set()
    assert early.result() == ("prepared", 1.0, "rows", "report", 2.0) and runs == [1]
    broken = sw.EarlyReport(None, "fail", print)
    broken.start()
    with pytest.raises(RuntimeError, match="report broke"):
        broken.result()
