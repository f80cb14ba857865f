"""The report's per-trial sweep table: what each trial of the run cost and held, from the files the
trials leave in the run directory (trials/<name>/: done.json, timing.json, summary.json, memory.json,
state.json; sweep.json names the trials and their grid points). A run directory without trial folders
(a merged or published one) has no table.

Columns, one row per trial of sweep.json:
  state                done, errored, or not done
  wall s               the trial's time in its job: from the job's start (in a pack of trials, from the
                       end of the job's trial before it) to its end, summed over its attempts; Ray's and
                       the trial process's start-up, loading its data and any retry included
  compute s            its run_trial seconds (training, validation, checkpoints, final evaluation), summed
                       over attempts: wall s − compute s is what the orchestration cost it
  GPU memory MB        estimated from its shapes before it ran, and the peak it measured (summary.json's
                       'memory'); blank for a trial that ran on a CPU
  retries              starts beyond the first (a crash, a lost node, running out of memory)
  out-of-memory passes how often it ran out of GPU memory and ran again at twice its GPU share
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from orchestration.report.table_format import Table

COLUMNS = ["trial", "dataset", "variant", "seed", "state", "wall_s", "compute_s", "gpu_memory_estimate_mb",
           "gpu_memory_peak_mb", "retries", "oom_passes"]


def _json(path: Path) -> dict:
    try:
        out = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def _trial_points(sweep: dict) -> dict[str, tuple]:
    """trial name -> (dataset, variant, seed), from sweep.json's grid."""
    out: dict[str, tuple] = {}
    for g in sweep.get("grid") or []:
        if isinstance(g, dict) and "trial" in g:
            out.setdefault(str(g["trial"]), (g.get("dataset"), g.get("variant"), g.get("seed")))
    return out


def _wall(name: str, timings: dict[str, list[dict]], ends_by_job: dict) -> float | None:
    """The trial's seconds in its job, summed over attempts (module doc): each attempt from its job's
    start, or from the latest end of another trial's attempt in the same job before it began."""
    total, seen = 0.0, False
    for a in timings.get(name, []):
        if "end" not in a or "start" not in a:
            continue
        start = float(a["start"])
        before = [e for other, e in ends_by_job.get(a.get("job"), []) if other != name and e <= start]
        total += float(a["end"]) - max([float(a.get("job_start", start))] + before)
        seen = True
    return round(total, 1) if seen else None


def _ends_by_job(timings: dict[str, list[dict]]) -> dict:
    """job -> [(trial, an attempt's end)] over every trial's attempts."""
    out: dict = {}
    for name, attempts in timings.items():
        for a in attempts:
            if "end" in a:
                out.setdefault(a.get("job"), []).append((name, float(a["end"])))
    return out


def trial_frame(run_dir: str | Path) -> pd.DataFrame:
    """One row per trial of the run (COLUMNS); empty when the run directory has no trial folders."""
    run_dir = Path(run_dir)
    sweep = _json(run_dir / "sweep.json")
    names = [str(n) for n in sweep.get("trials") or []]
    trials = run_dir / "trials"
    if not names or not trials.is_dir() or not any((trials / n).is_dir() for n in names):
        return pd.DataFrame(columns=COLUMNS)
    points = _trial_points(sweep)
    timings = {n: list(_json(trials / n / "timing.json").get("attempts") or []) for n in names}
    ends = _ends_by_job(timings)
    rows = []
    for n in names:
        d = trials / n
        done, state, summary = _json(d / "done.json"), _json(d / "state.json"), _json(d / "summary.json")
        mem = summary.get("memory") or {}
        on_gpu = summary.get("device") not in (None, "cpu") or "peak_mb" in mem
        tries = done.get("tries", state.get("tries"))
        compute = sum(float(a.get("run_trial_s", 0.0)) for a in timings[n]) if timings[n] else None
        dataset, variant, seed = points.get(n, (None, None, None))
        rows.append({"trial": n, "dataset": dataset, "variant": variant, "seed": seed,
                     "state": "done" if done else ("errored" if state.get("state") == "errored" else "not done"),
                     "wall_s": _wall(n, timings, ends), "compute_s": None if compute is None else round(compute, 1),
                     "gpu_memory_estimate_mb": mem.get("estimate_mb") if on_gpu else None,
                     "gpu_memory_peak_mb": mem.get("peak_mb") if on_gpu else None,
                     "retries": max(0, int(tries) - 1) if tries is not None else None,
                     "oom_passes": int(_json(d / "memory.json").get("oom", 0))})
    return pd.DataFrame(rows, columns=COLUMNS)


def _cell(x, fmt: str = "{}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return ""
    if fmt == "{}" and isinstance(x, float) and x.is_integer():     # a count or seed in a column with blanks
        x = int(x)
    return fmt.format(x)


def sweep_table(frame: pd.DataFrame) -> Table:
    """The table of trial_frame's rows, with a note on the columns and the run's totals."""
    columns = ["Trial", "Dataset", "Variant", "Seed", "State", "Wall s", "Compute s", "GPU memory estimate MB",
               "GPU memory peak MB", "Retries", "Out-of-memory passes"]
    rows = [[_cell(r.trial), _cell(r.dataset), _cell(r.variant), _cell(r.seed), r.state, _cell(r.wall_s, "{:.1f}"),
             _cell(r.compute_s, "{:.1f}"), _cell(r.gpu_memory_estimate_mb, "{:,.0f}"),
             _cell(r.gpu_memory_peak_mb, "{:,.0f}"), _cell(r.retries), _cell(r.oom_passes)]
            for r in frame.itertuples(index=False)]
    wall, compute = frame["wall_s"].dropna(), frame["compute_s"].dropna()
    notes = ["Wall s: the trial's time in its job (from the job's start, or from the end of the job's trial "
             "before it), Ray's and the trial process's start-up, its data and any retry included; compute s: "
             "its training, validation, checkpoints and final evaluation. GPU memory: estimated from the "
             "trial's shapes before it ran and its measured peak (blank on a CPU). Out-of-memory passes: "
             "runs again at twice the GPU share after running out of memory (not failures of the method)."]
    if len(wall) and len(compute):
        notes.append(f"{(frame['state'] == 'done').sum()} of {len(frame)} trials done; wall {wall.sum():.1f} s, "
                     f"compute {compute.sum():.1f} s in all.")
    return Table(name="sweep_trials", title="The sweep's trials: time, GPU memory, retries", columns=columns,
                 rows=rows, notes=notes, frame=frame)


def sweep_table_blocks(run_dir: str | Path, protocol: str | None, tdir: Path, out: Path) -> list[tuple]:
    """The report's blocks for the table (a heading and the table), or none without trial folders."""
    from orchestration.report.blocks import table_blocks
    frame = trial_frame(run_dir)
    if frame.empty:
        return []
    return [("h2", "The sweep's trials")] + table_blocks(sweep_table(frame), protocol, tdir, out)
