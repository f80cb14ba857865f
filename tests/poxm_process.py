"""The `poxm` command as a real subprocess, for the tests that run, kill and resume sweeps."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
POXM = [sys.executable, "-m", "orchestration.cli"]


_NOT_PASSED = ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "POXM_INJECT_CRASH_ONCE")


def poxm_env() -> dict:
    """This environment without what would point the subprocess at another Ray, MLflow store or crash test."""
    env = dict(os.environ)
    for k in _NOT_PASSED:
        env.pop(k, None)
    return env


def stop_group(proc: subprocess.Popen, grace_s: float = 30) -> None:
    """SIGTERM the process group, SIGKILL it if it has not ended after `grace_s` (a loaded machine can
    keep a graceful shutdown waiting)."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


def run_until_first_trial_then_kill(config: Path, runs: Path, deadline_s: float = 180) -> Path:
    """`poxm run CONFIG` one trial at a time; SIGKILL its whole group as soon as one trial has written
    done.json. Returns that trial's folder (the run directory is its parent's parent)."""
    proc = subprocess.Popen(POXM + ["run", str(config), "resources.max_concurrent_trials=1", "--runs-dir", str(runs),
                                    "--quiet"], cwd=REPO, env=poxm_env(), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline, first = time.time() + deadline_s, None
    while time.time() < deadline and proc.poll() is None:
        done = sorted(runs.glob("*/trials/*/done.json"))
        if done:
            first = done[0].parent
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    if first is None:
        pytest.fail(f"no trial finished before the deadline (rc={proc.poll()}):\n{proc.stdout.read()[-3000:]}")
    proc.wait(timeout=30)
    return first


def tiny_config(name: str, variants_T: list[float], epochs: int, **top) -> dict:
    """A sweep config small enough for a subprocess test: synthetic data (600 train rows), DM and one
    POXM head, one seed, the logging variants alpha 0.5, beta 0 at the given temperatures (A, B, ...)."""
    return {"name": name, "seeds": [0], "device": "cpu",
            "datasets": [{"name": "synthetic",
                          "synthetic": {"n_train": 600, "n_test": 100, "n_features": 40, "n_labels": 30},
                          "variants": [{"name": chr(65 + i), "alpha": 0.5, "beta": 0.0, "T": T}
                                       for i, T in enumerate(variants_T)]}],
            "model": {"dim": 8, "epochs": 2, "n_candidates": 10, "slate_size": 3},
            "training": {"epochs": epochs, "batch_size": 32, "hidden": 8, "mc_slates": 4},
            "methods": {"dm": {}, "poxm": {"p": [5], "lam": [0.9]}}, **top}


def poxm_in_process(capture, *args) -> subprocess.CompletedProcess:
    """`poxm ARGS` through `orchestration.cli.main` in this process, seen as a finished subprocess (exit code,
    stdout, stderr), for the checks of an exit code and a message: no interpreter start-up, no imports
    again. `capture` is pytest's capsys (or capfd). What a command sets for the whole process (poxm's SIGTERM
    handler for run/resume, the user's plugin, storage and tracking settings) is put back afterwards."""
    from orchestration import rundir
    from orchestration.cli import main
    from orchestration.tracking import store
    argv = [str(a) for a in args]
    capture.readouterr()                      # what came before is not this command's
    term = signal.getsignal(signal.SIGTERM)
    held = {k: os.environ.pop(k) for k in _NOT_PASSED if k in os.environ}     # as poxm_env() leaves them out
    try:
        rc = main(argv)
    except SystemExit as exc:                 # argparse's --help and --version
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.environ.update(held)
        signal.signal(signal.SIGTERM, term)
        rundir.set_user_settings()
        store.set_user_uri(None)
    out = capture.readouterr()
    return subprocess.CompletedProcess(POXM + argv, rc, out.out, out.err)
