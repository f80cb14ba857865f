"""What a remote cluster's Ray workers are handed: Ray Train's poll interval and poxm's trial switches
when they are set, never a secret; a local Ray's workers inherit the driver's environment."""
from __future__ import annotations

from orchestration.ray_setup import TRAIN_POLL_ENV, worker_env


def test_a_remote_clusters_workers_are_handed_the_poll_interval():
    assert worker_env({TRAIN_POLL_ENV: "0.5", "HOME": "/root"}) == {TRAIN_POLL_ENV: "0.5"}
    assert worker_env({"HOME": "/root"}) == {}



def test_the_trial_switches_go_to_a_remote_clusters_workers():
    env = {"POXM_VALIDATION_OVERLAP": "0", "POXM_CUDA_GRAPHS": "0", "POXM_EVAL_THREADS": "4", "POXM_TOKEN": "x"}
    assert worker_env(env) == {"POXM_VALIDATION_OVERLAP": "0", "POXM_CUDA_GRAPHS": "0", "POXM_EVAL_THREADS": "4"}
