"""benchmarks/sweep_vs_plain.py's timeline: where a sweep's wall time went, on hand-made run files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

# as a module of the benchmarks package: benchmarks/ put on sys.path would make its profile.py the stdlib's
# `profile` for the whole test run (cProfile, which torch._dynamo imports, then fails)
from benchmarks.sweep_vs_plain import timeline


def _write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def test_pieces_hand_computed(tmp_path):
    marks = {"process_start": 99.0, "execute_start": 104.0, "ray_ready": 110.5, "trials_start": 111.0,
             "trials_end": 180.0, "report_end": 181.5}
    _write(tmp_path / "results/sweep_summary.json", {"timeline": marks})
    _write(tmp_path / "trials/a/timing.json", {"attempts": [{"job_start": 113.0, "worker_start": 115.5,
                                                             "worker_ready": 116.0, "start": 116.5, "end": 170.0}]})
    _write(tmp_path / "trials/b/timing.json", {"attempts": [{"job_start": 114.0, "worker_start": 117.0,
                                                             "worker_ready": 117.5, "start": 118.0, "end": 178.0}]})
    got = timeline(tmp_path, launched=98.5, exited=184.0)
    assert got["imports_and_plan"] == 5.5 and got["lock_tracking_ray_start"] == 6.5
    assert got["prepare_and_tune_setup"] == 0.5
    # the first trial to compute (a): from Tune's start 111 to its compute 116.5, in three parts
    assert got["trial_process_start"] == 5.5
    assert (got["  of_which_to_trial_function"], got["  of_which_imports_to_worker"],
            got["  of_which_worker_to_compute"]) == (2.0, 2.5, 0.5)
    assert got["trials"] == 61.5 and got["tune_wind_down"] == 2.0          # 116.5 -> 178, 178 -> 180
    assert got["report_after_last_trial"] == 3.5 and got["summary_close_shutdown_exit"] == 2.5
    # from launch to exit the pieces add up to the wall time: the report after the last trial overlaps
    # Tune's wind-down, so only what it took beyond that counts once
    top = sum(v for k, v in got.items() if not k.startswith("  ") and k != "report_after_last_trial")
    assert top + got["report_after_last_trial"] - got["tune_wind_down"] == pytest.approx(184.0 - 98.5)


def test_no_timeline_from_an_older_summary(tmp_path):
    _write(tmp_path / "results/sweep_summary.json", {"wall_s": 10.0})
    _write(tmp_path / "trials/a/timing.json", {"attempts": [{"start": 1.0, "end": 2.0}]})
    assert timeline(tmp_path, 0.0, 12.0) == {}
