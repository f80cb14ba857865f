"""The plan stage of a sweep: config -> run directory, trials, grid points (no Ray, no MLflow).

`plan_sweep` checks everything that can be checked without data or Ray (dataset and method names,
method settings, p against the candidates, file datasets exist), so bad input fails before anything
starts; `write_plan` records config.yaml, config.input.yaml and sweep.json; `plan_from_run_dir`
reloads the plan of an existing run directory (`poxm resume`, `poxm report`).

A run directory keeps the name it was created with. `poxm resume RUN_DIR --add-seeds` (orchestration.stages.merge)
extends its config's `seeds`; sweep.json then records the seeds the name was hashed with (`id_seeds`),
and the plan's `id` (storage, MLflow experiment and parent run) stays the directory's name.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestration.cluster.storage import Storage, sweep_storage
from orchestration.rundir import RunDir, git_commit, sweep_hash, sweep_id, write_config, write_json
from poxm_core.config.schema import SweepConfig
from poxm_core.common.errors import PoxmInputError

@dataclass
class SweepPlan:
    cfg: SweepConfig
    rd: RunDir
    cache_dir: Path
    specs: list = field(default_factory=list)       # poxm_core.training.TrialSpec
    id_seeds: list[int] | None = None               # seeds the run directory's name was hashed with, when seeds were added

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.specs]

    @property
    def id(self) -> str:
        """The sweep's id: its run directory's name ('<name>-<hash>'), kept when seeds are added."""
        return self.rd.root.name

    @property
    def storage(self) -> Storage | None:
        """Where nodes exchange files (resources.storage_path), None: the run directory itself."""
        return sweep_storage(self.cfg.resources.storage_path, self.id)

    def grid(self) -> list[dict]:
        """Every grid point with the trial that trains it."""
        return [{"dataset": s.dataset, "variant": s.variant, "method": h.method, "p": h.p, "lam": h.lam,
                 "seed": s.seed, "trial": s.name} for s in self.specs for h in s.heads]


def plan_sweep(cfg: SweepConfig, runs_dir: str | os.PathLike | None = None,
               cache_dir: str | os.PathLike | None = None, check_data: bool = True,
               run_dir: RunDir | None = None) -> SweepPlan:
    """The sweep of `cfg`: run directory, cache, trials. Checks dataset/method names and settings and
    (check_data) that file datasets exist, so bad input fails here, before Ray starts. `run_dir`: an
    existing run directory whose config `cfg` extends (its name no longer hashes from `cfg`)."""
    from poxm_core.training import trial_specs

    base = Path(runs_dir if runs_dir is not None else cfg.runs_dir).expanduser().resolve()
    cfg = cfg.model_copy(update={"runs_dir": str(base)})
    rd = run_dir if run_dir is not None else RunDir.for_config(cfg, base)
    cache = Path(cache_dir).expanduser().resolve() if cache_dir is not None else base / "cache"
    from poxm_core.config.schema import default_data_root
    from poxm_core.data import spec_for
    from poxm_core.data.registry import declared_files, locate_files
    from poxm_core.methods import get_method
    root = Path(cfg.data_root) if cfg.data_root else default_data_root()
    for d in cfg.datasets:                   # input errors now, not after Ray has retried a trial
        spec = spec_for(d)
        if d.logged is not None and check_data:
            from poxm_core.data.logged_dataset import logged_files
            logged_files(d.logged, root)
        elif d.format is not None and check_data:
            declared_files(d, root)
        elif spec.reader is None and check_data:
            locate_files(spec, Path(d.path) if d.path else root / spec.folder)
    for name, mc in cfg.methods.items():
        try:
            get_method(name).validate(mc)
        except PoxmInputError as exc:     # named at its file line (or override), like the config's own checks
            raise cfg.located(exc) from None
    from orchestration.report.claims_family import declare_claims
    cfg = declare_claims(cfg, fresh=not rd.config.is_file())     # the claims family, declared before any trial
    specs = trial_specs(cfg, cfg.group_by)
    _check_p(cfg, specs)
    store = sweep_storage(cfg.resources.storage_path, rd.root.name)
    if store is not None:
        store.exists("")                 # an unknown scheme or bad URI: an input error now, not in a worker
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise PoxmInputError(f"config: two trials share a name ({names}); dataset/variant names must be distinct")
    return SweepPlan(cfg, rd, cache, specs)


def _labels_at_most(d) -> int | None:
    """The most labels dataset `d` can have, where that is known before reading it: a synthetic dataset's
    n_labels, else the largest of a registered dataset's published shapes; None for a dataset of your own."""
    if d.synthetic is not None:
        return d.synthetic.n_labels or None
    if d.format is not None or d.logged is not None:
        return None
    from poxm_core.data import spec_for
    spec = spec_for(d)
    if spec.reader is not None:
        return None
    shapes = [spec.L, *(s.L for s in spec.other_shapes)]
    return None if any(L is None for L in shapes) else max(shapes)


def _check_p(cfg: SweepConfig, specs) -> None:
    """p (the action selector's size) cannot exceed the K = model.n_candidates candidates C(x), nor a
    synthetic dataset's label count; POTEC's k (label clusters) cannot exceed the labels. Known now, so
    not found inside a trial after Ray has started."""
    from poxm_core.methods import get_method
    for s in specs:
        d = cfg.dataset(s.dataset)
        n_labels = d.synthetic.n_labels if d.synthetic is not None and d.synthetic.n_labels else None
        K = min(cfg.model.n_candidates, n_labels) if n_labels else cfg.model.n_candidates
        L = _labels_at_most(d)
        for h in s.heads:
            key = get_method(h.method).size_key
            if h.p is not None and key != "p" and L is not None and h.p > L:        # POTEC's k: clusters of labels
                valid = sorted(x for x in (getattr(cfg.methods[h.method], key, None) or []) if x <= L) or [L]
                raise PoxmInputError(f"config key 'methods.{h.method}.{key}': {key}={h.p} clusters exceed the {L} "
                                     f"labels of dataset {s.dataset}; use {key} <= {L}, e.g. {key}: {valid}")
            if h.p is not None and h.p > K and get_method(h.method).size_key == "p":   # not POTEC's k
                valid = sorted(x for x in (cfg.methods[h.method].p or []) if x <= K) or [K]
                raise PoxmInputError(
                    f"config key 'methods.{h.method}.p': p={h.p} exceeds the {K} candidates C(x) of dataset "
                    f"{s.dataset} (model.n_candidates={cfg.model.n_candidates}"
                    + (f", synthetic.n_labels={n_labels}" if n_labels else "")
                    + f"); use p <= {K}, e.g. p: {valid}"
                    + (f" or model.n_candidates={h.p}" if not n_labels or h.p <= n_labels else ""))


def write_plan(plan: SweepPlan) -> None:
    """sweep.json, then config.yaml and config.input.yaml (each atomic). sweep.json goes first: with
    added seeds it names the seeds the directory was hashed with, so a write cut short between the
    files still reloads (the old config with the old id seeds, or the new one with them)."""
    from orchestration.cluster.ray_state import new_state_key

    rd = plan.rd
    rd.root.mkdir(parents=True, exist_ok=True)
    old = rd.read_sweep()
    id_seeds = plan.id_seeds
    tune_trials = old.get("tune_trials") if old else None    # what the Ray Tune experiment under ray/ holds
    if old and old.get("hash") != sweep_hash(plan.cfg):
        tune_trials = tune_trials or old.get("trials", [])
        had = old.get("seeds")
        if id_seeds is None and old.get("id_seeds") is not None:
            raise PoxmInputError(f"{rd.root}: seeds {[s for s in had if s not in old['id_seeds']]} were added to "
                                 f"this sweep; continue it with `poxm resume {rd.root}`")
        if id_seeds is None or list(plan.cfg.seeds[:len(id_seeds)]) != list(id_seeds):
            raise PoxmInputError(f"{rd.root}: holds sweep hash {old.get('hash')}, not {sweep_hash(plan.cfg)}")
    write_json(rd.sweep, {"name": plan.cfg.name, "hash": sweep_hash(plan.cfg), "id": plan.id,
                          "git_commit": git_commit(), "cache_dir": str(plan.cache_dir),
                          "group_by": plan.cfg.group_by, "seeds": list(plan.cfg.seeds),
                          **({"id_seeds": id_seeds} if id_seeds is not None else {}),
                          **({"tune_trials": tune_trials} if tune_trials is not None else {}),
                          "trials": plan.names, "grid": plan.grid(),
                          # names this run's Ray state folder outside the run directory (orchestration.cluster.ray_state)
                          "state_key": (old or {}).get("state_key") or new_state_key(),
                          "created": old.get("created", time.time()) if old else time.time()})
    write_config(rd, plan.cfg)


def plan_from_run_dir(run_dir: str | os.PathLike) -> SweepPlan:
    rd = RunDir.existing(run_dir)
    cfg = rd.load_config()
    sw = rd.read_sweep()
    if sw.get("merged_from"):
        raise PoxmInputError(f"{run_dir}: a report merged from {len(sw['merged_from'])} runs, not a sweep; "
                             f"rebuild it with `poxm report {run_dir}`")
    id_seeds = sw.get("id_seeds")
    id_cfg = cfg if id_seeds is None else cfg.model_copy(update={"seeds": list(id_seeds)})
    if RunDir.for_config(id_cfg, rd.root.parent).root != rd.root:
        raise PoxmInputError(f"{run_dir}: its config.yaml hashes to {sweep_id(id_cfg)}, not {rd.root.name} "
                             "(was config.yaml edited? start a new sweep with `poxm run`)")
    plan = plan_sweep(cfg, rd.root.parent, rd.cache_dir(), run_dir=rd)     # the recorded cache only when the user gives it
    plan.id_seeds = id_seeds
    return plan



# --------------------------------------------------------------------------------------------
# packs: several trials run one after another by one Ray Train job (docs/orchestration.md, "Packs")

def trials_per_job(setting: int | None, n_trials: int, slots: int, alike: bool = False) -> int:
    """Trials per Ray Train job: `resources.trials_per_job` when set, else (auto) enough that the
    sweep makes about 2 jobs per slot (slots = trials that fit at once): each slot pays Ray Train's
    start-up about twice, and the second round evens out jobs of unequal length. When the trials are
    `alike` (one dataset, the same heads: about the same length), one job per slot: their jobs would
    end together, and the whole second round would start up at once while nothing computes
    (docs/performance.md, "Packs")."""
    if setting is not None:
        return max(1, int(setting))
    return max(1, math.ceil(n_trials / max(1, (1 if alike else 2) * slots)))


def trials_alike(specs: list) -> bool:
    """One dataset and the same heads in every trial (so about the same length)."""
    return len({(s.dataset, tuple(h.key for h in s.heads)) for s in specs}) <= 1


def pack_trials(specs: list, per_job: int) -> list[list]:
    """The trials in ceil(n / per_job) jobs of at most `per_job` trials, sizes differing by at most one
    (the longer jobs first), ordered by dataset, then seed, then config order (variants, methods), so
    that a job's trials share their prepared data where they can."""
    rank: dict = {}
    for s in specs:
        rank.setdefault(s.dataset, len(rank))
    order = sorted(range(len(specs)), key=lambda i: (rank[specs[i].dataset], specs[i].seed, i))
    ordered = [specs[i] for i in order]
    n_jobs = math.ceil(len(ordered) / max(1, per_job))
    out, a = [], 0
    for j in range(n_jobs):
        size = len(ordered) // n_jobs + (1 if j < len(ordered) % n_jobs else 0)
        out.append(ordered[a:a + size])
        a += size
    return out


def pack_name(members: list, index: int) -> str:
    """A job's name (its Tune trial and Train run): the trial's own name for a job of one trial (the
    layout without packing), else 'pack<index>-<first trial>'."""
    return members[0].name if len(members) == 1 else f"pack{index:03d}-{members[0].name}"
