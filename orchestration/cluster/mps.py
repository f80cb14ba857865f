"""NVIDIA's Multi-Process Service for a sweep whose trials share GPUs (resources.mps).

Without it, processes sharing a card take turns on it: a real-data trial launches thousands of tiny
kernels and leaves the card idle most of the time, yet 8 trials on one card each ran several times
slower than one alone. Under MPS their kernels run side by side (docs/performance.md).

The daemon must run before any trial process initialises CUDA, so a local sweep starts it before Ray
(and stops it afterwards, only if it started it). On a cluster (`--address`), whoever starts each
node starts its daemon (`nvidia-cuda-mps-control -d` before `ray start`); poxm only checks the config.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from poxm_core.common.errors import PoxmInputError

CONTROL = "nvidia-cuda-mps-control"
DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"     # the daemon's and its clients' default (CUDA_MPS_PIPE_DIRECTORY)


def pipe_dir(environ=None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE_DIR)


def daemon_running(environ=None, exe: str | None = None) -> bool:
    """A control daemon answers in the pipe directory: its 'control' entry exists and the control
    program's `get_server_list` succeeds (a daemon that was killed leaves the entry behind)."""
    if not (pipe_dir(environ) / "control").exists():
        return False
    exe = exe or shutil.which(CONTROL)
    if exe is None:          # nothing to ask it with; the sweep then fails on the missing program
        return True
    try:
        r = subprocess.run([exe], input="get_server_list\n", capture_output=True, text=True, timeout=20,
                           env=None if environ is None else dict(environ))
    except (subprocess.TimeoutExpired, OSError):
        return False
    return r.returncode == 0


def _quit(exe: str) -> int | None:
    try:
        return subprocess.run([exe], input="quit\n", capture_output=True, text=True, timeout=60).returncode
    except (subprocess.TimeoutExpired, OSError):
        return None


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
    # output to a file, not a pipe: the daemon forks, and a child holding a pipe would keep run() waiting
    with tempfile.TemporaryFile("w+") as out:
        try:
            rc = subprocess.run([exe, "-d"], stdin=subprocess.DEVNULL, stdout=out, stderr=out, timeout=60).returncode
        except (subprocess.TimeoutExpired, OSError) as exc:
            if daemon_running(exe=exe):
                _quit(exe)
            raise PoxmInputError(f"config key 'resources.mps': `{CONTROL} -d` did not start ({type(exc).__name__}); "
                                 "set resources.mps=false to share GPUs by time-slicing") from None
        out.seek(0)
        msg = out.read().strip().splitlines()
    if rc != 0:
        raise PoxmInputError(f"config key 'resources.mps': `{CONTROL} -d` failed (exit {rc}"
                             f"{': ' + msg[-1] if msg else ''}); set resources.mps=false to share GPUs by time-slicing")
    say(f"  mps      started ({pipe_dir()}); stopped when the sweep ends")
    try:
        yield True
    finally:
        if _quit(exe) != 0:
            say(f"  mps      could not stop the daemon this sweep started: run `echo quit | {CONTROL}`")

# an MPS client's device-memory limit ("<device>=<size>", e.g. "0=17000M"), read when its CUDA context
# starts: each trial process sets it to its share of the card (orchestration/stages/packing.py)
MPS_LIMIT_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
