"""One trial on Ray: a Tune function trainable (the driver) that fits a one-worker Ray Train job
(`DataParallelTrainer`, Train V2 pattern) whose worker function runs `poxm_core.training.run_trial`.

Why not `TorchTrainer`: it is the same trainer plus a torch process group, which a one-worker job
never uses, and it costs start-up: its controller and worker import torch and build the group
before the worker function starts (nearly twice the time from `fit` to the worker function;
benchmarks/ray_train_startup.py, docs/performance.md).

    Tuner ──> drive_trial(config, sweep)       Tune trial actor, one per job: a trial (TrialSpec, a group
                │                              of heads) or a pack of trials (resources.trials_per_job)
                └─ DataParallelTrainer(worker_loop)  Ray Train job 'train-<job name>' under run_dir/ray
                     └─ worker_loop({'job': WorkerJob})   per trial (run_member): load Prepared, run_trial,
                                                          its epochs to MLflow, and to Ray with their
                                                          checkpoints as Ray takes them (epoch_reports.py)

With resources.executor 'tune', drive_trial runs worker_loop itself, in the Tune trial's process (which
then holds the trial's CPUs and GPU): no Ray Train job, reports and checkpoints through Tune
(ray_session.py).

`sweep` (`SweepInputs`) and the job (`WorkerJob`) are the typed hand-offs of orchestration/stages/handoff.py.

Resume: the Train run name is stable, so a Train run started again with the same (storage_path,
name), after a worker crash (Train FailureConfig) or a driver retry (Tune FailureConfig) or
`poxm resume`, hands its latest checkpoint to `ray.train.get_checkpoint()` and run_trial continues
from it (in a pack: the checkpoint's folder name says which trial it belongs to), or from the trial
folder's checkpoint when that one is newer (report_pace.py: not every epoch is reported). A trial whose
done.json exists is not run again.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from orchestration.stages.handoff import HeadRuns, JobMember, PreparedRef, SweepInputs, WorkerJob, head_points, worker_job
from orchestration.cluster.ray_setup import PREEMPTION_WATCHER_ENV
# fault injection lives beside the epoch reports it follows; tune.py and the tests name it through this stage
from orchestration.stages.epoch_reports import CRASH_ENV as CRASH_ENV, crash_spec as crash_spec
from orchestration.stages.epoch_reports import EpochReports, crashes_after as crashes_after
from orchestration.cluster.mps import MPS_LIMIT_ENV
from orchestration.stages.packing import card_bytes, inject_oom, is_oom, mps_memory_limit, record_oom
from orchestration.stages.ray_session import TUNE_REPORT_S, RaySession, checkpoint_name, executor_of
from orchestration.stages.report_pace import ReportPace
from orchestration.rundir import read_json
# a trial's files: re-exported, tune.py, the tests and the benchmarks name them through this stage
from orchestration.stages.trial_files import TrialFiles as TrialFiles, done_trials as done_trials
from orchestration.stages.trial_files import fetch_trial as fetch_trial, record_attempt, trainer_timing, write_done
from orchestration.stages.trial_files import trial_dirname as trial_dirname
from poxm_core.common.errors import PoxmInputError


def worker_loop(train_loop_config: dict, session: RaySession | None = None) -> None:
    """The Ray Train worker of a job (one worker per job: no data parallelism, docs/orchestration.md):
    the job's trials one after another, in this process (imports, Ray Train's start-up and a loaded
    prepared variant serve them all). train_loop_config: {'job': WorkerJob}.

    A trial with done.json is skipped; a trial interrupted mid-way continues from Ray's latest
    checkpoint when that checkpoint is the trial's own (its folder name says whose: 'epoch_XXXX' in
    a job of one trial, '<trial>.epoch_XXXX' in a pack) and not older than its trial folder's, else
    from its trial folder's checkpoint. `session`: how the trials talk to Ray (ray_session.py; default
    Ray Train's, as a job's worker; drive_trial passes Tune's when the trials run in its own process)."""
    worker_start = time.time()     # Ray Train's part of the job's start-up ends here (timing.json)
    import torch

    from poxm_core.config.schema import SweepConfig
    from poxm_core.training.memory import start_trial

    job: WorkerJob = train_loop_config["job"]
    if train_loop_config.get("mps_limit"):      # an MPS client's memory limit, before its CUDA context
        os.environ.setdefault(MPS_LIMIT_ENV, train_loop_config["mps_limit"])
    torch.set_num_threads(max(1, int(job.cpus)))
    cfg = SweepConfig.model_validate(job.config)
    if cfg.device != "cpu" and torch.cuda.is_available():
        # 'cuda' from here on means the card Ray reserved for this job
        torch.cuda.set_device(job_cuda_index())
        torch.zeros(1, device="cuda")     # the CUDA context now, so worker_ready includes its start
    starts = {"worker_start": round(worker_start, 3), "worker_ready": round(time.time(), 3)}
    members = job.members
    E = cfg.training.epochs
    session = session or RaySession("train")
    ckpt, base = session.latest()
    ckpt_trial = None
    if ckpt is not None:
        ckpt_trial = base.rpartition(".epoch_")[0] if ".epoch_" in base else members[0].name
    loaded: dict = {}                 # the last prepared variant loaded: {variant_dir: Prepared}
    head_epochs = 0                   # of this job, for the progress bar
    # epoch reports only as often as Ray Train takes them; under Tune, whose report waits for its loop, rarer
    pace = ReportPace(TUNE_REPORT_S if session.executor == "tune" else None)
    for i, m in enumerate(members):
        files = TrialFiles(m.name, job.run_root, job.storage)
        n_heads = len(m.spec["heads"])
        if files.read_json("done.json") is not None:     # finished by an earlier attempt
            head_epochs += n_heads * E
            continue
        mine = ckpt if ckpt is not None and ckpt_trial == m.name else None
        # a reused process (a pack, Tune's reuse_actors): what the previous trial left (reference cycles, the
        # allocator's cache, cuBLAS workspaces) freed and the peak restarted, so the peak recorded is this one's
        start_trial()
        try:
            run_member(job, cfg, m, i, files, mine, loaded, head_epochs, len(members) > 1, starts, pace, session)
        except PoxmInputError as exc:
            # deterministic (a refused checkpoint, a changed cache file): another try fails the same way, so
            # the job ends here, normally, instead of raising into Ray Train's retries (FailureConfig); the
            # trial is errored with its one line, and drive_trial ends the Tune trial without Tune's retries
            files.set_state("errored", error=input_error_line(exc), input_error=True)
            session.report({"input_error": 1, "member": i, "head_epochs": head_epochs})
            return
        head_epochs += n_heads * E
        session.report({"member_finished": 1, "member": i, "head_epochs": head_epochs,
                          **({"finished": 1} if i == len(members) - 1 else {})})
        pace.sent()


POINTS_TIMEOUT_S = 3600.0      # a trial's MLflow runs not in mlflow_runs.json by then: the sweep is stuck


def wait_for_runs(points_file: str, uri: str, spec: dict, poll_s: float = 0.25,
                  timeout_s: float = POINTS_TIMEOUT_S) -> HeadRuns:
    """This trial's MLflow runs from the driver's mlflow_runs.json, once every one of its grid points
    is there (the driver creates them beside the trials and rewrites the file every few points,
    atomically: orchestration.stages.track.PointsStage). A failure there stops the sweep's trials."""
    wanted = head_points(spec)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            have = (read_json(Path(points_file), None) or {}).get("points") or {}
        except PoxmInputError:      # not JSON (yet): the driver replaces it atomically, a copy may not
            have = {}
        if all(p in have for p in wanted.values()):
            return HeadRuns(uri, {k: have[p] for k, p in wanted.items()})
        if time.monotonic() > deadline:
            raise RuntimeError(f"{points_file}: the MLflow runs of trial {spec.get('name', '?')} did not appear "
                               f"within {timeout_s:.0f} s")
        time.sleep(poll_s)


def checkpoint_epoch(dirname: str) -> int:
    """The epoch in a checkpoint folder's name ('epoch_0007', '<trial>.epoch_0007'); -1 if none."""
    tail = dirname.rpartition("epoch_")[2]
    return int(tail) if tail.isdigit() else -1


def job_cuda_index() -> int:
    """The index, among the cards this process sees, of the GPU Ray gave the job: Ray sets
    CUDA_VISIBLE_DEVICES (often to that one card, then 0), but a worker may see more than its own."""
    import ray
    ids = [str(i) for i in ray.get_gpu_ids()]
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible.index(ids[0]) if ids and ids[0] in visible else 0


def run_member(job: WorkerJob, cfg, m: JobMember, index: int, files: TrialFiles, ckpt, loaded: dict,
               base_head_epochs: int, packed: bool, starts: dict | None = None, pace: ReportPace | None = None,
               session: RaySession | None = None) -> None:
    """One trial of a job, in the order it happens: its prepared variant (kept when the previous trial
    used the same) and its MLflow runs; run_trial from the newer of Ray's and the trial folder's
    checkpoint, each epoch handed on as it ends (EpochReports: MLflow, state.json, and Ray as often as
    Ray takes them, `pace`); then its runs' final values, its files published, timing.json, done.json."""
    from poxm_core.training import TrialSpec

    spec = TrialSpec.from_dict(m.spec)
    out_dir = files.work_dir(job.sweep_id)
    # every start counts as a try, also one that is killed before it can record its attempt
    tries = int((files.read_json("state.json", {}) or {}).get("tries", 0)) + 1
    files.set_state("running", started=time.time(), job=job.name, tries=tries, input_error=False)
    prepared, seconds = member_data(job, m, files, loaded)
    runs, points_wait_s = member_runs(job, m)
    logger = point_logger(runs)
    on_epoch = EpochReports(trial=spec.name, files=files, out_dir=out_dir, logger=logger, pace=pace,
                            crash=job.crash, epochs=cfg.training.epochs, member=index, heads=len(m.spec["heads"]),
                            head_epochs_before=base_head_epochs, packed=packed, session=session)
    ckpt, resumed = resume_point(ckpt, out_dir)
    try:
        inject_oom(job.oom, spec.name, out_dir)      # fault injection for tests (packing.OOM_ENV)
        t1, start = time.perf_counter(), time.time()
        df = train_member(cfg, spec, prepared, out_dir, ckpt, on_epoch)
        seconds["run_trial_s"] = time.perf_counter() - t1
    except BaseException:
        if logger is not None:
            logger.fail()
        raise
    if logger is not None:
        points = {(h["method"], h["p"], h["lam"]): rid for h, rid in
                  zip(m.spec["heads"], (runs.heads[k] for k in m.head_keys))}
        logger.log_final(df, points, seconds=seconds["run_trial_s"], timing=trainer_timing(out_dir))
        log_memory(logger, points.values(), out_dir)
    files.publish(out_dir)
    if job.points_file is not None:     # runs created beside the trials: the wait for them (0 if they were there)
        seconds["points_wait_s"] = points_wait_s
    timing = record_attempt(files, job, seconds, start, resumed, starts)
    write_done(files, job, df, timing, tries)


def log_memory(logger, run_ids, out_dir: Path) -> None:
    """The trial's GPU memory (summary.json: estimated before it ran, measured peaks) as metrics of each
    of its MLflow runs, in the train/ group beside the other training metrics: train/gpu_memory_estimate_mb,
    ..._peak_mb, ..._peak_first_epoch_mb (the whole trial's, shared by its heads)."""
    import json

    from mlflow.entities import Metric
    try:
        mem = json.loads((Path(out_dir) / "summary.json").read_text()).get("memory") or {}
    except (OSError, ValueError):
        return
    now = int(time.time() * 1000)
    ms = [Metric(f"train/gpu_memory_{k}", float(v), now, 0) for k, v in mem.items() if k.endswith("_mb")]
    if not ms:
        return
    for rid in run_ids:
        logger.c.log_batch(rid, metrics=ms)


def member_data(job: WorkerJob, m: JobMember, files: TrialFiles, loaded: dict) -> tuple:
    """The trial's Prepared, from `loaded` (the job's last variant: {variant_dir: Prepared}) or loaded
    into it, and the seconds it took: {'prepare_wait_s', 'load_s'}."""
    from orchestration.cluster.storage import node_dir
    from poxm_core.prepare.pipeline import load_variant

    t0 = time.perf_counter()
    # while the prepare stage runs beside the trials: wait here for this trial's variant (read from
    # the driver's cache: the stage overlaps the trials only when they share it)
    at = (m.prepared.resolve(job.cache_dir if files.store is None else None) if isinstance(m.prepared, PreparedRef)
          else m.prepared)
    wait_s = time.perf_counter() - t0
    variant_dir = at.dir
    if variant_dir not in loaded:
        loaded.clear()
        if files.store is None:
            cache = Path(job.cache_dir)
        else:   # this node's own copy of the prepared levels, fetched from storage when missing
            cache = node_dir() / "cache"
            for rel in at.levels:
                files.store.get_level(cache, rel)
        loaded[variant_dir] = load_variant(cache, cache / variant_dir, mmap=True)
    return loaded[variant_dir], {"prepare_wait_s": wait_s, "load_s": time.perf_counter() - t0 - wait_s}


def member_runs(job: WorkerJob, m: JobMember) -> tuple[HeadRuns | None, float]:
    """The trial's MLflow runs (None: MLflow off) and the seconds spent waiting for them: they are
    created beside the trials when the job has a points file."""
    if m.runs is None and job.points_file is not None:
        t = time.perf_counter()
        runs = wait_for_runs(job.points_file, job.mlflow_uri, m.spec)
        return runs, time.perf_counter() - t
    return m.runs, 0.0


def point_logger(runs: HeadRuns | None):
    """The worker's MLflow logger of the trial's runs, started; None without runs."""
    if runs is None:
        return None
    from orchestration.tracking.runs import PointLogger
    logger = PointLogger(runs.uri, runs.heads)
    logger.start()
    return logger


def resume_point(ckpt, out_dir: Path) -> tuple:
    """(the Ray checkpoint to continue from or None, what the trial resumes from for timing.json).

    Ray's latest checkpoint of this trial, unless the trial folder has a newer one: epochs are reported
    to Ray only as often as it takes them, and a worker that died right after a report can leave Ray
    without it. (In storage mode the folder is this node's: on another node Ray's is the one there.)
    Without Ray's, run_trial itself continues from the folder's latest."""
    from poxm_core.training.checkpoint import latest_checkpoint
    last = latest_checkpoint(out_dir)
    name = checkpoint_name(ckpt) if ckpt is not None else None
    if ckpt is not None and last is not None and checkpoint_epoch(last.name) > checkpoint_epoch(name):
        ckpt = None
    if ckpt is not None:
        return ckpt, f"ray:{name}"
    return None, (None if last is None else f"trial_dir:{last.name}")


def train_member(cfg, spec, prepared, out_dir: Path, ckpt, on_epoch):
    """run_trial, from Ray's checkpoint `ckpt` when there is one; its result rows."""
    from poxm_core.training import run_trial
    if ckpt is not None:
        with ckpt.as_directory() as d:
            return run_trial(cfg, spec, prepared, out_dir, resume_from=Path(d), on_epoch=on_epoch, progress=False)
    return run_trial(cfg, spec, prepared, out_dir, on_epoch=on_epoch, progress=False)


def mps_limit(sweep: SweepInputs, share: float) -> str | None:
    """The trial process's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT under MPS (its share of the card), else None."""
    if not getattr(sweep.resources, "mps", False) or share <= 0:
        return None
    return mps_memory_limit(min(share, 1.0), card_bytes(), 0)


def drive_trial(config: dict, sweep: SweepInputs) -> None:
    """Tune function trainable: a job's trials (one trial, or a pack of them run one after another), in
    one Ray Train job (resources.executor 'train', the default) or in this process (executor 'tune': it
    holds the trial's CPUs and GPU). config: {'trial': {'name': job name, 'members': [trial names], ...}};
    sweep (tune.with_parameters): what every job gets (`SweepInputs`)."""
    import ray.tune

    name = config["trial"]["name"]
    names = config["trial"].get("members") or [name]
    files = {n: TrialFiles(n, sweep.run_root, sweep.storage) for n in names}
    todo = [n for n in names if files[n].read_json("done.json") is None]
    if not todo:      # finished before an interruption that Tune's state did not record
        ray.tune.report({"finished": 1, "skipped": 1, "member": len(names) - 1})
        return
    job = worker_job(sweep, name, names, fit_start=time.time())
    share = float(config["trial"].get("gpu", sweep.resources.gpus_per_trial))     # packing.py
    limit = mps_limit(sweep, share)
    try:
        if executor_of(sweep.resources) == "tune":
            if limit is not None:      # this process is the MPS client: its limit before its CUDA context
                os.environ.setdefault(MPS_LIMIT_ENV, limit)
            worker_loop({"job": job}, RaySession("tune"))
        else:
            train_job(job, sweep, share, limit)
    except BaseException as exc:
        # the trial that was running when the job gave up is the errored one; the job's later trials stay pending
        left = [n for n in names if files[n].read_json("done.json") is None]
        running = [n for n in left if (files[n].read_json("state.json", {}) or {}).get("state") == "running"]
        if left:
            culprit = files[(running or left)[0]]
            oom = is_oom(exc) and share > 0
            culprit.set_state("errored", error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500],
                              oom=oom)
            if oom:     # not the method's failure: run again at a larger share, not at this one (packing.py)
                record_oom(culprit, share)
                ray.tune.report({"oom": 1, "member": names.index(culprit.name)})
        raise
    for n in names:     # a trial's input error (worker_loop): the Tune trial errs, once (tune.NoRetryOnInputError)
        st = files[n].read_json("state.json", {}) or {}
        if st.get("state") == "errored" and st.get("input_error"):
            raise PoxmInputError(f"trial {n}: {st.get('error', '')}")


def train_job(job: WorkerJob, sweep: SweepInputs, share: float | None = None, mps_limit: str | None = None) -> None:
    """The job's trials in the one worker of a Ray Train job (worker_loop), its reports handed on to Tune.
    `share`: the job's GPU share (packing.py; default gpus_per_trial); `mps_limit`: the worker's
    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT."""
    import ray.train
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    res = sweep.resources
    gpu = res.gpus_per_trial if share is None else share
    use_gpu = gpu > 0
    per_worker = {"CPU": res.cpus_per_trial, **({"GPU": gpu} if use_gpu else {})}
    # one worker, no collectives: no process group (see the module docstring)
    trainer = DataParallelTrainer(
        worker_loop, train_loop_config={"job": job, **({"mps_limit": mps_limit} if mps_limit else {})},
        scaling_config=ray.train.ScalingConfig(num_workers=1, use_gpu=use_gpu, resources_per_worker=per_worker),
        run_config=ray.train.RunConfig(
            name=f"train-{job.name}", storage_path=sweep.ray_storage, callbacks=[TuneReportCallback()],
            failure_config=ray.train.FailureConfig(max_failures=res.max_failures),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2)))
    leave_out_unused_callbacks(trainer, pg_cleaner=sweep.state_api)
    # Ray Train's preemption watcher is one more actor (process) a job, polling for nodes about to be
    # preempted so that the worker can ask Ray Train whether it is; poxm's worker never asks (it saves
    # every epoch, and `poxm resume` continues). Ray Train hands the variable on to the job's controller.
    os.environ.setdefault(PREEMPTION_WATCHER_ENV, "0")
    trainer.fit()


def input_error_line(exc: BaseException) -> str:
    """The one line a trial's input error leaves in its state.json (what `poxm status` shows)."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:500]


def leave_out_unused_callbacks(trainer, pg_cleaner: bool = True) -> None:
    """Make `trainer` use Ray Train's default callbacks less those that only start processes a poxm job
    does not use; each is one more process a job, and a sweep starts its first jobs all at once.

    - The datasets callback starts a DatasetManager actor (which imports Ray Data) for every job,
      with or without Ray Datasets; poxm's jobs hand Ray Train none (their worker reads the
      prepared files itself), so it goes whenever the trainer has no datasets.
    - The placement-group cleaner (`pg_cleaner=False`): a detached actor that asks Ray's state API
      each second whether the job's controller is alive, to remove its placement group if it died.
      The state API is served by Ray's dashboard, which the local Ray poxm starts does not run: there
      the query fails, the cleaner retries until the job ends and never removes anything, and slows the
      jobs' start (benchmarks/ray_train_startup.py --no-pg-cleaner; docs/performance.md). Left out only
      where the state API does not answer (SweepInputs.state_api).

    `_create_default_callbacks` is Ray Train's private method (Ray pinned in pyproject.toml);
    tests/orchestration/stages/test_pg_cleaner.py checks it is still there and what it returns."""
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
    unused = (() if pg_cleaner else (PlacementGroupCleanerCallback,)) + (() if trainer.datasets else (DatasetsCallback,))
    defaults = trainer._create_default_callbacks
    trainer._create_default_callbacks = lambda: [c for c in defaults() if not isinstance(c, unused)]
