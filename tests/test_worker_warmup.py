"""A sweep's Ray Train workers import torch and poxm's training code on a thread from the moment
their process starts (orchestration.worker_warmup)."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_hook_env_names_the_start_function(monkeypatch):
    from ray._private.ray_constants import WORKER_PROCESS_SETUP_HOOK_ENV_VAR

    from orchestration import worker_warmup as w
    monkeypatch.delenv(w.SWITCH_ENV, raising=False)
    env = w.hook_env()
    assert list(env) == [WORKER_PROCESS_SETUP_HOOK_ENV_VAR]
    module, _, fn = env[WORKER_PROCESS_SETUP_HOOK_ENV_VAR].rpartition(".")
    assert getattr(importlib.import_module(module), fn) is w.start      # what Ray's default_worker will call
    monkeypatch.setenv(w.SWITCH_ENV, "0")
    assert w.hook_env() == {}


def test_start_imports_the_modules_on_a_thread_without_cuda():
    code = ("import sys, threading, orchestration.worker_warmup as w\n"
            "before = [m for m in w.MODULES if m in sys.modules]\n"
            "w.start()\n"
            "[t.join() for t in threading.enumerate() if t.name == w.THREAD_NAME]\n"
            "import torch\n"
            "print(before, all(m in sys.modules for m in w.MODULES), torch.cuda.is_initialized())\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "True", "False"]
