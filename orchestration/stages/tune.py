"""The trials stage of a sweep: a Ray Tune `Tuner` over jobs, each one a Ray Train job that runs one
trial or a pack of them one after another (orchestration.stages.trial); a restored Tuner continues
unfinished and errored jobs (their finished trials are skipped).
"""
from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from ray.tune import Callback

from orchestration.stages.handoff import PreparedAt, SweepInputs, variant_at
from orchestration.stages.plan import SweepPlan
from orchestration.stages.ray_session import executor_of

DRIVER_MEMORY = 64 * 1024 ** 2   # the Tune driver actor of a trial asks for memory only, no CPU (see trial_resources)
TUNE_NAME = "tune"


def ray_storage(plan: SweepPlan) -> str:
    """Ray Tune's and Ray Train's storage_path: this user's state folder for the run (outside the run
    directory: orchestration.cluster.ray_state), or ray/ under resources.storage_path."""
    from orchestration.cluster.ray_state import ray_state_dir
    return plan.storage.ray if plan.storage is not None else str(ray_state_dir(plan.rd))


class StorageSync(Callback):
    """Storage mode, in the driver: the run directory follows the trials that run elsewhere:
    state.json from each reported epoch (for `poxm status`), the trial's files when it ends."""

    def __init__(self, plan: SweepPlan):
        self.plan = plan

    def on_trial_result(self, iteration, trials, trial, result, **info):
        from orchestration.rundir import set_trial_state
        from orchestration.stages.trial import fetch_trial
        name = member_of(trial.config, result)
        if result.get("member_finished"):
            fetch_trial(self.plan.rd.root, name, self.plan.storage)
        elif "epoch" in result and not result.get("finished"):
            set_trial_state(self.plan.rd.trial(name), "running", epoch=int(result["epoch"]),
                            epochs=self.plan.cfg.training.epochs)

    def on_trial_complete(self, iteration, trials, trial, **info):
        from orchestration.stages.trial import fetch_trial
        for name in members(trial.config):
            fetch_trial(self.plan.rd.root, name, self.plan.storage)

    on_trial_error = on_trial_complete


_ALL_DONE: dict[str, object] = {}    # run dir -> what to call once every trial is done (run_trials sets it)


_PRESTARTING: dict[str, threading.Thread] = {}   # run dir -> the thread preparing the report (prepare_report)


def prepare_report() -> None:
    """While the last trials run: the report's drawing processes started (figure_pool.prestart) and its
    modules imported in this process (pandas' and SciPy's statistics, the tables and figures: seconds that
    the report built after the last trial no longer waits for)."""
    try:
        from orchestration.report.figure_pool import prestart
        prestart()
        import orchestration.report.build  # noqa: F401
    except Exception:       # noqa: BLE001 -- the report, built later, says what is wrong in its own words
        pass


def wait_prestarted(root) -> None:
    """Before the report: what ReportEarly began to prepare for it (prepare_report) is done, or failed."""
    thread = _PRESTARTING.pop(str(root), None)
    if thread is not None:
        thread.join()


class ReportEarly(Callback):
    """The report's preparations while the trials run. When the sweep's first trial finishes, the
    report's drawing processes start and its modules are imported (prepare_report), on a thread of their
    own, so they are ready when the last trial ends. When every trial of the plan is done (done.json),
    the hook `run_trials` was given is called once: the sweep then gathers and reports while Ray Tune
    and Ray Train wind down (orchestration.stages.sweep). Tune pickles its callbacks with the experiment (a
    restored Tuner uses those), so this holds only names; the hook is looked up by run directory in
    this process.

    Tune's event loop waits for this on every result, so a result costs the same however large the run:
    the trials' done.json files are read once at the first finished trial, then each `member_finished`
    adds its trial, and the files are read once more to confirm the last (a job that found its trials
    done already, `skipped`, reads them again). Starting 8 drawing processes took 0.3 s of the loop."""

    def __init__(self, root, names):
        self.root, self.names = str(root), list(names)
        self.started = self.all_done = False
        self.done: set[str] | None = None       # the trials known to be done (read once, then counted)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if not (result.get("member_finished") or result.get("skipped")):
            return
        if not self.started:
            self.started = True
            _PRESTARTING[self.root] = thread = threading.Thread(target=prepare_report, name="poxm-report-prepare",
                                                                daemon=True)
            thread.start()
        hook = _ALL_DONE.get(self.root)
        if hook is None or self.all_done:
            return
        from orchestration.stages.trial import done_trials
        if self.done is None or result.get("skipped"):
            self.done = done_trials(Path(self.root), self.names)
        else:
            self.done.add(member_of(trial.config, result))
        if len(self.done) >= len(self.names) and len(done_trials(Path(self.root), self.names)) == len(self.names):
            self.all_done = True
            hook()


class NoRetryOnInputError(Callback):
    """A job whose trial met an input error (worker_loop reports `input_error`; drive_trial then raises)
    is not retried by Tune: the same input fails the same way (docs/orchestration.md, "Bad input"). Its
    trial's `max_failures` is 0 until it starts again (`poxm resume`, after the input was fixed)."""

    def __init__(self, max_failures: int):
        self.max_failures = int(max_failures)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        # out of GPU memory: not again at the same share (packing.py runs it again at a larger one)
        if result.get("input_error") or result.get("oom"):
            trial.max_failures = 0

    def on_trial_start(self, iteration, trials, trial, **info):
        trial.max_failures = self.max_failures


def members(config: dict) -> list[str]:
    """The trials of a Tune trial (a job): its config's 'members' (a pack), else the one trial."""
    t = config.get("trial", {})
    return list(t.get("members") or [t.get("name")])


def member_of(config: dict, result: dict) -> str:
    """The trial a job's result is about (its 'member' index; a job of one trial: that trial)."""
    names = members(config)
    i = result.get("member", 0)
    try:
        return names[int(i)]
    except (TypeError, ValueError, IndexError):
        return names[0]


def job_grid(plan: SweepPlan, max_concurrent: int, specs=None) -> list[dict]:
    """The Tune trials: one per job, each a pack of trials (resources.trials_per_job; auto: one trial a
    job under the 'tune' executor, else about 2 jobs per slot, 1 when the trials are alike). A job of one trial has that trial's name and keys, as without packing. `specs`:
    the trials to pack (default every trial of the plan; on resume, those not done)."""
    from orchestration.stages.plan import pack_name, pack_trials, trials_alike, trials_per_job

    specs = list(plan.specs if specs is None else specs)
    if not specs:
        return []
    res = plan.cfg.resources
    if executor_of(res) == "tune" and res.trials_per_job in (None, "auto"):
        # Tune reuses a slot's process for its next job (reuse_actors): a job of one trial costs no
        # start-up, and single trials fill the slots as they free up (packs of two left a long tail of
        # 2-4 busy slots: 24 trials on 8 slots of an H200)
        per_job = 1
    else:
        per_job = trials_per_job(res.trials_per_job, len(specs), max_concurrent, trials_alike(specs))
    grid = []
    for i, group in enumerate(pack_trials(specs, per_job)):
        s = group[0]
        grid.append({"name": pack_name(group, i), "dataset": s.dataset, "variant": s.variant, "seed": s.seed,
                     "methods": ",".join(s.methods), "heads": sum(len(g.heads) for g in group),
                     "members": [g.name for g in group], "member_heads": [len(g.heads) for g in group]})
    return grid


def trial_launch_order(plan: SweepPlan, max_concurrent: int) -> list[str]:
    """The trials in about the order the jobs need them: every job's first trial (jobs in Tune's
    order), then every job's second, ... (what PointsStage creates MLflow runs for first)."""
    jobs = job_grid(plan, max_concurrent)
    depth = max((len(j["members"]) for j in jobs), default=0)
    return [j["members"][i] for i in range(depth) for j in jobs if i < len(j["members"])]


def sweep_inputs(plan: SweepPlan, prepared: dict, runs, pending_runs: tuple[str, str] | None = None) -> SweepInputs:
    """What every job gets (tune.with_parameters; orchestration.stages.trial.drive_trial): the config as
    given, the trial specs, where each trial's prepared variant is, storage, resources, MLflow ids.
    `prepared`: {(dataset, seed): {variant: record}} once prepared, or {(dataset, seed): ObjectRef
    of its prepare task} while the stage runs beside the trials (the worker waits for it).
    `runs`: the sweep's MLflow runs (tracking.SweepRuns), or None; `pending_runs`: (tracking URI,
    mlflow_runs.json) while they are created beside the trials (each trial reads its own there)."""
    from orchestration.stages.handoff import PreparedRef
    from orchestration.cluster.ray_setup import state_api_available
    from orchestration.rundir import config_input
    from orchestration.stages.packing import oom_spec
    from orchestration.stages.trial import crash_spec

    cfg = plan.cfg
    at: dict = {}
    for s in plan.specs:
        p = prepared[(s.dataset, s.seed)]
        at[s.name] = (PreparedAt(str(p[s.variant]["dir"]), tuple(p[s.variant]["levels"])) if isinstance(p, dict)
                      else PreparedRef(p, s.variant, variant_at(cfg, s.dataset, s.seed, s.variant)))
    return SweepInputs(
        run_root=str(plan.rd.root), cache_dir=str(plan.cache_dir), config=config_input(cfg),
        storage=plan.storage.uri if plan.storage else None, ray_storage=ray_storage(plan),
        sweep_id=plan.rd.root.name, specs={s.name: s.to_dict() for s in plan.specs},
        prepared=at,
        resources=cfg.resources, crash=crash_spec(), oom=oom_spec(),
        mlflow_uri=runs.uri if runs is not None else (pending_runs[0] if pending_runs else None),
        mlflow_points=dict(runs.points) if runs is not None else None,
        mlflow_points_file=pending_runs[1] if runs is None and pending_runs else None,
        state_api=state_api_available())


def trial_resources(plan: SweepPlan, gpu: float | None = None) -> dict:
    """What a Tune trial asks Ray for. Executor 'train': the Tune trial only drives its Ray Train job, whose
    worker holds the CPUs and GPU; giving the driver a CPU would leave that CPU idle and can deadlock a small
    machine (driver CPU + worker CPUs > total), so it asks for a little memory instead. Executor 'tune': the
    trials run in the Tune trial's own process, which holds the trial's CPUs and GPU. `gpu`: the job's GPU
    share (packing.py: by memory as well as by count), default resources.gpus_per_trial."""
    res = plan.cfg.resources
    return job_resources(executor_of(res), res.cpus_per_trial, res.gpus_per_trial if gpu is None else gpu)


def job_resources(executor: str, cpus: float, gpu: float) -> dict:
    if executor == "tune":
        return {"CPU": cpus, **({"GPU": gpu} if gpu > 0 else {})}
    return {"memory": DRIVER_MEMORY}


def _job_bundle(executor: str, cpus: float, gpus_per_trial: float, config: dict):
    """Tune's resources of one job (with_resources' callable): its share from the grid ('gpu')."""
    from ray.tune import PlacementGroupFactory
    return PlacementGroupFactory([job_resources(executor, cpus, config["trial"].get("gpu", gpus_per_trial))])


def make_tuner(plan: SweepPlan, sweep: SweepInputs, max_concurrent: int, progress, restore: bool, stop=None,
               specs=None, name: str = TUNE_NAME, packing=None):
    """The Tuner over the plan's jobs (`specs`: only these trials, e.g. packing's out-of-memory pass under
    its own `name`); each job's GPU share from `packing` (orchestration.stages.packing)."""
    import functools

    import ray.tune

    from orchestration.stages.packing import Packing
    from orchestration.stages.trial import drive_trial, trial_dirname

    res = plan.cfg.resources
    bundle = functools.partial(_job_bundle, executor_of(res), res.cpus_per_trial, res.gpus_per_trial)
    trainable = ray.tune.with_resources(ray.tune.with_parameters(drive_trial, sweep=sweep), bundle)
    in_tune = executor_of(res) == "tune"
    storage = ray_storage(plan)
    path = f"{storage}/{name}"
    if restore and ray.tune.Tuner.can_restore(path):
        return ray.tune.Tuner.restore(path, trainable=trainable, resume_unfinished=True, resume_errored=True), True
    grid = (packing or Packing(plan)).annotate(job_grid(plan, max_concurrent, specs))
    return ray.tune.Tuner(
        trainable, param_space={"trial": ray.tune.grid_search(grid)},
        # executor 'tune': the next job of a slot runs in the process the last one used (imports, CUDA context)
        tune_config=ray.tune.TuneConfig(max_concurrent_trials=max_concurrent, trial_dirname_creator=trial_dirname,
                                        trial_name_creator=trial_dirname, reuse_actors=in_tune),
        run_config=ray.tune.RunConfig(name=name, storage_path=storage,
                                      # executor 'tune': Tune keeps the trials' checkpoints (Ray Train does otherwise)
                                      checkpoint_config=ray.tune.CheckpointConfig(num_to_keep=2) if in_tune else None,
                                      failure_config=ray.tune.FailureConfig(max_failures=res.max_failures),
                                      callbacks=tune_callbacks(plan, progress), stop=stop, verbose=0),
    ), False


def tune_callbacks(plan: SweepPlan, progress) -> list:
    """The Tuner's callbacks, each run on Tune's event loop at every result: the progress bar, the
    early report, the retry rule, storage mode's sync, and of Ray Tune's own loggers only the JSON one
    (fit reads each trial's result.json when it ends). Its CSV and TensorBoard loggers stay out
    (`json_logger_only` around fit): the TensorBoard writer alone cost 2.4 ms a result of the driver's
    keys and 0.27 s a result of 60 heads' metrics (docs/performance.md)."""
    from ray.tune.logger import JsonLoggerCallback
    return ([progress, ReportEarly(plan.rd.root, plan.names), NoRetryOnInputError(plan.cfg.resources.max_failures)]
            + ([StorageSync(plan)] if plan.storage else []) + [JsonLoggerCallback()])


LOGGERS_ENV = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"    # Ray Tune's switch: no logger callbacks added by fit


@contextlib.contextmanager
def json_logger_only(environ=None):
    """Within the block, Tuner.fit adds none of Ray Tune's logger callbacks itself (tune_callbacks names
    the JSON one). Restored on exit."""
    environ = os.environ if environ is None else environ
    before = environ.get(LOGGERS_ENV)
    environ[LOGGERS_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            environ.pop(LOGGERS_ENV, None)
        else:
            environ[LOGGERS_ENV] = before


def run_trials(plan: SweepPlan, sweep: SweepInputs, max_concurrent: int, progress: bool, say,
               stop=None, on_all_done=None) -> tuple[list, list, set, float]:
    """Fit (or continue) the Tuner; (done, errored, done before this call, seconds). `stop`: a
    Tune stopper (orchestration.stages.prepare.PrepareFailed while the prepare stage runs beside).
    `on_all_done()`: called once, in this process, when every trial of the plan is done (ReportEarly)."""
    import time

    from orchestration.stages.merge import tune_caught_up, tune_covers
    from orchestration.stages.progress import SweepProgress
    from orchestration.rundir import trial_state
    from orchestration.stages.trial import done_trials

    rd = plan.rd
    before = done_trials(rd.root, plan.names)
    prog = SweepProgress(len(plan.specs), len(before), enabled=progress, epochs=plan.cfg.training.epochs,
                         done_before=sorted(before))
    # seeds added since the Tune experiment was made: a fresh Tuner over every trial (orchestration.stages.merge)
    from orchestration.stages.packing import Packing, oom_passes
    packing = Packing(plan)
    if (line := packing.line()) is not None:
        say(f"  packing  {line}")
    tuner, restored = make_tuner(plan, sweep, max_concurrent, prog, restore=tune_covers(plan), stop=stop,
                                 packing=packing)
    kind = "Tune trial" if executor_of(plan.cfg.resources) == "tune" else "Ray Train job"
    jobs = "" if restored else f"; {len(job_grid(plan, max_concurrent))} {kind}(s)"
    say(f"  trials   {'resuming' if restored else 'starting'}: {len(before)} of {len(plan.specs)} already done{jobs}")
    t0 = time.perf_counter()
    from orchestration.cluster.ray_setup import secrets_withheld
    try:
        # Ray Tune copies AWS_* credentials from this process's environment into every trial's
        # runtime_env, which Ray's runtime-env agent logs in plain text: hold secrets back while it runs.
        if on_all_done is not None:
            _ALL_DONE[str(rd.root)] = on_all_done
        with secrets_withheld(), json_logger_only():
            tuner.fit()
            # trials that ran out of GPU memory: again, at twice their share (packing.py)
            oom_passes(plan, lambda specs, name: make_tuner(plan, sweep, max_concurrent, prog, False, stop,
                                                            specs=specs, name=name, packing=packing)[0], say)
        tune_caught_up(plan)
    except KeyboardInterrupt:      # Ctrl-C or SIGTERM: the command line prints this one line, exit 130
        raise KeyboardInterrupt(f"interrupted; continue with `poxm resume {rd.root}`") from None
    finally:
        _ALL_DONE.pop(str(rd.root), None)
        if plan.storage is not None:     # whatever the callbacks missed (a driver restart, a late file)
            from orchestration.stages.trial import fetch_trial
            for n in plan.names:
                fetch_trial(rd.root, n, plan.storage)
    done = sorted(done_trials(rd.root, plan.names))
    errored = [n for n in plan.names if n not in done and trial_state(rd.trial(n)).get("state") == "errored"]
    return done, errored, before, time.perf_counter() - t0
