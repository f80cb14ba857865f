"""The typed hand-offs into Ray (orchestration/stages/handoff.py): what a job's worker gets from the sweep."""
from __future__ import annotations

import pickle

import pytest

from orchestration.stages.handoff import PreparedAt, SweepInputs, worker_job
from orchestration.tracking.runs import point_key
from poxm_core.config.schema import ResourcesConfig
from poxm_core.methods.head import HeadSpec
from poxm_core.training.spec import TrialSpec


def _sweep(mlflow: bool) -> SweepInputs:
    a = TrialSpec("d", "A", 0, (HeadSpec("poxm", 10, 0.9), HeadSpec("poxm", 20, 0.9), HeadSpec("dm")))
    b = TrialSpec("d", "B", 1, (HeadSpec("wpoxm", 10, 0.8),))
    specs = {"ta": a.to_dict(), "tb": b.to_dict()}
    points = {}
    for s in (a, b):
        for i, h in enumerate(s.heads):
            points[point_key({"dataset": s.dataset, "variant": s.variant, "method": h.method, "p": h.p,
                              "lam": h.lam, "seed": s.seed})] = f"run-{s.variant}{i}"
    return SweepInputs(run_root="/r", cache_dir="/c", config={"name": "x"}, storage=None, ray_storage="/r/ray",
                       sweep_id="x", specs=specs,
                       prepared={"ta": PreparedAt("d/s0/A", ("d/s0", "d/s0/A")), "tb": PreparedAt("d/s1/B", ("d/s1/B",))},
                       resources=ResourcesConfig(cpus_per_trial=3), mlflow_uri="http://m" if mlflow else None,
                       mlflow_points=points if mlflow else None)


def test_worker_job_maps_each_head_to_its_own_run_and_keeps_the_pack_order():
    job = worker_job(_sweep(True), "pack-0", ["tb", "ta"], fit_start=12.5)
    assert job.name == "pack-0" and [m.name for m in job.members] == ["tb", "ta"]
    assert job.cpus == 3 and job.fit_start == 12.5 and job.config == {"name": "x"} and job.crash is None
    tb, ta = job.members
    assert ta.prepared.dir == "d/s0/A" and tb.prepared.levels == ("d/s1/B",)
    assert ta.head_keys == (HeadSpec("poxm", 10, 0.9).key, HeadSpec("poxm", 20, 0.9).key, HeadSpec("dm").key)
    # every head's run is the one of its own grid point (variant, p and method all matter)
    assert ta.runs.uri == "http://m" and ta.runs.heads == dict(zip(ta.head_keys, ["run-A0", "run-A1", "run-A2"]))
    assert tb.runs.heads == {HeadSpec("wpoxm", 10, 0.8).key: "run-B0"}
    # it crosses into Ray by pickling: the same job comes out
    assert pickle.loads(pickle.dumps(job)) == job


def test_worker_job_without_mlflow_and_a_head_without_a_run():
    job = worker_job(_sweep(False), "ta", ["ta"], fit_start=0.0)
    assert job.members[0].runs is None
    s = _sweep(True)
    del s.mlflow_points[next(iter(s.mlflow_points))]
    with pytest.raises(KeyError):
        worker_job(s, "ta", ["ta"], fit_start=0.0)
