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

from orchestration.cluster import mps
from poxm_core.config.schema import load_config
from poxm_core.common.errors import PoxmInputError

ROOT = Path(__file__).resolve().parents[3]

FAKE = """#!/bin/sh
# stand-in for nvidia-cuda-mps-control: -d creates the control socket; on stdin, 'get_server_list'
# succeeds while it exists (FAKE_MPS_STALE: never) and 'quit' removes it
echo "$@" >> "$FAKE_MPS_LOG"
if [ "$1" = "-d" ]; then
  [ -n "$FAKE_MPS_FAIL" ] && { echo "An instance of this daemon is already running" >&2; exit 1; }
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" && : > "$CUDA_MPS_PIPE_DIRECTORY/control"; exit 0
fi
read cmd; echo "$cmd" >> "$FAKE_MPS_LOG"
case "$cmd" in
  get_server_list) [ -z "$FAKE_MPS_STALE" ] && [ -e "$CUDA_MPS_PIPE_DIRECTORY/control" ] ;;
  quit) rm -f "$CUDA_MPS_PIPE_DIRECTORY/control" ;;
esac
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
        assert _calls(fake_mps) == ["-d"]
        assert on and mps.daemon_running()
    assert not mps.daemon_running()
    assert [c for c in _calls(fake_mps) if c] == ["-d", "get_server_list", "quit"]
    assert "started" in said[0]


def test_a_running_daemon_is_used_and_left_running(fake_mps, tmp_path):
    (tmp_path / "pipe").mkdir()
    (tmp_path / "pipe" / "control").write_text("")
    with mps.mps_for_sweep("cuda", True, local=True, say=lambda m: None) as on:
        assert on
    assert mps.daemon_running() and "quit" not in _calls(fake_mps) and "-d" not in _calls(fake_mps)


def test_a_daemon_left_behind_by_a_killed_one_is_not_taken_for_running(fake_mps, tmp_path, monkeypatch):
    (tmp_path / "pipe").mkdir()
    (tmp_path / "pipe" / "control").write_text("")
    monkeypatch.setenv("FAKE_MPS_STALE", "1")
    assert not mps.daemon_running()
    with mps.mps_for_sweep("cuda", True, local=True, say=lambda m: None):
        assert "-d" in _calls(fake_mps)        # a daemon was started rather than trusting the stale socket


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


def test_the_sweep_stops_mps_after_ray_and_releases_its_lock_when_ray_fails(fake_mps, tmp_path, monkeypatch):
    """execute(): MPS is started before Ray; when Ray's start fails, MPS is still stopped and the run
    directory's lock released (the sweep's other stages are never reached)."""
    from orchestration.cluster import ray_setup
    from orchestration.stages import sweep
    from orchestration.stages.plan import plan_sweep
    cfg = load_config(ROOT / "configs" / "quickstart.yaml", ["device=cuda", "resources.gpus_per_trial=0.5",
                                                             "resources.mps=true", "mlflow.enabled=false"])
    plan = plan_sweep(cfg, runs_dir=tmp_path / "runs", cache_dir=tmp_path / "cache")
    events = []

    def failing_ray_init(address, verbose):
        events.append(("ray_init", mps.daemon_running()))
        raise RuntimeError("no Ray here")
    monkeypatch.setattr(ray_setup, "ray_init", failing_ray_init)
    with pytest.raises(RuntimeError, match="no Ray here"):
        sweep.execute(plan, progress=False)
    assert events == [("ray_init", True)]           # the daemon ran before Ray was started
    assert not mps.daemon_running()                 # and was stopped after
    assert plan.rd.root.is_dir() and not plan.rd.driver.exists()   # the driver's lock released


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
