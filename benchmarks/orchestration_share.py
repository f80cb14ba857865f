"""The orchestration share of a finished sweep: the share of its wall time during which no trial was
computing (1 - busy / wall, busy = the union of every trial attempt's run_trial interval), from the
run directory's files alone (no Ray, no MLflow): results/sweep_summary.json (the latest invocation's
wall time and end) and trials/<t>/timing.json (per attempt: start, end, run_trial_s, job, job_start).

    python benchmarks/orchestration_share.py RUN_DIR [RUN_DIR ...] [--json]

Per run directory it prints the trials, the Ray Train jobs they ran in (a job runs one trial, or a
pack of them: resources.trials_per_job), the sweep's wall time, the trials' compute, the busy time,
the share (also with the prepare stage counted as computing), each job's start-up and the timeline (trials
computing every 15 s), and the trials' time outside their computing parts (summary.json: report_s, the
time spent handing epochs to Ray Train, which takes one report per poll, and what no part explains)
(job start-up: from the trainer's fit's start to its first trial's start: Ray
Train's worker group, placement, imports, loading the prepared data). Only the attempts of the
latest invocation (`poxm run` or `poxm resume`) count, as in sweep_summary.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


TIMELINE_STEP = 15     # seconds between the timeline's counts of computing trials


def busy_seconds(spans) -> float:
    """Length of the union of the intervals [a, b]."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def share(run_dir: str | Path) -> dict:
    rd = Path(run_dir)
    summ = json.loads((rd / "results" / "sweep_summary.json").read_text())
    wall, t1 = float(summ["wall_s"]), float(summ["finished_at"])
    t0 = t1 - wall
    sweep = json.loads((rd / "sweep.json").read_text())
    trials = sweep["trials"]
    # each trial's dataset, from the grid (a sweep.json without one: no per-dataset figures)
    dataset_of = {g["trial"]: g["dataset"] for g in sweep.get("grid") or [] if "trial" in g and "dataset" in g}
    by_dataset: dict[str, list[float]] = {}
    spans, compute, jobs, points_waits = [], 0.0, {}, []
    waits = {"report_s": [], "unexplained_s": []}
    for t in trials:
        f = rd / "trials" / t / "timing.json"
        if not f.is_file():
            continue
        attempts = json.loads(f.read_text()).get("attempts", [])
        if any(a["end"] >= t0 - 1 for a in attempts):      # the trial ran in this invocation
            _trial_waits(rd / "trials" / t / "summary.json", waits)
        for a in attempts:
            if a["end"] < t0 - 1:          # an earlier invocation's attempt
                continue
            spans.append((max(a["start"], t0), min(a["end"], t1)))
            compute += float(a["run_trial_s"])
            if "points_wait_s" in a:        # waiting for its MLflow runs, created beside the trials
                points_waits.append(float(a["points_wait_s"]))
            if t in dataset_of:
                by_dataset.setdefault(dataset_of[t], []).append(float(a["run_trial_s"]))
            job = a.get("job", t)
            if "job_start" in a:
                j = jobs.setdefault((job, a["job_start"]), {"trials": 0, "first_start": a["start"]})
                j["trials"] += 1
                j["first_start"] = min(j["first_start"], a["start"])
                if "worker_start" in a:
                    j["worker_start"], j["worker_ready"] = a["worker_start"], a["worker_ready"]
                if a["start"] <= j["first_start"]:
                    j["prepare_wait"] = float(a.get("prepare_wait_s", 0.0))
    busy = busy_seconds(spans)
    # the prepare stage (logging models, simulated logs) counted as computation rather than
    # orchestration: its span joins the trials' (it ran before them, or beside them when it overlapped)
    prepare = float(summ.get("prepare_s", 0.0))
    span = summ.get("prepare_span")
    busy_prep = (busy_seconds(spans + [(max(span[0], t0), min(span[1], t1))]) if span
                 else min(wall, busy + prepare))
    startup = sorted(round(j["first_start"] - js, 1) for (_, js), j in jobs.items())
    # the start-up split: Ray Train (fit start -> worker function), the worker's torch + CUDA, its
    # first trial waiting for the prepare stage (when the trials ran beside it), then loading it
    parts = [(j["worker_start"] - js, j["worker_ready"] - j["worker_start"], j.get("prepare_wait", 0.0),
              j["first_start"] - j["worker_ready"] - j.get("prepare_wait", 0.0))
             for (_, js), j in jobs.items() if "worker_start" in j]
    # the timeline, in seconds from the invocation's start: when the first job started, when a trial first
    # computed, when the last one ended, and how many computed at each multiple of TIMELINE_STEP
    rel = [(a - t0, b - t0) for a, b in spans]
    timeline = {"first_job_start_s": round(min(js for (_, js) in jobs) - t0, 1) if jobs else None,
                "first_compute_s": round(min(a for a, _ in rel), 1) if rel else None,
                "last_end_s": round(max(b for _, b in rel), 1) if rel else None,
                "after_last_end_s": round(wall - max(b for _, b in rel), 1) if rel else None,
                "running": [sum(1 for a, b in rel if a <= t < b) for t in range(0, int(wall) + 1, TIMELINE_STEP)]}
    return {"run_dir": str(rd), "trials": len(trials), "trials_run": len(spans), "jobs": len(jobs) or None,
            "prepare_tasks": prepare_tasks(summ.get("prepare_tasks"), t0),
            "wall_s": round(wall, 1), "trial_compute_s": round(compute, 1), "busy_s": round(busy, 1),
            "orchestration_share": round(1 - busy / wall, 4) if wall > 0 else None,
            "prepare_s": round(prepare, 1),
            "share_prepare_as_compute": round(1 - busy_prep / wall, 4) if wall > 0 else None,
            "prepare_overlapped": summ.get("prepare_overlapped"),
            "job_startup_s": startup, "max_concurrent_trials": summ.get("max_concurrent_trials"),
            "job_startup_parts_median_s": ({k: round(sorted(p[i] for p in parts)[len(parts) // 2], 1) for i, k in
                                            enumerate(("ray_train", "worker_torch_cuda", "prepare_wait", "first_trial_load"))}
                                           if parts else None),
            "timeline": timeline,
            "points_wait_s": ({"median": round(statistics.median(points_waits), 2), "max": round(max(points_waits), 2),
                               "trials": len(points_waits)} if points_waits else None),
            "median_trial_s_by_dataset": {d: round(statistics.median(v), 1) for d, v in sorted(by_dataset.items())},
            "trial_time_outside_parts_s": {k: {"total": round(sum(v), 1), "median": round(statistics.median(v), 2), "trials": len(v)}
                                           for k, v in waits.items() if v}}


def prepare_tasks(tasks, t0: float) -> dict | None:
    """The prepare tasks' timeline (sweep_summary.json 'prepare_tasks', recorded since it exists), in
    seconds from the invocation's start: when the first and the last ended, and per task (medians) when
    it started, its imports, its computation and each cache level's part of it."""
    tasks = [t for t in tasks or [] if "start" in t]
    if not tasks:
        return None
    med = lambda xs: round(statistics.median(xs), 1)    # noqa: E731
    levels = sorted({k for t in tasks for k in t.get("levels", {})})
    return {"tasks": len(tasks), "first_end_s": round(min(t["end"] for t in tasks) - t0, 1),
            "last_end_s": round(max(t["end"] for t in tasks) - t0, 1),
            "median_start_s": med([t["start"] - t0 for t in tasks]),
            "median_imports_s": med([t["imported"] - t["start"] for t in tasks]),
            "median_compute_s": med([t["seconds"] for t in tasks]),
            "median_levels_s": {k: med([t["levels"].get(k, 0.0) for t in tasks]) for k in levels}}


PARTS = ("setup_s", "train_s", "eval_s", "checkpoint_s", "cross_fit_s")


def _trial_waits(summary_path: Path, waits: dict) -> None:
    """A trial's time outside its computing parts (summary.json, its last attempt): report_s, the time
    spent handing epochs to Ray Train (recorded since it exists), and what no part explains."""
    if not summary_path.is_file():
        return
    s = json.loads(summary_path.read_text())
    timing = s.get("timing", {})
    if "report_s" in timing:
        waits["report_s"].append(float(timing["report_s"]))
    if "seconds" in s:
        waits["unexplained_s"].append(float(s["seconds"]) - sum(float(timing.get(k, 0.0)) for k in PARTS)
                                      - float(timing.get("report_s", 0.0)))



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dirs", nargs="+", help="run directories of finished sweeps")
    ap.add_argument("--json", action="store_true", help="one JSON object per run directory")
    a = ap.parse_args(argv)
    for d in a.run_dirs:
        try:
            r = share(d)
        except (OSError, KeyError, json.JSONDecodeError) as exc:
            print(f"orchestration_share: error: {d}: not a finished sweep's run directory ({exc})", file=sys.stderr)
            return 2
        if a.json:
            print(json.dumps(r))
            continue
        st = r["job_startup_s"]
        print(f"{r['run_dir']}\n  {r['trials_run']} trial(s) in {r['jobs'] or '?'} job(s), up to "
              f"{r['max_concurrent_trials']} at once; wall {r['wall_s']} s, trial compute {r['trial_compute_s']} s, "
              f"busy {r['busy_s']} s\n  orchestration share (no trial computing) {100 * r['orchestration_share']:.1f} %; "
              f"with the prepare stage ({r['prepare_s']} s) counted as computing {100 * r['share_prepare_as_compute']:.1f} %"
              + (f"\n  job start-up (fit start -> first trial) s: min {st[0]}, median {st[len(st) // 2]}, max {st[-1]}"
                 if st else "")
              + (f"\n  of which (medians) Ray Train (under resources.executor tune: the Tune process's imports) "
                 f"{r['job_startup_parts_median_s']['ray_train']} s, the worker's torch "
                 f"and CUDA {r['job_startup_parts_median_s']['worker_torch_cuda']} s, waiting for the prepare stage "
                 f"{r['job_startup_parts_median_s']['prepare_wait']} s, loading until the first trial computes "
                 f"{r['job_startup_parts_median_s']['first_trial_load']} s" if r["job_startup_parts_median_s"] else "")
              + (f"\n  first job started at {r['timeline']['first_job_start_s']} s, first trial computed at "
                 f"{r['timeline']['first_compute_s']} s, last trial ended at {r['timeline']['last_end_s']} s "
                 f"({r['timeline']['after_last_end_s']} s before the end)"
                 f"\n  trials computing every {TIMELINE_STEP} s: {' '.join(map(str, r['timeline']['running']))}")
              + (f"\n  prepare: {r['prepare_tasks']['tasks']} task(s), the first ended at {r['prepare_tasks']['first_end_s']} s, "
                 f"the last at {r['prepare_tasks']['last_end_s']} s; a task (medians) started at "
                 f"{r['prepare_tasks']['median_start_s']} s, imported for {r['prepare_tasks']['median_imports_s']} s, "
                 f"computed for {r['prepare_tasks']['median_compute_s']} s ("
                 + ", ".join(f"{k} {v}" for k, v in r["prepare_tasks"]["median_levels_s"].items()) + ")"
                 if r["prepare_tasks"] else "")
              + (f"\n  trials waiting for their MLflow runs: median {r['points_wait_s']['median']} s, max "
                 f"{r['points_wait_s']['max']} s ({r['points_wait_s']['trials']} trials)" if r["points_wait_s"] else "")
              + ("\n  median trial s by dataset: " + ", ".join(f"{d} {v}" for d, v in r["median_trial_s_by_dataset"].items())
                 if r["median_trial_s_by_dataset"] else "")
              + "".join(f"\n  trial time in {k[:-2]} (outside setup, training, evaluation, checkpoints): total {v['total']} s, "
                        f"median {v['median']} s a trial ({v['trials']} trials)"
                        for k, v in r["trial_time_outside_parts_s"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
