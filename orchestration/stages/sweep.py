"""A sweep, stage by stage (docs/orchestration.md): `execute` is the list of its stages, each one a
function here over the module that does its work:

  plan      plan_sweep             orchestration.stages.plan         config -> run dir <runs_dir>/<name>-<hash>, trials,
                                                                     grid points (before execute; lock_run_dir: the lock)
  track     open_tracking          orchestration.stages.track        MLflow store + experiment + parent run, created once
                                                                     in the driver
  ray       start_ray              orchestration.cluster.ray_setup   connect or start Ray; how many trials fit at once
  prepare   trials_beside_prepare  orchestration.stages.prepare      poxm_core.prepare.pipeline per (dataset, seed) as Ray
            trials_after_prepare                                     tasks (content-addressed cache); when it cannot
                                                                     deadlock, the trials start meanwhile and each waits
                                                                     for its data
  points    (the same two)         orchestration.stages.track        one MLflow run per grid point
  trials    (the same two)         orchestration.stages.tune         Ray Tune over the trials; each one a Ray Train job
                                                                     (orchestration.stages.trial)
  gather    report_stage           orchestration.stages.gather       results/rows.csv, prepare.csv, selection.csv, report/,
                                                                     sweep_summary.json
  close     close_runs             orchestration.stages.track        every MLflow run ended, the parent with the summary
                                                                     and artifacts

Whatever the stages started (MPS, Ray, the prepare stage's thread, MLflow runs, the driver lock) is
ended by orchestration.stages.teardown, however the sweep ends.

`run_sweep` starts or continues the sweep of a config; `resume_sweep` continues the one in a run
directory (Tuner.restore: unfinished and errored trials run again, finished ones are kept), or
extends it with new seeds (`poxm resume RUN_DIR --add-seeds`, orchestration.stages.merge).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from orchestration.tracking import runs as tracking
from orchestration.stages.gather import gather_instances, gather_prepare, gather_rows, select_and_report, sweep_summary
from orchestration.stages.plan import SweepPlan, plan_from_run_dir, plan_sweep, write_plan
from orchestration.cluster.ray_setup import quiet_libraries
from orchestration.rundir import acquire_driver, read_json, remove_tmp_leftovers
from orchestration.stages.teardown import Teardown
from poxm_core.config.schema import SweepConfig

__all__ = ["SweepOutcome", "execute", "plan_from_run_dir", "plan_sweep", "report_only", "resume_sweep", "run_sweep"]


@dataclass
class SweepOutcome:
    run_dir: Path
    n_trials: int
    done: list[str]
    errored: list[str]
    summary: dict
    report: Path | None

    @property
    def ok(self) -> bool:
        return not self.errored and len(self.done) == self.n_trials


def execute(plan: SweepPlan, *, address: str | None = None, mlflow_uri: str | None = None,
            progress: bool = True, verbose: bool = False, on_end=None) -> SweepOutcome:
    """Run (or continue) every stage of a planned sweep; see the module docstring. What a stage starts
    is recorded in `started` (teardown.py), which ends it however the sweep ends. `on_end(outcome)`: called
    once the sweep's results are complete, before that end (the command line prints the results there:
    Ray's shutdown takes seconds, which they do not wait for)."""
    # this import brings Ray Tune: Ray has always been imported before quiet_libraries sets its environment
    from orchestration.stages.prepare import PrepareRun

    t_start, marks = time.perf_counter(), {"process_start": process_start(), "execute_start": round(time.time(), 3)}
    say = printer(progress)
    if not verbose:
        quiet_libraries()           # before MLflow's store is opened and Ray starts
    lock_run_dir(plan)
    started = Teardown(plan)
    try:
        write_plan(plan)
        remove_tmp_leftovers(plan.rd)        # a killed run's half-written files: nothing writes them now
        say(f"poxm: sweep {plan.rd.root.name}: {len(plan.specs)} trial(s), {len(plan.grid())} grid point(s)")
        say(f"  run dir  {plan.rd.root}")
        track = open_tracking(plan, mlflow_uri, started, say)
        ray_s, max_conc = start_ray(plan, address, verbose, started, say)
        marks["ray_ready"] = round(time.time(), 3)
        started.prep = prep = PrepareRun(plan, say)
        # every trial done while Ray winds down: gather, select and report meanwhile (local run dirs:
        # in storage mode the trials' files reach the run directory through callbacks, then the end)
        early = EarlyReport(plan, prep, progress_say(progress)) if plan.storage is None else None
        trials = trials_beside_prepare if prep.overlapped else trials_after_prepare
        done, errored, before, tune_s = trials(plan, prep, track, max_conc, early, started, progress, say)
        marks.update(trials_start=round(time.time() - tune_s, 3), trials_end=round(time.time(), 3))
        prepare_s = prep.seconds

        t2 = time.perf_counter()
        prepared, prepare_compute, rows, report, report_s = report_stage(plan, prep, early, say)
        marks["report_end"] = round(time.time(), 3)
        wall = time.perf_counter() - t_start
        summary = sweep_summary(plan.rd, len(plan.specs), len(plan.grid()), done, errored, before,
                                {"wall": wall, "ray_init": ray_s, "prepare": prepare_s, "prepare_compute": prepare_compute,
                                 "tune": tune_s, "gather_select_report": report_s,
                                 "after_trials": time.perf_counter() - t2}, max_conc,
                                {**prepare_facts(prep), "timeline": marks})
        close_runs(plan, started, done, errored, summary, report)
        say(f"poxm: {len(done)}/{len(plan.specs)} trials done, {len(errored)} errored; wall {wall:.1f} s, trial "
            f"compute {summary['trial_compute_s']:.1f} s ({100 * summary['share_outside_trial_compute']:.0f}% "
            "of the wall time had no trial computing)")
        outcome = SweepOutcome(plan.rd.root, len(plan.specs), done, errored, summary, report)
        if on_end is not None:
            on_end(outcome)
        return outcome
    finally:
        started.end()


def process_start() -> float | None:
    """When this process started (wall-clock seconds, from /proc), or None where /proc is not there: the
    sweep's timeline begins before `execute` (the interpreter's start, the command's imports and plan)."""
    try:
        stat = Path(f"/proc/{os.getpid()}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime"))
        return round(boot + ticks / os.sysconf("SC_CLK_TCK"), 3)
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def printer(progress: bool):
    """The driver's own lines (the stages' headers, the closing line): printed, or none without progress."""
    return (lambda msg: print(msg, flush=True)) if progress else (lambda msg: None)


def lock_run_dir(plan: SweepPlan) -> None:
    """The checks that come before anything is written or loaded, then the run directory's driver lock."""
    from orchestration.cluster.mps import check_mps_config
    from orchestration.cluster.ray_state import refuse_ray_state_inside
    refuse_ray_state_inside(plan.rd)     # before anything is written or loaded
    check_mps_config(plan.cfg.device, bool(plan.cfg.resources.mps))
    plan.rd.root.mkdir(parents=True, exist_ok=True)
    # the lock first: a second driver refused here must not have rewritten the running sweep's files
    acquire_driver(plan.rd)


def open_tracking(plan: SweepPlan, mlflow_uri: str | None, started: Teardown, say) -> tuple | None:
    """track: the MLflow store, experiment and parent run, as (uri, experiment id, parent run id, tags);
    None with MLflow off."""
    from orchestration.stages.track import stage_track
    if not plan.cfg.mlflow.enabled:
        say("  mlflow   off (mlflow.enabled=false)")
        return None
    fresh = not plan.rd.mlflow_db.exists()
    try:
        track = stage_track(plan, mlflow_uri)
    except BaseException:
        if fresh:        # a store this call began and could not finish (a full disk, a file-size limit): gone
            for f in (plan.rd.mlflow_db, *(plan.rd.mlflow_db.with_name(f"mlflow.db-{x}") for x in ("journal", "wal", "shm"))):
                f.unlink(missing_ok=True)
        raise
    started.parent = (track[0], track[2])
    from orchestration.tracking.store import safe_uri
    say(f"  mlflow   {safe_uri(track[0])}")      # a database URL keeps its login for the connection, never printed
    return track


def start_ray(plan: SweepPlan, address: str | None, verbose: bool, started: Teardown, say) -> tuple[float, int]:
    """ray: MPS when asked for (before a local Ray), Ray connected or started, how many trials fit at
    once; (seconds Ray took, that number)."""
    import ray

    from orchestration.cluster.mps import mps_for_sweep
    from orchestration.cluster.ray_setup import bytecode_hint, check_resources, ray_init, start_train_coordinator
    local = not (address or os.environ.get("RAY_ADDRESS"))
    started.services.enter_context(mps_for_sweep(plan.cfg.device, bool(plan.cfg.resources.mps), local, say))
    t_ray = time.perf_counter()
    started.ray_started = ray_init(address, verbose)
    from orchestration.stages.ray_session import executor_of
    if executor_of(plan.cfg.resources) == "train":     # the actor Ray Train's jobs ask first; Tune's trials never do
        start_train_coordinator()
    max_conc = check_resources(plan.cfg, local=local)
    ray_s = time.perf_counter() - t_ray
    res = ray.cluster_resources()
    say(f"  ray      {res.get('CPU', 0):g} CPU, {res.get('GPU', 0):g} GPU; up to {max_conc} trial(s) at once")
    if local and (hint := bytecode_hint()) is not None:
        say(f"  note     {hint}")
    return ray_s, max_conc


def trials_beside_prepare(plan: SweepPlan, prep, track: tuple | None, max_conc: int, early, started: Teardown,
                          progress: bool, say) -> tuple:
    """prepare, points and trials at once: the trials start now; each job's worker waits for its own
    variant, and for its own MLflow runs, created meanwhile (PointsStage: the first jobs' first). The
    points' data checksums are tagged once the prepare stage is over (ensure_points adds them).
    (done, errored, done before, Tune's seconds), as run_trials returns them."""
    from orchestration.stages.track import PointsStage
    from orchestration.stages.tune import run_trials, sweep_inputs, trial_launch_order
    say(f"  prepare  {len(prep.keys)} task(s); the trials start meanwhile")
    prep.say = progress_say(progress)
    if track is not None:
        started.points = PointsStage(plan, *track, trial_launch_order(plan, max_conc))
    points = started.points
    prep.watch(on_done=None if points is None else points.tag_checksums)
    inputs = sweep_inputs(plan, prep.refs, None, None if points is None else (track[0], str(plan.rd.mlflow_runs)))
    try:
        out = run_trials(plan, inputs, max_conc, progress, say, stop=prep.stopper(),
                         on_all_done=early.start if early is not None else None)
    finally:
        # Tune stopped every job: start afresh on `poxm resume`
        if prep.failed() is not None or (points is not None and points.failed() is not None):
            forget_tune_state(plan)
    if points is not None:
        started.runs = points.result()
    return out


def trials_after_prepare(plan: SweepPlan, prep, track: tuple | None, max_conc: int, early, started: Teardown,
                         progress: bool, say) -> tuple:
    """prepare, then the points (their data checksums known), then the trials; as trials_beside_prepare."""
    from orchestration.stages.track import stage_points
    from orchestration.stages.tune import run_trials, sweep_inputs
    prepared, _ = prep.wait_all()
    gather_prepare(plan.rd, prepared)
    if track is not None:
        started.runs = stage_points(plan, *track, prepared)
    inputs = sweep_inputs(plan, prepared, started.runs)
    return run_trials(plan, inputs, max_conc, progress, say, on_all_done=early.start if early is not None else None)


def report_stage(plan: SweepPlan, prep, early, say) -> tuple:
    """gather, selection and report: as built beside Ray's wind-down (EarlyReport), or now."""
    built = early.result() if early is not None else None
    if built is None:       # not every trial was done, or none ran now: as always, after the trials
        built = gather_select_report(plan, prep, say)
    return built


def prepare_facts(prep) -> dict:
    """The prepare stage in sweep_summary.json: beside the trials or not, its span, its tasks."""
    return {"prepare_overlapped": prep.overlapped,
            "prepare_span": [round(prep.started_at, 3), round(prep.ended_at or prep.started_at, 3)],
            "prepare_tasks": prep.tasks}


def close_runs(plan: SweepPlan, started: Teardown, done: list, errored: list, summary: dict,
               report: Path | None) -> None:
    """close: every MLflow run ended, the parent with the summary and artifacts (nothing with MLflow off)."""
    from orchestration.stages.track import close_tracking
    if started.runs is not None:
        close_tracking(plan, started.runs, done, errored, summary, report)
        started.tracking_closed()


def gather_select_report(plan: SweepPlan, prep, say) -> tuple:
    """The prepare stage's statistics, every finished trial's rows, selection and the report:
    (prepared, prepare compute seconds, rows, report dir or None, seconds)."""
    from orchestration.stages.tune import wait_prestarted
    t = time.perf_counter()
    wait_prestarted(plan.rd.root)      # the drawing processes the trials' end began to start: the report takes them
    prepared, compute = prep.result()
    gather_prepare(plan.rd, prepared)
    rows = gather_rows(plan.rd, plan.names)
    gather_instances(plan.rd, plan.names)
    report = select_and_report(plan.rd, plan.cfg.selection.criterion, rows, say)
    return prepared, compute, rows, report, time.perf_counter() - t


class EarlyReport:
    """gather_select_report on a thread, started (`start`, once) when every trial is done, while Ray Tune
    and Ray Train wind down (their polls, the jobs' shut-down: seconds of a GPU sweep's tail, docs/performance.md).
    `result()` waits for it: its outcome, or None when it never started; its error is raised there."""

    def __init__(self, plan: SweepPlan, prep, say):
        self.plan, self.prep, self.say = plan, prep, say
        self._lock = threading.Lock()
        self._thread = None
        self._out = self._exc = None

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="poxm-report", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        try:
            self._out = gather_select_report(self.plan, self.prep, self.say)
        except BaseException as exc:      # noqa: BLE001 -- raised again by result() in the main thread
            self._exc = exc

    def result(self):
        with self._lock:
            thread = self._thread
        if thread is None:
            return None
        thread.join()
        if self._exc is not None:
            raise self._exc
        return self._out


def progress_say(progress: bool):
    """Printing from the prepare stage's thread while the trials' progress bar may be drawn: through
    tqdm, which clears and redraws the bar around the line."""
    if not progress:
        return lambda msg: None
    from tqdm import tqdm
    return lambda msg: tqdm.write(msg)


def forget_tune_state(plan: SweepPlan) -> None:
    """Tune's state of a run that PrepareFailed stopped (every job would count as finished): gone, so
    that `poxm resume` fits a fresh Tuner (finished trials are skipped by their done.json)."""
    import shutil

    from orchestration.stages.tune import TUNE_NAME, ray_storage
    path = Path(ray_storage(plan)) / TUNE_NAME
    if plan.storage is None and path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def report_only(plan: SweepPlan, log_mlflow: bool = True) -> Path | None:
    """`poxm report`: gather the finished trials' rows, select, rebuild report/ (no Ray); log it on
    the sweep's MLflow parent run when there is one."""
    rd = plan.rd
    if not rd.prepare_csv.is_file():
        from poxm_core.prepare.pipeline import prepare
        from poxm_core.prepare.cache import variant_record
        prepared = {(d.name, s): {k: variant_record(plan.cache_dir, v)
                                  for k, v in prepare(plan.cfg, d.name, s, plan.cache_dir, progress=False).items()}
                    for d in plan.cfg.datasets for s in plan.cfg.seeds}
        gather_prepare(rd, prepared)
    rows = gather_rows(rd, plan.names)
    gather_instances(rd, plan.names)
    report = select_and_report(rd, plan.cfg.selection.criterion, rows, print)
    ml = read_json(rd.mlflow_runs, None)
    if log_mlflow and report is not None and ml:
        c = tracking.client(tracking.stored_uri(rd.root, ml))
        c.log_artifacts(ml["parent_run_id"], str(report), "report")
        c.log_artifacts(ml["parent_run_id"], str(rd.results), "results")
        from orchestration.stages.track import headline_note, summary_tables
        tracking.log_tables(c, ml["parent_run_id"], summary_tables(rd.root, report))
        tracking.set_note(c, ml["parent_run_id"], headline_note(rd.root, report))
    return report


def run_sweep(cfg: SweepConfig, *, runs_dir=None, cache_dir=None, address=None, mlflow_uri=None,
              progress: bool = True, verbose: bool = False, on_end=None) -> SweepOutcome:
    return execute(plan_sweep(cfg, runs_dir, cache_dir), address=address, mlflow_uri=mlflow_uri,
                   progress=progress, verbose=verbose, on_end=on_end)


def resume_sweep(run_dir, *, address=None, mlflow_uri=None, progress: bool = True, verbose: bool = False,
                 add_seeds: list[int] | None = None, on_end=None) -> SweepOutcome:
    """Continue the sweep in `run_dir`; with `add_seeds`, extended in place with those seeds first
    (orchestration.stages.merge.extend_plan: the new seeds prepared, the old ones found in the cache; trials
    and MLflow runs added for the new seeds; then selection and report over every seed)."""
    if add_seeds:
        from orchestration.stages.merge import extend_plan
        plan = extend_plan(run_dir, add_seeds)
    else:
        plan = plan_from_run_dir(run_dir)
    if mlflow_uri is None:   # keep logging where the sweep started
        mlflow_uri = tracking.stored_uri(plan.rd.root, read_json(plan.rd.mlflow_runs, {}))
    return execute(plan, address=address, mlflow_uri=mlflow_uri, progress=progress, verbose=verbose, on_end=on_end)
