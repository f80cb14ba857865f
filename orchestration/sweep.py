"""A sweep, stage by stage (DESIGN §9, docs/orchestration.md):

  plan      config -> run dir <runs_dir>/<name>-<hash>, trials = trial_specs(cfg, cfg.group_by), grid points
  track     MLflow store + experiment + parent run, created once in the driver
  prepare   poxm_core.prepare once per (dataset, seed), as Ray remote tasks, into the content-addressed cache
  trials    Ray Tune over the trials; each one a Ray Train TorchTrainer job (orchestration.trial)
  gather    results/rows.csv, results/prepare.csv
  select    orchestration.selection.select -> results/selection.csv
  report    orchestration.report.build_report(run_dir) -> report/, logged on the parent run

`run_sweep` starts or continues the sweep of a config; `resume_sweep` continues the one in a run
directory (Tuner.restore: unfinished and errored trials run again, finished ones are kept).
"""
from __future__ import annotations

import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestration import tracking
from orchestration.rundir import (RunDir, acquire_driver, config_input, git_commit, read_json, release_driver,
                                  remove_tmp_leftovers, sweep_hash, sweep_id, trial_state, write_config, write_json)
from poxm_core.config import SweepConfig, protocol_name, resolved_dict
from poxm_core.errors import PoxmInputError

DRIVER_MEMORY = 64 * 1024 ** 2   # the Tune driver actor of a trial asks for memory only, no CPU (see _tuner)
TUNE_NAME = "tune"


@dataclass
class SweepPlan:
    cfg: SweepConfig
    rd: RunDir
    cache_dir: Path
    specs: list = field(default_factory=list)       # poxm_core.training.TrialSpec

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.specs]

    def grid(self) -> list[dict]:
        """Every grid point with the trial that trains it."""
        return [{"dataset": s.dataset, "variant": s.variant, "method": h.method, "p": h.p, "lam": h.lam,
                 "seed": s.seed, "trial": s.name} for s in self.specs for h in s.heads]


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


def plan_sweep(cfg: SweepConfig, runs_dir: str | os.PathLike | None = None,
               cache_dir: str | os.PathLike | None = None, check_data: bool = True) -> SweepPlan:
    """The sweep of `cfg`: run directory, cache, trials. Checks dataset/method names and settings and
    (check_data) that file datasets exist, so bad input fails here, before Ray starts."""
    from poxm_core.training import trial_specs

    base = Path(runs_dir if runs_dir is not None else cfg.runs_dir).expanduser().resolve()
    cfg = cfg.model_copy(update={"runs_dir": str(base)})
    rd = RunDir.for_config(cfg, base)
    cache = Path(cache_dir).expanduser().resolve() if cache_dir is not None else base / "cache"
    from poxm_core.config import default_data_root
    from poxm_core.data import spec_for
    from poxm_core.data.registry import declared_files, locate_files
    from poxm_core.methods import get_method
    for d in cfg.datasets:                   # input errors now, not after Ray has retried a trial
        spec = spec_for(d)
        if d.format is not None and check_data:
            declared_files(d)
        elif spec.reader is None and check_data:
            root = Path(cfg.data_root) if cfg.data_root else default_data_root()
            locate_files(spec, Path(d.path) if d.path else root / spec.folder)
    for name, mc in cfg.methods.items():
        get_method(name).validate(mc)
    specs = trial_specs(cfg, cfg.group_by)
    _check_p(cfg, specs)
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise PoxmInputError(f"config: two trials share a name ({names}); dataset/variant names must be distinct")
    return SweepPlan(cfg, rd, cache, specs)


def _check_p(cfg: SweepConfig, specs) -> None:
    """p (the action selector's size) cannot exceed the K = model.n_candidates candidates C(x), nor a
    synthetic dataset's label count: known now, so not found inside a trial after Ray has started."""
    for s in specs:
        d = cfg.dataset(s.dataset)
        n_labels = d.synthetic.n_labels if d.synthetic is not None and d.synthetic.n_labels else None
        K = min(cfg.model.n_candidates, n_labels) if n_labels else cfg.model.n_candidates
        for h in s.heads:
            if h.p is not None and h.p > K:
                valid = sorted(x for x in (cfg.methods[h.method].p or []) if x <= K) or [K]
                raise PoxmInputError(
                    f"config key 'methods.{h.method}.p': p={h.p} exceeds the {K} candidates C(x) of dataset "
                    f"{s.dataset} (model.n_candidates={cfg.model.n_candidates}"
                    + (f", synthetic.n_labels={n_labels}" if n_labels else "")
                    + f"); use p <= {K}, e.g. p: {valid}"
                    + (f" or model.n_candidates={h.p}" if not n_labels or h.p <= n_labels else ""))


def write_plan(plan: SweepPlan) -> None:
    rd = plan.rd
    rd.root.mkdir(parents=True, exist_ok=True)
    old = rd.read_sweep()
    if old and old.get("hash") != sweep_hash(plan.cfg):
        raise PoxmInputError(f"{rd.root}: holds sweep hash {old.get('hash')}, not {sweep_hash(plan.cfg)}")
    write_config(rd, plan.cfg)
    write_json(rd.sweep, {"name": plan.cfg.name, "hash": sweep_hash(plan.cfg), "id": sweep_id(plan.cfg),
                          "git_commit": git_commit(), "cache_dir": str(plan.cache_dir),
                          "group_by": plan.cfg.group_by, "trials": plan.names,
                          "grid": plan.grid(), "created": old.get("created", time.time()) if old else time.time()})


def plan_from_run_dir(run_dir: str | os.PathLike) -> SweepPlan:
    rd = RunDir.existing(run_dir)
    cfg = rd.load_config()
    sw = rd.read_sweep()
    plan = plan_sweep(cfg, rd.root.parent, sw.get("cache_dir"))
    if plan.rd.root != rd.root:
        raise PoxmInputError(f"{run_dir}: its config.yaml hashes to {plan.rd.root.name}, not {rd.root.name} "
                             "(was config.yaml edited? start a new sweep with `poxm run`)")
    return plan


# --------------------------------------------------------------------------------------------
# stages

def _union(spans: list[tuple[float, float]]) -> float:
    """Length of the union of time intervals: the wall time during which some trial was computing."""
    total, end = 0.0, -math.inf
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def _ray_init(address: str | None, verbose: bool) -> bool:
    """Connect to `address` / $RAY_ADDRESS, else start a local Ray; True if this call started it."""
    import ray
    if ray.is_initialized():
        return False
    if not verbose:
        quiet_libraries()
    addr = address or os.environ.get("RAY_ADDRESS") or None
    extra = {}
    if addr and worker_env():     # a remote cluster's workers do not inherit this shell: allow-listed vars only
        extra["runtime_env"] = {"env_vars": worker_env()}
    ray.init(address=addr, include_dashboard=False, log_to_driver=verbose,
             logging_level=logging.INFO if verbose else logging.WARNING, **extra)
    return True


# Environment variables a Ray worker may be handed (runtime_env is logged in plain text, readable by
# anyone on the cluster): poxm's own settings and thread counts, never tokens, passwords or keys.
# On a local Ray the workers inherit the driver's environment and no runtime_env is set at all.
WORKER_ENV_ALLOW = ("POXM_DATA_ROOT", "POXM_GIT_COMMIT", "POXM_INJECT_CRASH_ONCE", "OMP_NUM_THREADS",
                    "MKL_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG")
_SECRET_HINTS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH")


def worker_env(environ=None) -> dict[str, str]:
    """The allow-listed, non-secret environment variables for Ray's runtime_env (see WORKER_ENV_ALLOW)."""
    environ = os.environ if environ is None else environ
    return {k: environ[k] for k in WORKER_ENV_ALLOW
            if k in environ and not any(h in k.upper() for h in _SECRET_HINTS)}


def quiet_libraries() -> None:
    """Ray's and MLflow's start-up warnings, INFO lines and colours off (`--verbose` keeps them)."""
    import warnings
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")    # Tune's own tables: our progress bar replaces them
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")   # its FutureWarning on every worker
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    if not sys.stderr.isatty():
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")            # no ANSI codes in log files
        os.environ.setdefault("NO_COLOR", "1")
    for name in ("ray", "ray.tune", "ray.train", "ray.data", "mlflow", "alembic", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for mod in ("ray", "mlflow", "pydantic"):
        warnings.filterwarnings("ignore", category=FutureWarning, module=mod)
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=mod)


def _check_resources(cfg: SweepConfig, local: bool) -> int:
    """max_concurrent_trials: the config's, else what the cluster's CPUs/GPUs allow. On a local
    Ray, a trial that can never fit is an input error (it would wait forever)."""
    import ray
    r = cfg.resources
    total = ray.cluster_resources()
    cpus, gpus = float(total.get("CPU", 0)), float(total.get("GPU", 0))
    need_cpu, need_gpu = r.num_workers * r.cpus_per_trial, r.num_workers * r.gpus_per_trial
    if local and need_cpu > cpus + 1e-9:
        raise PoxmInputError(f"config key 'resources.cpus_per_trial': a trial needs {need_cpu:g} CPUs "
                             f"(num_workers x cpus_per_trial) but this machine's Ray has {cpus:g}")
    if local and need_gpu > gpus + 1e-9:
        raise PoxmInputError(f"config key 'resources.gpus_per_trial': a trial needs {need_gpu:g} GPUs but this "
                             f"machine's Ray has {gpus:g} (set resources.gpus_per_trial=0 for CPU)")
    if cfg.device == "cuda" and r.gpus_per_trial <= 0:
        raise PoxmInputError("config key 'resources.gpus_per_trial': device=cuda needs gpus_per_trial > 0 "
                             "(Ray hides GPUs from workers that do not ask for them)")
    fit = math.floor(cpus / need_cpu + 1e-9) if need_cpu > 0 else 1 << 30
    if need_gpu > 0:
        fit = min(fit, math.floor(gpus / need_gpu + 1e-9))
    auto = max(1, fit)
    return min(r.max_concurrent_trials, auto) if (r.max_concurrent_trials and local) else (r.max_concurrent_trials or auto)


def _prepare_remote(cfg_dict: dict, dataset: str, seed: int, cache_dir: str, cpus: float) -> dict:
    import torch

    from poxm_core.config import SweepConfig as _C
    from poxm_core.prepare import prepare

    torch.set_num_threads(max(1, int(cpus)))
    t0 = time.perf_counter()
    out = prepare(_C.model_validate(cfg_dict), dataset, seed, Path(cache_dir), progress=False)
    return {"variants": {k: str(v) for k, v in out.items()}, "seconds": time.perf_counter() - t0}


def stage_prepare(plan: SweepPlan, say) -> tuple[dict, float]:
    """prepare() for every (dataset, seed) as Ray tasks; {(dataset, seed): {variant: dir}}, seconds."""
    import ray
    r = plan.cfg.resources
    opts = {"num_cpus": r.cpus_per_trial}
    if r.gpus_per_trial > 0:
        opts["num_gpus"] = min(1.0, r.gpus_per_trial)
    task = ray.remote(**opts)(_prepare_remote)
    jobs = [(d.name, s) for d in plan.cfg.datasets for s in plan.cfg.seeds]
    cfg_dict = config_input(plan.cfg)
    refs = {task.remote(cfg_dict, d, s, str(plan.cache_dir), r.cpus_per_trial): (d, s) for d, s in jobs}
    out, compute = {}, 0.0
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        d, s = refs[ready[0]]
        try:
            res = ray.get(ready[0])
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            if isinstance(cause, PoxmInputError):
                raise PoxmInputError(str(cause)) from None
            raise
        out[(d, s)] = res["variants"]
        compute += res["seconds"]
        say(f"  prepared {d} seed {s} ({res['seconds']:.1f} s)")
    return out, compute


def _tuner(plan: SweepPlan, ctx: dict, max_concurrent: int, progress, restore: bool):
    import ray.tune

    from orchestration.trial import drive_trial, trial_dirname

    # The Tune trial only drives its TorchTrainer; giving it a CPU would leave that CPU idle and can
    # deadlock a small machine (driver CPU + worker CPUs > total). It asks for a little memory instead.
    trainable = ray.tune.with_resources(ray.tune.with_parameters(drive_trial, ctx=ctx), {"memory": DRIVER_MEMORY})
    path = str(plan.rd.ray / TUNE_NAME)
    if restore and ray.tune.Tuner.can_restore(path):
        return ray.tune.Tuner.restore(path, trainable=trainable, resume_unfinished=True, resume_errored=True), True
    grid = [{"name": s.name, "dataset": s.dataset, "variant": s.variant, "seed": s.seed,
             "methods": ",".join(s.methods), "heads": len(s.heads)} for s in plan.specs]
    return ray.tune.Tuner(
        trainable, param_space={"trial": ray.tune.grid_search(grid)},
        tune_config=ray.tune.TuneConfig(max_concurrent_trials=max_concurrent, trial_dirname_creator=trial_dirname,
                                        trial_name_creator=trial_dirname),
        run_config=ray.tune.RunConfig(name=TUNE_NAME, storage_path=str(plan.rd.ray),
                                      failure_config=ray.tune.FailureConfig(max_failures=plan.cfg.resources.max_failures),
                                      callbacks=[progress], verbose=0),
    ), False


def stage_track(plan: SweepPlan, cli_uri: str | None) -> tuple[str, str, str, dict]:
    cfg = plan.cfg
    uri = tracking.resolve_uri(plan.rd.root, cli_uri, cfg.mlflow.tracking_uri)
    exp_name = cfg.mlflow.experiment or sweep_id(cfg)
    exp_id = tracking.init_store(uri, exp_name, plan.rd.mlartifacts)
    commit = git_commit()
    tags = {"config_hash": sweep_hash(cfg), "git_commit": commit, "sweep_name": cfg.name,
            "protocol": protocol_name(cfg.training), **tracking.standard_tags(commit)}
    cfg_dict = resolved_dict(cfg)
    cfg_dict.pop("runs_dir", None)        # a machine path, and not what the sweep computes
    note = tracking.sweep_description(cfg_dict, sweep_id(cfg), len(plan.specs), len(plan.grid()),
                                      protocol_name(cfg.training))
    parent = tracking.ensure_parent(uri, exp_id, sweep_id(cfg), {**tags, "run_dir": plan.rd.root.name},
                                    params=tracking.flat_params(cfg_dict), description=note)
    return uri, exp_id, parent, tags


def stage_points(plan: SweepPlan, uri: str, exp_id: str, parent: str, tags: dict,
                 prepared: dict) -> tracking.SweepRuns:
    from orchestration.gather import data_checksum
    checks = {}
    for (d, s), variants in prepared.items():
        for v, vdir in variants.items():
            checks[(d, v, s)] = data_checksum(plan.cache_dir, Path(vdir))
    grid = plan.grid()
    ptags = {tracking.point_key(g): {"dataset_checksum": checks[(g["dataset"], g["variant"], g["seed"])]}
             for g in grid if (g["dataset"], g["variant"], g["seed"]) in checks}
    points = tracking.ensure_points(uri, exp_id, parent, sweep_id(plan.cfg), resolved_dict(plan.cfg),
                                    [(g, g["trial"]) for g in grid], tags, ptags)
    runs = tracking.SweepRuns(uri, exp_id, parent, points)
    write_json(plan.rd.mlflow_runs, {**runs.to_dict(), "tracking_uri": tracking.record_uri(uri, plan.rd.root)})
    return runs


def stage_select_report(plan: SweepPlan, rows, say) -> Path | None:
    from orchestration.selection import select

    sel = select(rows, plan.cfg.selection.criterion) if len(rows) else None
    if sel is not None:
        tmp = plan.rd.selection_csv.with_name(".selection.csv.tmp")
        sel.to_csv(tmp, index=False)
        tmp.replace(plan.rd.selection_csv)
    try:
        from orchestration.report import build_report
        return Path(build_report(plan.rd.root))
    except (PoxmInputError, ImportError) as exc:
        say(f"  report: not built ({exc})")
        return None


# --------------------------------------------------------------------------------------------
# the whole sweep

def execute(plan: SweepPlan, *, address: str | None = None, mlflow_uri: str | None = None,
            progress: bool = True, verbose: bool = False) -> SweepOutcome:
    """Run (or continue) every stage of a planned sweep; see the module docstring."""
    import ray

    from orchestration.gather import gather_prepare, gather_rows
    from orchestration.trial import crash_spec, done_trials

    def say(msg: str) -> None:
        if progress:
            print(msg, flush=True)

    t_start = time.perf_counter()
    if not verbose:
        quiet_libraries()           # before MLflow's store is opened and Ray starts
    rd = plan.rd
    write_plan(plan)
    acquire_driver(rd)
    remove_tmp_leftovers(rd)        # a killed run's half-written files: nothing writes them now
    started_ray = False
    runs = None                     # set while point runs exist that must not stay RUNNING
    parent_open = None              # (uri, parent run id) until the parent run is ended
    track = plan.cfg.mlflow.enabled
    try:
        say(f"poxm: sweep {rd.root.name}: {len(plan.specs)} trial(s), {len(plan.grid())} grid point(s)")
        say(f"  run dir  {rd.root}")
        if track:
            uri, exp_id, parent, tags = stage_track(plan, mlflow_uri)
            parent_open = (uri, parent)
            say(f"  mlflow   {uri}")
        else:
            say("  mlflow   off (mlflow.enabled=false)")
        local = not (address or os.environ.get("RAY_ADDRESS"))
        started_ray = _ray_init(address, verbose)
        max_conc = _check_resources(plan.cfg, local)
        say(f"  ray      {ray.cluster_resources().get('CPU', 0):g} CPU, {ray.cluster_resources().get('GPU', 0):g} GPU; "
            f"up to {max_conc} trial(s) at once")

        t0 = time.perf_counter()
        prepared, prepare_compute = stage_prepare(plan, say)
        prepare_s = time.perf_counter() - t0
        gather_prepare(rd, prepared, plan.cache_dir)
        if track:
            runs = stage_points(plan, uri, exp_id, parent, tags, prepared)

        before = done_trials(rd.root, plan.names)
        from orchestration.progress import SweepProgress
        prog = SweepProgress(len(plan.specs), len(before), enabled=progress, epochs=plan.cfg.training.epochs)
        ctx = {"run_root": str(rd.root), "cache_dir": str(plan.cache_dir), "cfg": config_input(plan.cfg),
               "specs": {s.name: s.to_dict() for s in plan.specs},
               "resources": plan.cfg.resources.model_dump(), "crash": crash_spec(),
               "mlflow": {"uri": runs.uri, "points": runs.points} if runs is not None else None}
        tuner, restored = _tuner(plan, ctx, max_conc, prog, restore=True)
        say(f"  trials   {'resuming' if restored else 'starting'}: {len(before)} of {len(plan.specs)} already done")
        t1 = time.perf_counter()
        try:
            tuner.fit()
        except KeyboardInterrupt:
            say("poxm: interrupted; continue with `poxm resume " + str(rd.root) + "`")
            raise
        tune_s = time.perf_counter() - t1

        done = sorted(done_trials(rd.root, plan.names))
        errored = [n for n in plan.names if n not in done and trial_state(rd.trial(n)).get("state") == "errored"]
        t2 = time.perf_counter()
        rows = gather_rows(rd, plan.names)
        report = stage_select_report(plan, rows, say)
        report_s = time.perf_counter() - t2

        compute, spans = 0.0, []
        for n in sorted(set(done) - before):
            for a in (read_json(rd.trial(n) / "timing.json", {}) or {}).get("attempts", []):
                compute += float(a.get("run_trial_s", 0.0))
                if "start" in a and "end" in a:
                    spans.append((a["start"], a["end"]))
        busy = _union(spans)
        wall = time.perf_counter() - t_start
        summary = {"sweep": rd.root.name, "trials": len(plan.specs), "done": len(done), "errored": len(errored),
                   "ran_now": len(set(done) - before), "grid_points": len(plan.grid()),
                   "wall_s": round(wall, 2), "prepare_s": round(prepare_s, 2),
                   "prepare_compute_s": round(prepare_compute, 2), "tune_s": round(tune_s, 2),
                   "trial_compute_s": round(compute, 2), "trial_compute_busy_s": round(busy, 2),
                   "gather_select_report_s": round(report_s, 2),
                   "share_outside_trial_compute": round(1 - busy / wall, 4) if wall > 0 else None,
                   "max_concurrent_trials": max_conc, "finished_at": time.time()}
        history = (read_json(rd.summary_json, {}) or {}).get("history", [])
        write_json(rd.summary_json, {**summary, "history": history + [summary]})   # latest + every invocation

        if runs is not None:
            status = {}
            for g in plan.grid():
                key = tracking.point_key(g)
                status[key] = "FINISHED" if g["trial"] in done else ("FAILED" if g["trial"] in errored else "KILLED")
            tracking.close_points(runs, status)
            if report is not None and rd.selection_csv.is_file():
                import pandas as pd
                tracking.tag_selected(runs, pd.read_csv(rd.selection_csv).to_dict("records"))
            ok = not errored and len(done) == len(plan.specs)
            tracking.finish_parent(
                runs, ok, {f"sweep/{k}": v for k, v in summary.items()
                           if isinstance(v, (int, float)) and k != "finished_at"},
                [(rd.config, "sweep"), (rd.sweep, "sweep"), (rd.results, "results")]
                + ([(report, "report")] if report is not None else []))
            runs = parent_open = None
        say(f"poxm: {len(done)}/{len(plan.specs)} trials done, {len(errored)} errored; wall {wall:.1f} s, trial "
            f"compute {compute:.1f} s ({100 * (1 - busy / wall):.0f}% of the wall time had no trial computing)")
        if report is not None:
            say(f"  report   {report / 'index.md'}")
        return SweepOutcome(rd.root, len(plan.specs), done, errored, summary, report)
    finally:
        if runs is not None:       # interrupted or failed before the end: nothing stays RUNNING
            try:
                done = done_trials(rd.root, plan.names)
                tracking.close_points(runs, {tracking.point_key(g): "FINISHED" if g["trial"] in done else "KILLED"
                                             for g in plan.grid()})
            except Exception:  # noqa: BLE001  the original error matters more
                pass
        if parent_open is not None:
            try:
                tracking.client(parent_open[0]).set_terminated(parent_open[1], "KILLED")
            except Exception:  # noqa: BLE001
                pass
        if started_ray:
            ray.shutdown()
        release_driver(rd)


def report_only(plan: SweepPlan, log_mlflow: bool = True) -> Path | None:
    """`poxm report`: gather the finished trials' rows, select, rebuild report/ (no Ray); log it on
    the sweep's MLflow parent run when there is one."""
    from orchestration.gather import gather_prepare, gather_rows

    rd = plan.rd
    if not rd.prepare_csv.is_file():
        from poxm_core.prepare import prepare
        prepared = {(d.name, s): {k: str(v) for k, v in prepare(plan.cfg, d.name, s, plan.cache_dir, progress=False).items()}
                    for d in plan.cfg.datasets for s in plan.cfg.seeds}
        gather_prepare(rd, prepared, plan.cache_dir)
    rows = gather_rows(rd, plan.names)
    report = stage_select_report(plan, rows, print)
    ml = read_json(rd.mlflow_runs, None)
    if log_mlflow and report is not None and ml:
        c = tracking.client(tracking.stored_uri(rd.root, ml))
        c.log_artifacts(ml["parent_run_id"], str(report), "report")
        c.log_artifacts(ml["parent_run_id"], str(rd.results), "results")
    return report


def run_sweep(cfg: SweepConfig, *, runs_dir=None, cache_dir=None, address=None, mlflow_uri=None,
              progress: bool = True, verbose: bool = False) -> SweepOutcome:
    return execute(plan_sweep(cfg, runs_dir, cache_dir), address=address, mlflow_uri=mlflow_uri,
                   progress=progress, verbose=verbose)


def resume_sweep(run_dir, *, address=None, mlflow_uri=None, progress: bool = True,
                 verbose: bool = False) -> SweepOutcome:
    plan = plan_from_run_dir(run_dir)
    if mlflow_uri is None:   # keep logging where the sweep started
        mlflow_uri = tracking.stored_uri(plan.rd.root, read_json(plan.rd.mlflow_runs, {}))
    return execute(plan, address=address, mlflow_uri=mlflow_uri, progress=progress, verbose=verbose)
