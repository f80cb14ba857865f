"""What a sweep's Ray worker processes are handed: Ray Train's poll interval (its controller takes one
report a poll), inherited on a local Ray, through runtime_env on a remote cluster."""
from __future__ import annotations

import pytest

from orchestration.ray_setup import TRAIN_POLL_ENV, worker_env


def test_a_remote_clusters_workers_are_handed_the_poll_interval():
    assert worker_env({TRAIN_POLL_ENV: "0.5", "HOME": "/root"}) == {TRAIN_POLL_ENV: "0.5"}
    assert worker_env({"HOME": "/root"}) == {}


@pytest.mark.slow
def test_a_local_rays_workers_inherit_the_poll_interval(monkeypatch):
    import ray

    from orchestration.ray_setup import ray_init

    def _poll() -> str | None:      # defined here: sent by value, nothing imported to find it
        import os
        return os.environ.get(TRAIN_POLL_ENV)

    monkeypatch.setenv(TRAIN_POLL_ENV, "0.5")
    assert ray_init(None, verbose=False)
    try:
        assert ray.get(ray.remote(_poll).remote()) == "0.5"      # what Ray Train's controller reads
    finally:
        ray.shutdown()
