"""Ray for a sweep: connect or start it (quiet unless --verbose), the environment its workers may be
handed, and how many trials fit at once on its resources.
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import sys

from orchestration.stages.report_pace import POLL_ENV
from poxm_core.config.schema import SweepConfig
from poxm_core.common.errors import PoxmInputError


def ray_init(address: str | None, verbose: bool) -> bool:
    """Connect to `address` / $RAY_ADDRESS, else start a local Ray; True if this call started it."""
    import ray
    if ray.is_initialized():
        return False
    if not verbose:
        quiet_libraries()
    addr = address or os.environ.get("RAY_ADDRESS") or None
    if not addr:
        # Tune + Train start ~8 Python workers at once; with the default start-up concurrency (= CPUs)
        # a 2-core machine's raylet pushes a "4x the maximum expected startup concurrency" warning to
        # the terminal (printed by the driver whatever log_to_driver says). 4 per core keeps it quiet.
        os.environ.setdefault("RAY_worker_maximum_startup_concurrency", str(4 * (os.cpu_count() or 1)))
    extra = {}
    if addr and worker_env():     # a remote cluster's workers do not inherit this shell: allow-listed vars only
        extra["runtime_env"] = {"env_vars": worker_env()}
    import signal
    ours = signal.getsignal(signal.SIGTERM)     # poxm's handler (orchestration.cli), before Ray replaces it
    kwargs = dict(address=addr, include_dashboard=False, log_to_driver=verbose,
                  logging_level=logging.INFO if verbose else logging.WARNING, **extra)
    if addr and is_loopback_address(addr):
        # Ray turns a loopback address into this machine's interface address (and the driver's own node
        # address with it): the head that passed the pre-flight check on 127.0.0.1 would be joined
        # elsewhere. Ray's single-machine mode keeps both on 127.0.0.1.
        with loopback_only():
            ray.init(**kwargs, _node_ip_address=LOOPBACK)
    elif addr:
        ray.init(**kwargs)
    else:
        # A local Ray's processes (raylet, runtime-env agent, every worker) inherit this process's
        # environment, and the runtime-env agent writes what it sees to its log in plain text. Secrets
        # are held out of that inheritance: the driver keeps them, Ray never sees them.
        with secrets_withheld(), loopback_only():
            ray.init(**kwargs, _node_ip_address=LOOPBACK)
    _restore_sigterm_handler(ours)
    return True


LOOPBACK = "127.0.0.1"


def is_loopback_address(address: str) -> bool:
    """True for `127.0.0.1:PORT` or `localhost:PORT` (a `ray://` or `auto` address is not)."""
    if "://" in address:
        return False
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    return host in ("127.0.0.1", "localhost")
# Ray's switch for its single-machine mode (the default on macOS and Windows): the node's address is
# the loopback, and every Ray process (GCS, raylet, runtime-env agent, the driver's and each worker's
# gRPC server) listens on it alone. Ray 2.60 has no other setting for where its gRPC servers listen:
# without it they listen on every interface, and `_node_ip_address="127.0.0.1"` alone is turned back
# into the machine's network address.
LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def loopback_only(environ=None):
    """Within the block, a Ray started here binds to 127.0.0.1 only: the processes it starts inherit
    LOCAL_ONLY_ENV=0, and this process's already imported Ray reads the same. Restored on exit (a later
    `--address` in this process connects to a cluster as usual)."""
    environ = os.environ if environ is None else environ
    before = environ.get(LOCAL_ONLY_ENV)
    environ[LOCAL_ONLY_ENV] = "0"
    consts = sys.modules.get("ray._private.ray_constants")
    old = getattr(consts, "ENABLE_RAY_CLUSTER", None)
    if consts is not None:
        consts.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if before is None:
            environ.pop(LOCAL_ONLY_ENV, None)
        else:
            environ[LOCAL_ONLY_ENV] = before
        if consts is not None and old is not None:
            consts.ENABLE_RAY_CLUSTER = old


def start_train_coordinator() -> None:
    """Start the cluster's one actor that Ray Train's jobs ask for their resources before they start their
    workers (Ray Data's AutoscalingCoordinator, detached, created by the first job that asks). Created
    here, while Ray Tune starts, the first jobs do not wait for its process to start and import (a
    quarter of a job's time from `fit` to the worker function; docs/performance.md). Ray Train creates the
    same actor (by name) if this fails; nothing depends on it here."""
    try:
        from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import (
            get_or_create_autoscaling_coordinator)
        get_or_create_autoscaling_coordinator()
    except Exception:       # noqa: BLE001 -- a private Ray function: without it, Ray Train creates the actor
        pass


# Ray Train's controller takes ONE report from its worker per poll (every 2 s by default) and the worker's
# next report waits for it; trials therefore pace their reports by it (orchestration/stages/report_pace.py). Ray
# reads the interval from this variable; a remote cluster's workers are handed it when it is set
# (WORKER_ENV_ALLOW). poxm leaves Ray's default: with 0.2 s, one run of the four-dataset benchmark did not
# return after its last trial had finished (docs/performance.md).
TRAIN_POLL_ENV = POLL_ENV
# Ray Train's preemption watcher: off in each of the sweep's jobs unless set (orchestration.stages.trial.drive_trial)
PREEMPTION_WATCHER_ENV = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"

def _restore_sigterm_handler(ours) -> None:
    """ray.init replaces the SIGTERM handler (with one that exits at once: `sys.exit(15)`, and a native
    one that dumps a C++ stack). Put poxm's back: SIGTERM then ends the sweep like Ctrl-C (trials
    stop, Ray shuts down, one line, exit 130)."""
    import signal
    import threading
    if callable(ours) and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, ours)


def is_secret_name(name: str) -> bool:
    """True for environment variable names that look like credentials (tokens, keys, passwords)."""
    return any(h in name.upper() for h in _SECRET_HINTS)


@contextlib.contextmanager
def secrets_withheld(environ=None):
    """Within the block, secret-looking variables (is_secret_name) are absent from `environ`
    (os.environ): processes started inside it do not inherit them. Restored on exit."""
    environ = os.environ if environ is None else environ
    held = {k: environ.pop(k) for k in [k for k in environ if is_secret_name(k)]}
    try:
        yield sorted(held)
    finally:
        environ.update(held)


# Environment variables a Ray worker may be handed (runtime_env is logged in plain text, readable by
# anyone on the cluster): poxm's own settings and thread counts, never tokens, passwords or keys.
# On a local Ray the workers inherit the driver's environment and no runtime_env is set at all.
WORKER_ENV_ALLOW = ("POXM_DATA_ROOT", "POXM_GIT_COMMIT", "POXM_INJECT_CRASH_ONCE", "POXM_INJECT_HOLD",
                    "POXM_VALIDATION_OVERLAP",
                    "POXM_CUDA_GRAPHS", "POXM_EVAL_THREADS", "OMP_NUM_THREADS",
                    "MKL_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG", TRAIN_POLL_ENV, PREEMPTION_WATCHER_ENV)
_SECRET_HINTS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH")


def worker_env(environ=None) -> dict[str, str]:
    """The allow-listed, non-secret environment variables for Ray's runtime_env (see WORKER_ENV_ALLOW)."""
    environ = os.environ if environ is None else environ
    return {k: environ[k] for k in WORKER_ENV_ALLOW if k in environ and not is_secret_name(k)}


def quiet_libraries() -> None:
    """Ray's and MLflow's start-up warnings, INFO lines and colours off (`--verbose` keeps them)."""
    import warnings
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")    # Tune's own tables: our progress bar replaces them
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")   # its FutureWarning on every worker
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")   # MLflow resets its loggers on import
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    if not sys.stderr.isatty():
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")            # no ANSI codes in log files
        os.environ.setdefault("NO_COLOR", "1")
    for name in ("ray", "ray.tune", "ray.train", "ray.data", "mlflow", "alembic", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # MLflow logs a traceback for a database error that it then raises: poxm says it in one line (cli.py)
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    # "Token authentication is enabled for this Ray cluster": true and expected for the local Ray we start
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    for mod in ("ray", "mlflow", "pydantic"):
        warnings.filterwarnings("ignore", category=FutureWarning, module=mod)
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=mod)


def bytecode_hint(module: str = "torch", environ=None) -> str | None:
    """A one-line note when this Python writes no bytecode (PYTHONDONTWRITEBYTECODE) and `module` has
    none where Python looks for it (next to its source, or under PYTHONPYCACHEPREFIX): then every process
    of a sweep compiles it from source again, seconds each for torch (docs/performance.md). None otherwise."""
    import importlib.util
    environ = os.environ if environ is None else environ
    if not environ.get("PYTHONDONTWRITEBYTECODE"):
        return None
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    if os.path.exists(importlib.util.cache_from_source(spec.origin)):
        return None
    return (f"Python writes no bytecode here (PYTHONDONTWRITEBYTECODE) and {module} has none, so each of the "
            "sweep's processes compiles it from source; compile once: export PYTHONPYCACHEPREFIX=DIR; "
            "python -m compileall -q SITE_PACKAGES")


def state_api_available() -> bool:
    """Whether the connected Ray serves its state API (list and get actors, placement groups): only
    when its dashboard runs, never on the local Ray ray_init starts (include_dashboard=False). Ray
    Train's placement-group cleaner depends on it (orchestration.stages.trial.leave_out_pg_cleaner). When
    in doubt, True."""
    try:
        from ray._private.worker import get_dashboard_url
        return bool(get_dashboard_url())
    except Exception:       # noqa: BLE001 -- a Ray without this private helper: keep Ray Train's default
        return True


def check_resources(cfg: SweepConfig, local: bool) -> int:
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
