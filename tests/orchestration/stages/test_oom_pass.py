"""The out-of-memory pass through a real Ray Tune Tuner (orchestration/stages/packing.py), on a CPU.

A local Ray of 2 CPUs that declares one GPU (Ray hands out GPU shares by resource, whatever the card):
two trials at half a GPU each; one runs out of GPU memory as it starts (POXM_INJECT_OOM). Tune does not
run it again at the same share; the trials stage runs it again at twice its share, in a Tuner of its own
('oom-1'), where it finishes. The sweep ends ok: running out of memory is not a failure of the method.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TINY = {
    "name": "oom-pass",
    "seeds": [0],
    "datasets": [{"name": "synthetic",
                  "synthetic": {"n_train": 300, "n_test": 100, "n_features": 100, "n_labels": 30, "mean_labels": 2},
                  "variants": [{"name": "A", "alpha": 0.3, "beta": 0, "T": 2},
                               {"name": "B", "alpha": 0.3, "beta": 1, "T": 4}]}],
    "model": {"dim": 8, "epochs": 1, "n_candidates": 10},
    "training": {"epochs": 2, "mc_slates": 2, "batch_size": 128},
    "group_by": "seed",
    "mlflow": {"enabled": False},
    "resources": {"cpus_per_trial": 1, "gpus_per_trial": 0.5, "max_failures": 2},
    "methods": {"logging": {}, "poxm": {"p": [5], "lam": [0.9], "lr": 0.01}},
}


@pytest.fixture
def ray_with_a_gpu():
    """A Ray of this test alone: 2 CPUs and one (declared) GPU; the shared one afterwards."""
    import ray

    from orchestration.cluster.ray_setup import LOOPBACK, loopback_only, secrets_withheld
    if ray.is_initialized():       # the test run's shared Ray: the next test that asks starts it again
        ray.shutdown()
    with secrets_withheld(), loopback_only():
        ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
                 _node_ip_address=LOOPBACK)
    try:
        yield
    finally:
        ray.shutdown()


def _tune_trials(path: Path) -> list:
    from ray.tune import ExperimentAnalysis
    return ExperimentAnalysis(str(path)).trials


def test_a_trial_out_of_memory_runs_again_at_twice_its_share(ray_with_a_gpu, tmp_path, monkeypatch):
    from orchestration.stages.packing import OOM_ENV
    from orchestration.stages.sweep import run_sweep
    from orchestration.stages.tune import ray_storage
    from poxm_core.config.schema import load_config

    cfg = load_config(data=json.loads(json.dumps(TINY)))
    victim, other = "synthetic-B-s0-all", "synthetic-A-s0-all"
    monkeypatch.setenv(OOM_ENV, victim)
    from orchestration.stages.teardown import Teardown
    order, end = [], Teardown.end
    monkeypatch.setattr(Teardown, "end", lambda self: order.append("teardown") or end(self))
    out = run_sweep(cfg, runs_dir=tmp_path / "runs", progress=False, on_end=lambda o: order.append(o.ok))

    assert out.ok and out.errored == [] and sorted(out.done) == sorted([victim, other])
    assert order == [True, "teardown"]        # the results handed on before Ray's shutdown (the command prints them)
    trials = out.run_dir / "trials"
    assert json.loads((trials / victim / "memory.json").read_text()) == {"oom": 1, "last_share": 0.5}
    assert json.loads((trials / victim / "done.json").read_text())["tries"] == 2    # the OOM start + the pass
    assert not (trials / other / "memory.json").exists()
    assert json.loads((trials / other / "done.json").read_text())["tries"] == 1

    # the sweep's Tuner: the victim's Tune trial errored at half a GPU, not retried by Tune (one start)
    from orchestration.stages.plan import plan_from_run_dir
    storage = Path(ray_storage(plan_from_run_dir(out.run_dir)))
    first = {t.config["trial"]["name"]: t for t in _tune_trials(storage / "tune")}
    assert first[victim].status == "ERROR" and first[victim].config["trial"].get("gpu", 0.5) == 0.5
    assert first[victim].num_failures == 1 and first[other].status == "TERMINATED"
    # the out-of-memory pass: a Tuner over the victim alone, at twice its share
    again = _tune_trials(storage / "oom-1")
    assert [(t.config["trial"]["name"], t.config["trial"]["gpu"], t.status) for t in again] == \
        [(victim, 1.0, "TERMINATED")]
    assert not (storage / "oom-2").exists()

    # the report's sweep table: done, one retry, one out-of-memory pass; not a method failure
    import pandas as pd
    table = pd.read_csv(out.run_dir / "report" / "tables" / "sweep_trials.csv").set_index("trial")
    assert table.loc[victim, "state"] == "done" and table.loc[victim, "retries"] == 1
    assert table.loc[victim, "oom_passes"] == 1 and table.loc[other, "oom_passes"] == 0
