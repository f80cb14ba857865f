"""Ray Train's per-job actors that a poxm job does not use are left out: the placement-group cleaner
where Ray's state API does not answer, the datasets callback's DatasetManager when the trainer has no
Ray Datasets (orchestration.stages.trial.leave_out_unused_callbacks, orchestration.cluster.ray_setup.state_api_available)."""
from __future__ import annotations

import pytest


def _trainer():
    import ray.train
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    return DataParallelTrainer(lambda config: None, scaling_config=ray.train.ScalingConfig(num_workers=1))


@pytest.mark.parametrize("pg_cleaner, datasets", [(False, False), (True, False), (False, True), (True, True)])
def test_leave_out_unused_callbacks_drops_those_callbacks_only(pg_cleaner, datasets):
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback

    from orchestration.stages.trial import leave_out_unused_callbacks

    plain = [type(c) for c in _trainer()._create_default_callbacks()]
    # Ray Train still adds both (the private method still exists and still returns them)
    assert PlacementGroupCleanerCallback in plain and DatasetsCallback in plain
    t = _trainer()
    if datasets:
        t.datasets = {"train": object()}        # a trainer given Ray Datasets keeps their callback
    leave_out_unused_callbacks(t, pg_cleaner=pg_cleaner)
    gone = ({PlacementGroupCleanerCallback} if not pg_cleaner else set()) | ({DatasetsCallback} if not datasets else set())
    kept = [type(c) for c in t._create_default_callbacks()]
    assert kept == [c for c in plain if c not in gone]
    assert len(kept) == len(plain) - len(gone)


@pytest.mark.parametrize("url, expected", [("", False), ("127.0.0.1:8265", True), (RuntimeError, True)])
def test_state_api_available_follows_the_dashboard(monkeypatch, url, expected):
    import ray._private.worker as worker

    from orchestration.cluster.ray_setup import state_api_available

    def fake():
        if url is RuntimeError:
            raise RuntimeError("not connected")
        return url
    monkeypatch.setattr(worker, "get_dashboard_url", fake)
    assert state_api_available() is expected


@pytest.mark.slow
def test_the_sweep_starts_ray_trains_resource_coordinator(ray_session):
    """start_train_coordinator creates the one actor Ray Train's jobs ask for resources (by the name
    Ray Train looks it up by), so that the first jobs do not wait for it to start. On the test run's Ray,
    which holds the actor once a sweep has run: that one is killed first (for good: no restart), and
    the next sweep's jobs create it again as they would on a new Ray."""
    import time

    import ray

    from orchestration.cluster.ray_setup import start_train_coordinator

    def found():
        try:
            return ray.get_actor("AutoscalingCoordinator", namespace="AutoscalingCoordinator")
        except ValueError:
            return None
    if (old := found()) is not None:
        ray.kill(old, no_restart=True)
        deadline = time.time() + 60
        while found() is not None and time.time() < deadline:
            time.sleep(0.1)
    assert found() is None
    start_train_coordinator()
    assert found() is not None
