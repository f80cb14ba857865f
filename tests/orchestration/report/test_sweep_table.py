"""The report's per-trial sweep table on hand-made trial files (orchestration/report/sweep_table.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from orchestration.report.sweep_table import sweep_table, sweep_table_blocks, trial_frame


def _write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _run(tmp: Path) -> Path:
    """Four trials: `a` ran out of GPU memory once, then finished at twice its share; `b` and `c` one pack
    (job pack000, one after the other) on a CPU; `d` errored three times, no attempt recorded."""
    run = tmp / "run"
    points = {"a": ("bibtex", "A", 0), "b": ("corel5k", "A", 0), "c": ("corel5k", "A", 1), "d": ("bibtex", "B", 0)}
    grid = [{"dataset": d, "variant": v, "method": m, "p": None, "lam": None, "seed": s, "trial": n}
            for n, (d, v, s) in points.items() for m in ("logging", "poxm")]
    _write(run / "sweep.json", {"name": "t", "trials": list(points), "grid": grid})
    t = run / "trials"
    # a: the out-of-memory attempt recorded no attempt; the second pass's job started at 200
    _write(t / "a/timing.json", {"attempts": [{"job": "a", "job_start": 200.0, "start": 204.5, "end": 260.25,
                                               "run_trial_s": 55.25}]})
    _write(t / "a/done.json", {"finished": 260.3, "tries": 2, "run_trial_s": 55.25})
    _write(t / "a/summary.json", {"device": "cuda", "memory": {"estimate_mb": 6289.4, "peak_mb": 6522.1,
                                                               "peak_first_epoch_mb": 6400.0}})
    _write(t / "a/memory.json", {"oom": 1, "last_share": 0.25})
    # b then c in one job: c's time in the job begins when b ended (150), not when the job began (100)
    _write(t / "b/timing.json", {"attempts": [{"job": "pack000", "job_start": 100.0, "start": 110.0, "end": 150.0,
                                               "run_trial_s": 38.0}]})
    _write(t / "c/timing.json", {"attempts": [{"job": "pack000", "job_start": 100.0, "start": 152.0, "end": 190.0,
                                               "run_trial_s": 36.0}]})
    for n in ("b", "c"):
        _write(t / n / "done.json", {"tries": 1})
        _write(t / n / "summary.json", {"device": "cpu", "memory": {"estimate_mb": 50.7}})
    _write(t / "d/state.json", {"state": "errored", "tries": 3})
    return run


def test_one_row_per_trial_hand_computed(tmp_path):
    f = trial_frame(_run(tmp_path)).set_index("trial")
    assert list(f.index) == ["a", "b", "c", "d"]
    a, b, c, d = (f.loc[n] for n in "abcd")
    assert (a["dataset"], a["variant"], a["seed"], a["state"]) == ("bibtex", "A", 0, "done")
    assert a["wall_s"] == pytest.approx(60.2) and a["compute_s"] == pytest.approx(55.2)   # 260.25 - 200, rounded
    assert (a["gpu_memory_estimate_mb"], a["gpu_memory_peak_mb"]) == (6289.4, 6522.1)
    assert (a["retries"], a["oom_passes"]) == (1, 1)
    assert b["wall_s"] == 50.0 and c["wall_s"] == 40.0 and (b["compute_s"], c["compute_s"]) == (38.0, 36.0)
    assert c["seed"] == 1 and b["retries"] == 0 and b["oom_passes"] == 0
    assert pd.isna(b["gpu_memory_estimate_mb"]) and pd.isna(b["gpu_memory_peak_mb"])     # a CPU trial: blank
    assert d["state"] == "errored" and pd.isna(d["wall_s"]) and pd.isna(d["compute_s"]) and d["retries"] == 2


def test_a_retried_attempt_counts_from_its_own_jobs_start(tmp_path):
    """Two attempts (a crash, then a retry of the same job): each from its job's start, summed."""
    run = _run(tmp_path)
    _write(run / "trials/a/timing.json", {"attempts": [
        {"job": "a", "job_start": 0.0, "start": 5.0, "end": 30.0, "run_trial_s": 25.0},
        {"job": "a", "job_start": 40.0, "start": 44.0, "end": 60.0, "run_trial_s": 16.0}]})
    a = trial_frame(run).set_index("trial").loc["a"]
    assert a["wall_s"] == 50.0 and a["compute_s"] == 41.0


def test_the_table_shows_blanks_on_a_cpu_and_the_totals(tmp_path):
    t = sweep_table(trial_frame(_run(tmp_path)))
    rows = {r[0]: r for r in t.rows}
    assert rows["a"] == ["a", "bibtex", "A", "0", "done", "60.2", "55.2", "6,289", "6,522", "1", "1"]
    assert rows["b"][7:9] == ["", ""] and rows["d"][4:7] == ["errored", "", ""] and rows["d"][9:] == ["2", "0"]
    assert t.columns[7:9] == ["GPU memory estimate MB", "GPU memory peak MB"]
    assert "3 of 4 trials done; wall 150.2 s, compute 129.2 s in all." in t.notes


def test_written_and_shown_in_the_report(tmp_path):
    from orchestration.report.index import render_markdown
    run = _run(tmp_path)
    out = run / "report"
    blocks = sweep_table_blocks(run, "paper", out / "tables", out)
    assert blocks[0] == ("h2", "The sweep's trials")
    md = render_markdown(blocks)
    assert "| a | bibtex | A | 0 | done | 60.2 | 55.2 | 6,289 | 6,522 | 1 | 1 |" in md
    csv = (out / "tables" / "sweep_trials.csv").read_text().splitlines()
    assert csv[0].startswith("trial,dataset,variant,seed,state,wall_s,compute_s,gpu_memory_estimate_mb")
    assert "tables/sweep_trials.md" in md


def test_no_table_without_trial_folders(tmp_path):
    run = _run(tmp_path)
    import shutil
    shutil.rmtree(run / "trials")
    assert trial_frame(run).empty and sweep_table_blocks(run, None, tmp_path / "t", tmp_path) == []
    (run / "sweep.json").write_text(json.dumps([{"dataset": "d"}]))        # an older sweep.json: a bare grid
    assert trial_frame(run).empty
