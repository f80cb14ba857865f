"""resources.mps: the sweep's MPS daemon is started before Ray and stopped after, only when poxm started
it; a running one is reused; bad settings are one-line input errors.

This machine has no NVIDIA driver, so `nvidia-cuda-mps-control` is a stand-in script on PATH that keeps
the daemon's control socket as a plain file and logs its invocations (the real daemon ran on the GPU
machines of docs/performance.md).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from orchestration import mps
from poxm_core.config import load_config
from poxm_core.errors import PoxmInputError

ROOT = Path(__file__).resolve().parents[1]

FAKE = """#!/bin/sh
# stand-in for nvidia-cuda-mps-control: -d creates the control socket, 'quit' on stdin removes it
echo "$@" >> "$FAKE_MPS_LOG"
if [ "$1" = "-d" ]; then
  [ -n "$FAKE_MPS_FAIL" ] && { echo "An instance of this daemon is already running" >&2; exit 1; }
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" && : > "$CUDA_MPS_PIPE_DIRECTORY/control"; exit 0
fi
read cmd; [ "$cmd" = quit ] && rm -f "$CUDA_MPS_PIPE_DIRECTORY/control"; echo "quit" >> "$FAKE_MPS_LOG"
"""


@pytest.fixture
def fake_mps(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / mps.CONTROL
    exe.write_text(FAKE)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "calls.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "pipe"))
    monkeypatch.setenv("FAKE_MPS_LOG", str(log))
    return log


def _calls(log: Path) -> list[str]:
    return log.read_text().split("\n")[:-1] if log.exists() else []


def test_started_before_the_block_and_stopped_after(fake_mps):
    said = []
    with mps.mps_for_sweep("cuda", True, local=True, say=said.append) as on:
        assert on and mps.daemon_running()
        assert _calls(fake_mps) == ["-d"]
    assert not mps.daemon_running()
    assert _calls(fake_mps) == ["-d", "", "quit"]
    assert "started" in said[0]


def test_a_running_daemon_is_used_and_left_running(fake_mps, tmp_path):
    (tmp_path / "pipe").mkdir()
    (tmp_path / "pipe" / "control").write_text("")
    with mps.mps_for_sweep("cuda", True, local=True, say=lambda m: None) as on:
        assert on
    assert mps.daemon_running() and _calls(fake_mps) == []


def test_stopped_when_the_sweep_fails(fake_mps):
    with pytest.raises(RuntimeError, match="trial crashed"):
        with mps.mps_for_sweep("cuda", True, local=True, say=lambda m: None):
            raise RuntimeError("trial crashed")
    assert not mps.daemon_running()


def test_off_or_on_a_cluster_nothing_is_started(fake_mps):
    with mps.mps_for_sweep("cuda", False, local=True, say=lambda m: None) as on:
        assert on is False
    with mps.mps_for_sweep("cuda", True, local=False, say=lambda m: None) as on:
        assert on is True
    assert _calls(fake_mps) == []


def test_bad_settings_are_one_line_errors(fake_mps, monkeypatch):
    with pytest.raises(PoxmInputError, match=r"resources\.mps.*device=cpu"):
        mps.check_mps_config("cpu", True)
    monkeypatch.setenv("FAKE_MPS_FAIL", "1")
    with pytest.raises(PoxmInputError, match=r"resources\.mps.*failed \(exit 1: An instance"):
        with mps.mps_for_sweep("cuda", True, local=True, say=lambda m: None):
            pass
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(PoxmInputError, match=r"resources\.mps.*not on PATH"):
        with mps.mps_for_sweep("cuda", True, local=True, say=lambda m: None):
            pass


def test_the_config_key_parses_and_leaves_the_run_directory_alone():
    from orchestration.rundir import sweep_id
    base = load_config(ROOT / "configs" / "quickstart.yaml", [])
    on = load_config(ROOT / "configs" / "quickstart.yaml", ["resources.mps=true"])
    assert base.resources.mps is None and on.resources.mps is True
    assert sweep_id(on) == sweep_id(base)      # how trials share a card changes no result
    with pytest.raises(PoxmInputError, match="resources.mps"):
        load_config(ROOT / "configs" / "quickstart.yaml", ["resources.mps=maybe"])
