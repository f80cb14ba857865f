"""Trials beside the prepare stage: a trial waits for its own variant, not for its (dataset, seed)'s
whole task (orchestration.stages.handoff.PreparedRef, orchestration.stages.handoff.variant_at); and the prepare
task's logging-policy metrics go to the GPU when the config's device is one."""
from __future__ import annotations

import json
import shutil
import time

import pytest
import torch

from orchestration.stages.handoff import PreparedAt, PreparedRef
from orchestration.stages.handoff import variant_at
from poxm_core.prepare import pipeline as prepare_module
from poxm_core.config.schema import load_config
from poxm_core.prepare.pipeline import metrics_device, prepare
from poxm_core.prepare.cache import variant_record

# two alphas: two model and candidate levels, so a variant's parents depend on which variant it is
TWO = {"name": "s", "datasets": [{"name": "synthetic",
                                  "synthetic": {"n_train": 120, "n_test": 40, "n_features": 30, "n_labels": 12},
                                  "variants": [{"name": "A", "alpha": 0.5}, {"name": "B", "alpha": 0.3, "T": 5.0}]}],
       "model": {"dim": 4, "epochs": 1, "n_candidates": 6, "slate_size": 2}, "training": {"mc_slates": 2},
       "methods": {"dm": {}}}


def test_variant_at_is_where_prepare_puts_each_variant(tmp_path):
    cfg = load_config(data=TWO)
    out = prepare(cfg, "synthetic", 3, tmp_path, progress=False)
    seen = set()
    for v, vdir in out.items():
        rec = variant_record(tmp_path, vdir)
        at = variant_at(cfg, "synthetic", 3, v)
        assert at == PreparedAt(rec["dir"], tuple(rec["levels"]))
        seen.add(at.levels[1])
    assert len(seen) == 2                  # A and B: each its own model level


@pytest.mark.slow
def test_the_variant_metrics_follow_the_config_device(monkeypatch, tmp_path):
    """prepare hands stochastic_metrics the config's GPU (none on the CPU). No GPU here: the device is a
    stand-in, and the spy computes the metrics on the CPU."""
    assert metrics_device("cpu") is None
    gpu = torch.device("cuda", 1)
    seen = []
    real = prepare_module.stochastic_metrics

    def spy(*a, device=None, **kw):
        seen.append(device)
        return real(*a, **kw)
    monkeypatch.setattr(prepare_module, "stochastic_metrics", spy)
    cfg = load_config(data=TWO)
    prepare(cfg, "synthetic", 0, tmp_path / "cpu", progress=False)
    assert seen == [None, None]                        # one call a variant, NumPy
    monkeypatch.setattr(prepare_module, "resolve_device", lambda d: gpu if d == "cuda" else torch.device("cpu"))
    assert metrics_device("cuda") == gpu and metrics_device("cpu") is None
    # the variants again with device cuda (the logging model and candidates found in the cache, as
    # the device is not part of their keys): only the metrics see the device
    shutil.rmtree(tmp_path / "cpu" / "variant")
    seen.clear()
    prepare(cfg.model_copy(update={"device": "cuda"}), "synthetic", 0, tmp_path / "cpu", progress=False)
    assert seen == [gpu, gpu]


@pytest.mark.slow
def test_a_trial_starts_once_its_variant_is_built_before_its_task_ends(ray_session, tmp_path):
    """A real Ray task stands for a prepare task still building other variants: it runs until a file
    appears. Once the trial's variant level is complete (its manifest written), resolve returns it while
    the task runs; a trial whose variant never appears gets the task's result, or its error."""
    import ray

    @ray.remote(num_cpus=0)
    def task(release: str, fail: bool):
        from pathlib import Path
        deadline = time.time() + 10          # a broken resolve fails the test below, it does not hang
        while not Path(release).exists() and time.time() < deadline:
            time.sleep(0.05)
        if fail:
            raise ValueError("prepare failed")
        return {"variants": {"A": {"dir": "variant/a", "levels": ["data/d", "variant/a"]}}, "seconds": 0.0}

    release = tmp_path / "release"
    at = PreparedAt("variant/a", ("data/d", "variant/a"))
    ref = PreparedRef(task.remote(str(release), False), "A", at)
    (tmp_path / "variant" / "a").mkdir(parents=True)
    (tmp_path / "variant" / "a" / "manifest.json").write_text(json.dumps({}))
    t0 = time.perf_counter()
    assert ref.resolve(str(tmp_path), poll_s=0.05) == at
    assert time.perf_counter() - t0 < 5 and not ray.wait([ref.ref], timeout=0)[0]     # the task still runs
    release.write_text("")
    # without a cache (storage mode) or a variant built elsewhere: the task's own answer
    other = tmp_path / "elsewhere"
    assert ref.resolve(str(other), poll_s=0.05) == PreparedAt("variant/a", ("data/d", "variant/a"))
    failing = PreparedRef(task.remote(str(release), True), "A", at)
    with pytest.raises(ray.exceptions.RayTaskError, match="prepare failed"):
        failing.resolve(str(other), poll_s=0.05)
