"""Ray Train's per-job placement-group cleaner is left out where Ray's state API does not answer
(orchestration.trial.leave_out_pg_cleaner, orchestration.ray_setup.state_api_available)."""
from __future__ import annotations

import pytest


def _trainer():
    import ray.train
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    return DataParallelTrainer(lambda config: None, scaling_config=ray.train.ScalingConfig(num_workers=1))


def test_leave_out_pg_cleaner_drops_that_callback_only():
    from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback

    from orchestration.trial import leave_out_pg_cleaner

    plain = [type(c) for c in _trainer()._create_default_callbacks()]
    assert PlacementGroupCleanerCallback in plain            # Ray Train still adds it (the method still exists)
    t = _trainer()
    leave_out_pg_cleaner(t)
    kept = [type(c) for c in t._create_default_callbacks()]
    assert kept == [c for c in plain if c is not PlacementGroupCleanerCallback]
    assert len(kept) == len(plain) - 1


@pytest.mark.parametrize("url, expected", [("", False), ("127.0.0.1:8265", True), (RuntimeError, True)])
def test_state_api_available_follows_the_dashboard(monkeypatch, url, expected):
    import ray._private.worker as worker

    from orchestration.ray_setup import state_api_available

    def fake():
        if url is RuntimeError:
            raise RuntimeError("not connected")
        return url
    monkeypatch.setattr(worker, "get_dashboard_url", fake)
    assert state_api_available() is expected
