"""The run directory of a sweep: where every stage reads and writes (docs/orchestration.md).

    <runs_dir>/<name>-<hash>/
      config.yaml          resolved sweep config
      sweep.json           name, hash, git commit, cache dir, grid points, trial names
      driver.json          pid/host of the driver process while `run`/`resume` is active
      driver.lock          the driver lock (an OS file lock held by the running driver)
      mlflow_runs.json     MLflow ids: experiment, parent run, one run per grid point
      trials/<trial>/      the trainer's out_dir (rows.csv, summary.json, test_instances.npz, checkpoints/)
                           + state.json, done.json
      mlflow.db, mlartifacts/   embedded MLflow store (default)
      results/             rows.csv, prepare.csv, selection.csv, test_instances.npz, sweep_summary.json
    (Ray Tune's and Ray Train's state of a local sweep lives in the user's state folder, never here:
    orchestration/cluster/ray_state.py; a cluster's goes to resources.storage_path)
      report/              written by orchestration.report.build_report

The name is stable: `<name>-<hash>` with hash = config_hash of the resolved config minus the keys
that do not change results (mlflow, resources, runs_dir, the declared claims; the selection criterion counts as the
value run ids were first computed with, SNIS). Never a timestamp, so a rerun or resume
finds the same directory, the same Ray experiment and the same MLflow runs.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from poxm_core.common import atomic
from poxm_core.config.schema import SweepConfig, config_hash, resolved_dict, resolved_yaml
from poxm_core.common.errors import PoxmInputError
from orchestration.run_trust import (  # noqa: F401 -- a run directory is data: these are its rules, kept importable here
    load_run_config, recorded_settings, refuse_links, same_storage, set_user_settings, trusted_cache_dir,
    user_plugins, user_storage_path)

# Keys of the resolved config that do not change any number of the sweep: not in its identity.
NON_IDENTITY_KEYS = ("mlflow", "resources", "runs_dir", "plugin_path", "claims")
# The selection criterion changes no trained number either (`poxm report` selects again), but run ids
# were first computed with it inside: the identity keeps the value they were computed with, so a sweep
# whose criterion changes continues the same run directory instead of training everything again.
IDENTITY_SELECTION = {"criterion": "SNIS"}


def sweep_hash(cfg: SweepConfig) -> str:
    d = resolved_dict(cfg)
    for k in NON_IDENTITY_KEYS:
        d.pop(k, None)
    if "selection" in d:
        d["selection"] = dict(IDENTITY_SELECTION)
    return config_hash(d)


def sweep_id(cfg: SweepConfig) -> str:
    """'<name>-<hash>': the run directory's name, the MLflow experiment's default name."""
    return f"{cfg.name}-{sweep_hash(cfg)}"


def write_json(path: Path, obj) -> None:
    atomic.write_text(path, json.dumps(obj, indent=1, sort_keys=False, default=str) + "\n")


def write_selection(run_dir: str | os.PathLike, frame) -> Path:
    """results/selection.csv, a run's one selection file, from `RunSelection.frame()`: every choice (the
    run's criterion's, the paper's criterion's beside it, the oracle's), one row per (dataset, variant,
    method, seed, selection), its `criterion` column naming the criterion that chose it (read back with
    `RunSelection.from_frame`)."""
    path = RunDir(Path(run_dir)).selection_csv
    atomic.write_text(path, frame.to_csv(index=False))
    return path


def read_json(path: Path, default=None):
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return default
    except json.JSONDecodeError as exc:
        raise PoxmInputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None


def git_commit() -> str:
    """The commit of the checkout this package runs from ('+dirty' if it has changes), else 'unknown'."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return os.environ.get("POXM_GIT_COMMIT", "unknown")
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("POXM_GIT_COMMIT", "unknown")


@dataclass(frozen=True)
class RunDir:
    """Paths of one run directory (all absolute)."""
    root: Path

    @classmethod
    def for_config(cls, cfg: SweepConfig, runs_dir: str | os.PathLike | None = None) -> "RunDir":
        base = Path(runs_dir if runs_dir is not None else cfg.runs_dir).expanduser().resolve()
        root = (base / sweep_id(cfg)).resolve()
        if root.parent != base:       # the config loader rejects such names; this keeps any other caller inside
            raise PoxmInputError(f"config key 'name': {cfg.name!r} would put the run directory outside runs_dir "
                                 f"{base}; use a plain name such as 'my-sweep'")
        return cls(root)

    @classmethod
    def existing(cls, path: str | os.PathLike) -> "RunDir":
        """A run directory given on the command line: it must hold config.yaml and sweep.json."""
        root = Path(path).expanduser().resolve()
        if not root.is_dir():
            raise PoxmInputError(f"{path}: run directory not found")
        for f in ("config.yaml", "sweep.json"):
            if not (root / f).is_file():
                raise PoxmInputError(f"{path}: not a poxm run directory (no {f}; expected <runs_dir>/<name>-<hash>)")
        refuse_links(root)
        return cls(root)

    # --- files
    config = property(lambda self: self.root / "config.yaml")
    config_input = property(lambda self: self.root / "config.input.yaml")
    sweep = property(lambda self: self.root / "sweep.json")
    driver = property(lambda self: self.root / "driver.json")
    driver_lock = property(lambda self: self.root / "driver.lock")
    mlflow_runs = property(lambda self: self.root / "mlflow_runs.json")
    mlflow_db = property(lambda self: self.root / "mlflow.db")
    mlartifacts = property(lambda self: self.root / "mlartifacts")
    trials = property(lambda self: self.root / "trials")
    results = property(lambda self: self.root / "results")
    report = property(lambda self: self.root / "report")
    rows_csv = property(lambda self: self.root / "results" / "rows.csv")
    prepare_csv = property(lambda self: self.root / "results" / "prepare.csv")
    selection_csv = property(lambda self: self.root / "results" / "selection.csv")
    summary_json = property(lambda self: self.root / "results" / "sweep_summary.json")

    def trial(self, name: str) -> Path:
        return self.trials / name

    @property
    def config_source(self) -> Path:
        """The file the sweep's config reloads from: config.input.yaml (see write_config), else config.yaml."""
        return self.config_input if self.config_input.is_file() else self.config

    def load_config(self, overrides: list[str] | None = None) -> SweepConfig:
        """The sweep's config, from the keys as given, as data: its plugins are imported only when the
        user supplied them, its storage path is used only when the user gave the same (load_run_config)."""
        return load_run_config(self, overrides)

    def recorded(self) -> dict:
        """What the run's config names that poxm does not take on its say-so (plugins, plugin_path,
        resources.storage_path), read as plain YAML: nothing imported, nothing validated."""
        return recorded_settings(self.config_source)

    def read_sweep(self) -> dict:
        """sweep.json as a mapping; anything else in it is one line naming the file."""
        sw = read_json(self.sweep, {})
        if not isinstance(sw, dict):
            raise PoxmInputError(f"{self.sweep}: not a poxm sweep record (a JSON object expected, got "
                                 f"{type(sw).__name__})")
        return sw

    def cache_dir(self) -> Path:
        """The prepare cache this sweep continues with (run_trust.trusted_cache_dir)."""
        return trusted_cache_dir(self.root, self.read_sweep().get("cache_dir"))


# --------------------------------------------------------------------------------------------
# per-trial state files (read by `poxm status` without Ray)

def trial_state(trial_dir: Path) -> dict:
    """{'state': 'done'|'running'|'errored'|'pending', ...} from done.json / state.json."""
    done = read_json(trial_dir / "done.json")
    if done is not None:
        return {"state": "done", **done}
    st = read_json(trial_dir / "state.json")
    if st is None:
        return {"state": "pending"}
    return st


def recomputed_trials(rd: RunDir, names: list[str]) -> list[str]:
    """Trials that finished once (timing.json records an attempt, written only when a trial ends) but
    have no done.json now: removed to recompute the trial (the advice for damaged result files). Ray
    Tune's saved experiment counts their jobs as finished, so `poxm resume` fits a fresh Tuner for them
    (orchestration.stages.merge.tune_covers); the other trials' done.json keeps them as they are."""
    out = []
    for n in names:
        if (rd.trial(n) / "done.json").is_file():
            continue
        try:
            timing = read_json(rd.trial(n) / "timing.json")
        except PoxmInputError:
            timing = None
        if isinstance(timing, dict) and isinstance(timing.get("attempts"), list) and timing["attempts"]:
            out.append(n)
    return out


def set_trial_state(trial_dir: Path, state: str, **extra) -> None:
    prev = read_json(trial_dir / "state.json", {}) or {}
    prev.update(extra)
    prev.update({"state": state, "updated": time.time()})
    write_json(trial_dir / "state.json", prev)


# --------------------------------------------------------------------------------------------
# the driver lock: one `run`/`resume` per run directory at a time

def lock_held(rd: RunDir) -> bool:
    """Whether a driver holds the run directory's OS lock (driver.lock) now: the one truth about a live
    driver. Tried with a shared, non-blocking flock that is let go at once; no driver.lock: no driver."""
    import fcntl
    if rd.root in _held:
        return True
    try:
        fd = os.open(rd.driver_lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:              # a file system without flock: say not held rather than guess
        return False
    finally:
        os.close(fd)             # closing lets go of a lock it took
    return False


def driver_alive(rd: RunDir) -> dict | None:
    """driver.json of the driver that holds the run directory's lock now, else None. A driver.json left
    by a killed driver (or written by anyone) names no live driver when the lock is free."""
    if not lock_held(rd):
        return None
    try:
        d = read_json(rd.driver)
    except PoxmInputError:       # being rewritten, or odd: the lock says a driver runs
        d = None
    return d if isinstance(d, dict) else {"pid": "?"}


_held: dict[Path, int] = {}      # run directory -> the open descriptor of its driver.lock (this process)


def acquire_driver(rd: RunDir) -> None:
    """Take the run directory's driver lock: an exclusive OS lock (flock) on `driver.lock`, held until
    release_driver or this process's end (a killed driver's lock goes with it: nothing stale to clean
    up), then driver.json for `poxm status`. Two drivers reaching it together: exactly one wins. A
    driver.json that outlived its driver is stale when the lock is free, whatever pid it names."""
    import fcntl
    if rd.root in _held:                    # this process holds it already (a sweep extended, then run)
        write_json(rd.driver, {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()})
        return
    refuse_links(rd.root)                   # nothing written below may follow a link out of the run directory
    fd = os.open(rd.driver_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        try:
            live = read_json(rd.driver) or {}
        except PoxmInputError:
            live = {}
        pid = f" (pid {live['pid']})" if isinstance(live, dict) and live.get("pid") else ""
        raise PoxmInputError(f"{rd.root}: run directory in use by a running driver{pid}; "
                             "wait for it or stop it first") from None
    _held[rd.root] = fd
    try:
        write_json(rd.driver, {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()})
    except BaseException:
        release_driver(rd)
        raise


def remove_tmp_leftovers(rd: RunDir) -> list[Path]:
    """Delete the temporary files and folders (`.x.tmp-PID`, `.tmp-epoch_XXXX-PID`, `.report.tmp-*`) that a
    killed driver or trial left in the run directory. Called with the driver lock held and before any
    trial starts, so nothing is writing them. Returns what was removed."""
    import shutil
    gone = []
    for pattern in ("*", "results/*", "trials/*/*", "trials/*/checkpoints/*"):
        for p in rd.root.glob(pattern):
            n = p.name
            if n.startswith(".") and (".tmp-" in n or n.endswith(".tmp")):
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
                gone.append(p)
    return gone


def release_driver(rd: RunDir) -> None:
    try:
        d = read_json(rd.driver)
    except PoxmInputError:
        d = None
    if isinstance(d, dict) and d.get("pid") == os.getpid():
        rd.driver.unlink(missing_ok=True)
    fd = _held.pop(rd.root, None)
    if fd is not None:
        os.close(fd)                        # closing the descriptor releases the flock


def config_input(cfg: SweepConfig) -> dict:
    """The keys as the user gave them (file + overrides), without the defaults filled in.

    Validation that rejects a setting a method ignores looks at which keys were given, so what is
    reloaded (resume, Ray workers) must be this, not the resolved dump where every key is present."""
    return cfg.model_dump(mode="json", exclude_unset=True)


def write_config(rd: RunDir, cfg: SweepConfig) -> None:
    """config.yaml: fully resolved (for people and the report); config.input.yaml: what reloads it."""
    import yaml
    atomic.write_text(rd.config, resolved_yaml(cfg))
    atomic.write_text(rd.config_input, "# keys as given; config.yaml has every default resolved\n"
                 + yaml.safe_dump(config_input(cfg), sort_keys=False, default_flow_style=None))
