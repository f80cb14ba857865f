"""A trial's result files and its attempts' records (split from trial.py, which runs the trial).

`TrialFiles`: state.json, timing.json, done.json, rows.csv, summary.json in the run directory or in
storage; `record_attempt` appends an attempt to timing.json, `write_done` ends the trial (done.json,
written last); `fetch_trial` brings a trial's files from storage into the run directory (the driver).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from orchestration.rundir import read_json, set_trial_state, write_json
from orchestration.stages.handoff import WorkerJob


class TrialFiles:
    """A trial's result files (state.json, timing.json, done.json, rows.csv, summary.json): in the run
    directory (`root` = run_root/trials/<name>), or in storage (orchestration.cluster.storage) under
    trials/<name>/ when the nodes share no filesystem."""

    def __init__(self, name: str, run_root: str | None, storage_uri: str | None):
        from orchestration.cluster.storage import Storage
        self.name = name
        self.store = Storage(storage_uri) if storage_uri else None
        self.root = None if self.store else Path(run_root) / "trials" / name

    def read_json(self, f: str, default=None):
        return read_json(self.root / f, default) if self.store is None else self.store.read_json(f"trials/{self.name}/{f}", default)

    def write_json(self, f: str, obj) -> None:
        if self.store is None:
            write_json(self.root / f, obj)
        else:
            self.store.write_json(f"trials/{self.name}/{f}", obj)

    def set_state(self, state: str, **extra) -> None:
        if self.store is None:
            set_trial_state(self.root, state, **extra)
        else:
            self.write_json("state.json", {**(self.read_json("state.json", {}) or {}), **extra, "state": state,
                                           "updated": time.time()})

    def work_dir(self, sweep_id: str) -> Path:
        """Where run_trial writes (rows.csv, summary.json, checkpoints/): the trial directory, or this
        node's own folder in storage mode."""
        from orchestration.cluster.storage import node_dir
        d = self.root if self.store is None else node_dir() / "trials" / sweep_id / self.name
        d.mkdir(parents=True, exist_ok=True)
        return d

    def publish(self, work_dir: Path) -> None:
        """Storage mode: the trial's result files (not its checkpoints: Ray stores those) to storage."""
        if self.store is not None:
            self.store.put_files(work_dir, f"trials/{self.name}", skip=("done.json", "state.json", "timing.json"))


def trainer_timing(out_dir: Path) -> dict | None:
    """The parts of the trial's compute the trainer timed (summary.json's 'timing'), or None."""
    import json
    try:
        return dict(json.loads((Path(out_dir) / "summary.json").read_text())["timing"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record_attempt(files: TrialFiles, job: WorkerJob, seconds: dict, start: float, resumed: str | None,
                   starts: dict | None) -> dict:
    """This attempt appended to the trial's timing.json (written), which it returns."""
    import ray

    timing = files.read_json("timing.json", {"attempts": []})
    timing["attempts"].append({**{k: round(v, 3) for k, v in seconds.items()},
                               "start": round(start, 3), "end": round(time.time(), 3),
                               "resumed_from": resumed, "node": os.uname().nodename, "job": job.name,
                               "job_start": round(job.fit_start, 3),   # the job's trainer.fit began
                               # its worker function began (after Ray Train's start-up) and had torch and CUDA
                               **(starts or {}),
                               "ray_node_id": ray.get_runtime_context().get_node_id(),
                               # which cards Ray gave this trial (scripts/device.sh multi-gpu checks the spread)
                               "gpu_ids": [str(g) for g in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])],
                               "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")})
    files.write_json("timing.json", timing)
    return timing


def write_done(files: TrialFiles, job: WorkerJob, df, timing: dict, tries: int) -> None:
    """done.json: the trial is finished (written last: a trial with it is not run again)."""
    summary = files.read_json("summary.json", {}) or {}
    # fit_s: from the start of the job's trainer.fit to this trial's end (in a pack, earlier trials included)
    files.write_json("done.json", {"finished": time.time(), "epoch": summary.get("epochs", int(df["epoch"].max()) if len(df) else 0),
                                   "fit_s": round(time.time() - job.fit_start, 3), "job": job.name,
                                   "run_trial_s": round(sum(a["run_trial_s"] for a in timing["attempts"]), 3),
                                   "attempts": len(timing["attempts"]), "tries": tries})


def fetch_trial(rd_root: Path, name: str, storage) -> None:
    """Storage mode, in the driver: the trial's files from storage into run_dir/trials/<name>/
    (done.json last, so a trial is done in the run directory only once its rows are there)."""
    if storage is not None:
        storage.get_files(f"trials/{name}", Path(rd_root) / "trials" / name, last=("done.json",))


def trial_dirname(trial) -> str:
    """Tune's trial directory: the stable trial name (not the long default of every parameter)."""
    return str(trial.config["trial"]["name"])


def done_trials(run_root: Path, names) -> set[str]:
    return {n for n in names if (Path(run_root) / "trials" / n / "done.json").is_file()}
