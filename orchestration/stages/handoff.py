"""What crosses into Ray for the trials, typed: one meaning per name.

    SweepInputs   what every job of a sweep gets (`tune.with_parameters(drive_trial, sweep=...)`),
                  built once in the driver by `orchestration.stages.tune.sweep_inputs`
    WorkerJob     what the one Ray Train worker of a job gets (`DataParallelTrainer(train_loop_config=...)`,
                  under the key 'job'): the job's trials (`JobMember`) and where to read and write,
                  built by `worker_job` in the job's Tune driver
    variant_at    where prepare puts a variant in the cache (`PreparedAt`), from the config alone

Plain frozen dataclasses of strings, numbers, dicts and the resources settings: they pickle as they
are, and a worker validates the sweep config again from `config` (the keys as the user gave them).
"""
from __future__ import annotations

from dataclasses import dataclass

from poxm_core.config.schema import ResourcesConfig

__all__ = ["PreparedAt", "variant_at", "PreparedRef", "SweepInputs", "HeadRuns", "JobMember", "WorkerJob", "worker_job"]


@dataclass(frozen=True)
class PreparedAt:
    """Where a trial's prepared variant is: `dir` (the variant, relative to the cache) and `levels`
    (every prepared level it needs, relative to the cache; storage mode fetches them)."""
    dir: str
    levels: tuple[str, ...]


def variant_at(cfg, dataset: str, seed: int, variant: str) -> PreparedAt:
    """Where prepare puts a variant in the cache, from the config alone (its cache keys): the levels
    relative to the cache, data first, the variant last (as poxm_core.prepare.cache.variant_record)."""
    from poxm_core.prepare.cache import cache_keys

    keys = cache_keys(cfg, dataset, int(seed))
    alpha = next(v.alpha for v in cfg.dataset(dataset).variants if v.name == variant)
    levels = (f"data/{keys.data[1]}", f"model/{keys.model[alpha][1]}", f"candidates/{keys.candidates[alpha][1]}",
              f"variant/{keys.variant[variant][1]}")
    return PreparedAt(levels[-1], levels)


@dataclass(frozen=True)
class PreparedRef:
    """A trial's prepared variant while the prepare stage may still run (orchestration.stages.prepare):
    `ref`, the ObjectRef of its (dataset, seed)'s prepare task, and which `variant` of its result.
    `at`: where the variant will be in the sweep's cache (its cache keys, computed by the driver), so
    that a trial whose variant is built starts before its task has built the others."""
    ref: object
    variant: str
    at: PreparedAt | None = None

    def resolve(self, cache_dir: str | None = None, poll_s: float = 0.25) -> PreparedAt:
        """Waits until the task has ended (a failed one raises here) or, with `cache_dir` and `at`, until
        the variant's level in that cache is complete (its manifest is written last, by a rename),
        whichever comes first; then says where the variant is."""
        import ray
        if self.at is not None and cache_dir is not None:
            from pathlib import Path

            from poxm_core.prepare.cache import is_complete
            while not ray.wait([self.ref], timeout=poll_s)[0]:
                if is_complete(Path(cache_dir) / self.at.dir):
                    return self.at
        r = ray.get(self.ref)["variants"][self.variant]
        return PreparedAt(str(r["dir"]), tuple(r["levels"]))


@dataclass(frozen=True)
class SweepInputs:
    run_root: str                          # the run directory
    cache_dir: str                         # the prepared-data cache
    config: dict                           # the sweep config as given (rundir.config_input)
    storage: str | None                    # resources.storage_path URI, None: the run directory
    ray_storage: str                       # Ray Tune's and Ray Train's storage_path
    sweep_id: str                          # the run directory's name
    specs: dict[str, dict]                 # trial name -> TrialSpec.to_dict()
    prepared: dict[str, PreparedAt | PreparedRef]   # trial name -> its prepared variant
    resources: ResourcesConfig
    crash: str | None = None               # fault injection for tests (trial.CRASH_ENV)
    oom: str | None = None                 # fault injection for tests (packing.OOM_ENV)
    mlflow_uri: str | None = None          # None: no MLflow tracking
    mlflow_points: dict[str, str] | None = None   # grid point key -> its MLflow run id
    mlflow_points_file: str | None = None  # while they are created beside the trials: where they appear (mlflow_runs.json)
    state_api: bool = True                 # Ray's state API answers (a dashboard runs): ray_setup.state_api_available


@dataclass(frozen=True)
class HeadRuns:
    """A trial's MLflow runs: head key ('poxm/p=10/lam=0.9') -> run id, on the server `uri`."""
    uri: str
    heads: dict[str, str]


@dataclass(frozen=True)
class JobMember:
    """One trial of a job."""
    name: str
    spec: dict                             # TrialSpec.to_dict()
    prepared: PreparedAt | PreparedRef
    head_keys: tuple[str, ...]             # its heads' keys, in spec order
    runs: HeadRuns | None = None


@dataclass(frozen=True)
class WorkerJob:
    name: str                              # the job's name (the trial's, or the pack's)
    members: tuple[JobMember, ...]
    config: dict                           # the sweep config as given
    run_root: str
    cache_dir: str
    storage: str | None
    sweep_id: str
    cpus: float                            # resources.cpus_per_trial: the worker's torch threads
    fit_start: float                       # when the job's trainer.fit began (time.time())
    crash: str | None = None
    oom: str | None = None
    mlflow_uri: str | None = None          # with points_file: each trial reads its runs there when it starts
    points_file: str | None = None         # (orchestration.stages.trial.wait_for_runs; SweepInputs.mlflow_points_file)


def _head_key(h: dict) -> str:
    from poxm_core.training import HeadSpec
    return HeadSpec(h["method"], h["p"], h["lam"]).key


def worker_job(sweep: SweepInputs, name: str, trials: list[str], fit_start: float) -> WorkerJob:
    """The WorkerJob of job `name` running `trials` (their order kept), with each head's MLflow run."""
    # the runs still being created beside the trials: each trial reads its own from the file
    pending = sweep.mlflow_uri is not None and sweep.mlflow_points is None and sweep.mlflow_points_file is not None
    members = []
    for n in trials:
        spec = sweep.specs[n]
        keys = tuple(_head_key(h) for h in spec["heads"])
        runs = None
        if sweep.mlflow_uri is not None and not pending:
            pts = sweep.mlflow_points or {}
            runs = HeadRuns(sweep.mlflow_uri, {k: pts[p] for k, p in head_points(spec).items()})
        members.append(JobMember(n, spec, sweep.prepared[n], keys, runs))
    return WorkerJob(name=name, members=tuple(members), config=sweep.config, run_root=sweep.run_root,
                     cache_dir=sweep.cache_dir, storage=sweep.storage, sweep_id=sweep.sweep_id,
                     cpus=sweep.resources.cpus_per_trial, fit_start=fit_start, crash=sweep.crash,
                     oom=sweep.oom,
                     mlflow_uri=sweep.mlflow_uri if pending else None,
                     points_file=sweep.mlflow_points_file if pending else None)


def head_points(spec: dict) -> dict[str, str]:
    """A trial's heads (TrialSpec.to_dict()): head key -> its grid point's key (tracking.point_key)."""
    from orchestration.tracking.runs import point_key
    return {_head_key(h): point_key({"dataset": spec["dataset"], "variant": spec["variant"], "method": h["method"],
                                     "p": h["p"], "lam": h["lam"], "seed": spec["seed"]})
            for h in spec["heads"]}
