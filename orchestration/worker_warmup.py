"""A sweep's Ray Train worker begins its heavy imports (torch, poxm_core's data loading and training)
when Ray starts its process, on a thread, while Ray Train is still setting up the job (the worker
actor, its train context, the controller's callbacks: seconds on a busy machine). The worker function
(orchestration.trial.worker_loop) then finds those modules imported, or waits under Python's import
locks for the thread to finish them.

Ray runs a worker process's setup hook before the process takes its first task; Ray Train's
`RunConfig(worker_runtime_env=...)` reaches only the job's worker processes, not the controller nor
Tune's. A hook named by the runtime env's public `worker_process_setup_hook` key is honoured only in
`ray.init`, so the job's workers get the environment variable Ray itself turns that key into
(`hook_env`). No CUDA is touched here: Ray assigns the card (CUDA_VISIBLE_DEVICES) to the actor after
its process has started, and importing torch does not initialise CUDA.
"""
from __future__ import annotations

import importlib
import os
import threading

MODULES = ("torch", "poxm_core.config", "poxm_core.prepare", "poxm_core.training")
THREAD_NAME = "poxm-warm-imports"
SWITCH_ENV = "POXM_WORKER_WARMUP"      # '0': no hook (the imports happen in the worker function)


def start() -> None:
    """The setup hook: import MODULES on a daemon thread and return at once."""
    threading.Thread(target=_import_all, name=THREAD_NAME, daemon=True).start()


def _import_all() -> None:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:     # noqa: BLE001 -- the worker function imports it again and fails there, visibly
            return


def hook_env() -> dict[str, str]:
    """Environment variables for a Ray Train job's worker_runtime_env that run `start` in each worker
    process as it starts; {} where this Ray has no such hook or POXM_WORKER_WARMUP=0 (the imports then
    happen in the worker function)."""
    if os.environ.get(SWITCH_ENV, "1") == "0":
        return {}
    try:
        from ray._private.ray_constants import WORKER_PROCESS_SETUP_HOOK_ENV_VAR
    except ImportError:
        return {}
    return {WORKER_PROCESS_SETUP_HOOK_ENV_VAR: f"{__name__}.start"}
