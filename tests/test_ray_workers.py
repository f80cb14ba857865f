"""What a sweep's Ray worker processes get: the modules they import when they start (POXM_RAY_PRELOAD)
and Ray Train's poll interval (its controller takes one report a poll)."""
from __future__ import annotations

import pytest

from orchestration.ray_setup import PRELOAD_DEFAULT, TRAIN_POLL_ENV, TRAIN_POLL_S, preload_modules, worker_env


def test_preload_setting():
    assert preload_modules({}) == [] and preload_modules({"POXM_RAY_PRELOAD": "0"}) == []
    assert preload_modules({"POXM_RAY_PRELOAD": "1"}) == list(PRELOAD_DEFAULT)
    assert preload_modules({"POXM_RAY_PRELOAD": " json , csv ,"}) == ["json", "csv"]


@pytest.mark.slow
def test_a_local_rays_workers_get_the_preloaded_modules_and_the_poll_interval(monkeypatch):
    """A task that imports nothing finds the module already imported in its worker."""
    import ray

    from orchestration.ray_setup import ray_init

    def _loaded(name: str) -> bool:      # defined here: sent by value, nothing imported to find it
        import sys
        return name in sys.modules

    def _poll() -> str | None:
        import os
        return os.environ.get(TRAIN_POLL_ENV)

    module = "orchestration.plan"          # imported by nothing a bare Ray worker loads
    monkeypatch.setenv("POXM_RAY_PRELOAD", module)
    monkeypatch.delenv(TRAIN_POLL_ENV, raising=False)
    assert ray_init(None, verbose=False)
    try:
        assert ray.get(ray.remote(_poll).remote()) == str(TRAIN_POLL_S)      # what Ray Train's controller reads
        assert ray.get(ray.remote(_loaded).remote(module)) is True
        assert ray.get(ray.remote(_loaded).remote("orchestration.mps")) is False    # control
    finally:
        ray.shutdown()


def test_a_remote_clusters_workers_are_handed_the_poll_interval():
    assert worker_env({TRAIN_POLL_ENV: "0.5", "HOME": "/root"}) == {TRAIN_POLL_ENV: "0.5"}
