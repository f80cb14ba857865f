"""The two executors' Ray sessions: a checkpoint's name (Ray Train's folder name, or the owner file a
Tune checkpoint carries), the executor refused by name, and what a Tune trial asks Ray for."""
from __future__ import annotations

import pytest

from orchestration.stages.ray_session import OWNER_FILE, RaySession, checkpoint_name
from orchestration.stages.trial import checkpoint_epoch


def test_a_checkpoints_name_is_its_folders_or_its_owner_files(tmp_path):
    import ray.train
    import ray.tune

    train = tmp_path / "synthetic-A-s0-all.epoch_0003"
    train.mkdir()
    assert checkpoint_name(ray.train.Checkpoint.from_directory(str(train))) == "synthetic-A-s0-all.epoch_0003"
    tune = tmp_path / "checkpoint_000002"       # Tune names its folders itself
    tune.mkdir()
    (tune / OWNER_FILE).write_text("synthetic-B-s1-all.epoch_0007\n")
    name = checkpoint_name(ray.tune.Checkpoint.from_directory(str(tune)))
    assert name == "synthetic-B-s1-all.epoch_0007" and checkpoint_epoch(name) == 7
    bare = tmp_path / "checkpoint_000003"       # no owner file: the folder's name, epoch unknown
    bare.mkdir()
    assert checkpoint_epoch(checkpoint_name(ray.tune.Checkpoint.from_directory(str(bare)))) == -1


def test_the_executor_is_named_when_unknown():
    # unset: the default, 'tune' (measured faster on a GPU: docs/orchestration.md)
    assert RaySession(None).executor == "tune" and RaySession("train").executor == "train"
    with pytest.raises(ValueError, match="resources.executor='ray': expected one of train, tune"):
        RaySession("ray")


def test_config_refuses_an_unknown_executor():
    from pydantic import ValidationError

    from poxm_core.config.schema import ResourcesConfig
    assert ResourcesConfig(executor="tune").executor == "tune"
    assert "executor" not in ResourcesConfig().model_dump(exclude_unset=False)   # unset: config hashes unchanged
    with pytest.raises(ValidationError, match="executor"):
        ResourcesConfig(executor="ray")


def test_a_tune_trial_asks_for_the_trials_resources_only_with_the_tune_executor():
    from types import SimpleNamespace

    from orchestration.stages.tune import DRIVER_MEMORY, trial_resources
    from poxm_core.config.schema import ResourcesConfig

    def plan(**r):
        return SimpleNamespace(cfg=SimpleNamespace(resources=ResourcesConfig(**r)))
    assert trial_resources(plan(cpus_per_trial=2, gpus_per_trial=0.25, executor="train")) == {"memory": DRIVER_MEMORY}
    assert trial_resources(plan(cpus_per_trial=2, gpus_per_trial=0.25)) == {"CPU": 2, "GPU": 0.25}    # the default
    assert trial_resources(plan(cpus_per_trial=2, gpus_per_trial=0.25, executor="tune")) == {"CPU": 2, "GPU": 0.25}
    assert trial_resources(plan(cpus_per_trial=1, executor="tune")) == {"CPU": 1}
