"""NVIDIA's Multi-Process Service for a sweep whose trials share GPUs (resources.mps).

Without it, processes sharing a card take turns on it: a real-data trial launches thousands of tiny
kernels (2-3 microseconds each) and leaves the card idle most of the time, yet 8 trials on one H100
ran 4x slower each than one alone. Under MPS their kernels run side by side (docs/performance.md).

The daemon must run before any trial process initialises CUDA, so a local sweep starts it before Ray
(and stops it afterwards, only if it started it). On a cluster (`--address`), whoever starts each
node starts its daemon (`nvidia-cuda-mps-control -d` before `ray start`); poxm only checks the config.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

from poxm_core.errors import PoxmInputError

CONTROL = "nvidia-cuda-mps-control"
DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"     # the daemon's and its clients' default (CUDA_MPS_PIPE_DIRECTORY)


def pipe_dir(environ=None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE_DIR)


def daemon_running(environ=None) -> bool:
    """A control daemon listens in the pipe directory (its socket is named 'control')."""
    return (pipe_dir(environ) / "control").exists()


def check_mps_config(device: str, wanted: bool) -> None:
    if wanted and device != "cuda":
        raise PoxmInputError(f"config key 'resources.mps': MPS shares GPUs between trials, but device={device} "
                             "(set device=cuda, or resources.mps=false)")


@contextlib.contextmanager
def mps_for_sweep(device: str, wanted: bool, local: bool, say=print):
    """Within the block, an MPS control daemon serves this machine's GPUs when `wanted` (resources.mps)
    and the sweep starts its own Ray (`local`): the running one if there is one, else one started here
    and stopped on exit. Yields True when MPS is (believed) on."""
    check_mps_config(device, wanted)
    if not wanted:
        yield False
        return
    if not local:
        say("  mps      on the cluster's nodes (started with each node, not by poxm)")
        yield True
        return
    if daemon_running():
        say(f"  mps      the running daemon ({pipe_dir()})")
        yield True
        return
    exe = shutil.which(CONTROL)
    if exe is None:
        raise PoxmInputError(f"config key 'resources.mps': {CONTROL} is not on PATH (it comes with the NVIDIA "
                             "driver's utilities); set resources.mps=false to share GPUs by time-slicing")
    proc = subprocess.run([exe, "-d"], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise PoxmInputError(f"config key 'resources.mps': `{CONTROL} -d` failed (exit {proc.returncode}"
                             f"{': ' + msg[-1] if msg else ''}); set resources.mps=false to share GPUs by time-slicing")
    say(f"  mps      started ({pipe_dir()}); stopped when the sweep ends")
    try:
        yield True
    finally:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([exe], input="quit\n", capture_output=True, text=True, timeout=60)
