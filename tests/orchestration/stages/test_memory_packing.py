"""Trials share a card by memory as well as by count (orchestration/stages/packing.py): the GPU share from
the estimate, the statistics read from the prepared cache, a job's share, out-of-memory retries at a
larger share, the MPS client limit."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

from orchestration.stages import packing
from orchestration.stages.packing import (MARGIN, gpu_share, is_oom, mps_memory_limit, oom_doublings, oom_passes,
                                          record_oom, trial_stats)
from orchestration.stages.tune import _job_bundle, job_resources
from poxm_core.training.memory import CONTEXT_BYTES

GIB = 1 << 30


def test_share_is_the_larger_of_count_and_memory():
    card = 140 * GIB
    assert gpu_share(0.125, None, card) == 0.125                        # no estimate: by count
    assert gpu_share(0.125, 1 * GIB, card) == 0.125                     # small: the count's share
    est = 20 * GIB                                                       # (20 GiB + context) * 1.25 / 140 GiB
    want = (est + CONTEXT_BYTES) * MARGIN / card                         # = 0.1839..., up to 0.19
    assert want == pytest.approx(0.18383, abs=1e-4) and gpu_share(0.125, est, card) == 0.19
    assert gpu_share(0.125, est, card, doublings=1) == 0.38              # out of memory once: twice
    assert gpu_share(0.125, est, card, doublings=5) == 1.0               # never more than a card
    assert gpu_share(0.125, est, None) == 0.125                          # the card's memory unknown


def test_eight_trials_of_twenty_gib_do_not_fit_one_card_by_memory():
    """What happened by count: 8 x 20 GB asked of a 141 GB card. By memory, at most 5 fit at once."""
    s = gpu_share(0.125, 20 * 10**9, 141 * 10**9)
    assert s * 8 > 1 and int(1 / s) == 5


def _cache(tmp_path):
    stats = {"data/a": {"D": 40, "L": 30, "N_test": 100, "N_train": 300}, "model/b": {"dim": 8},
             "candidates/c": {"K": 10}, "variant/d": {"n_fit": 270, "n_val": 30}}
    for rel, st in stats.items():
        (tmp_path / rel).mkdir(parents=True)
        (tmp_path / rel / "manifest.json").write_text(json.dumps({"stats": st}))
    X = sp.csr_matrix(np.eye(300, 40) + np.eye(300, 40, 1))       # 2 entries a row but the last
    sp.save_npz(tmp_path / "data/a/X_train.npz", X, compressed=False)
    Y_train = sp.csr_matrix(np.eye(300, 30))                        # one label a row ...
    Y_test = sp.csr_matrix(np.eye(100, 30) + np.eye(100, 30, 3))   # ... two, at most, among the test rows
    Y_test = Y_test.tolil()
    Y_test[50, :6] = 1.0                            # and one test row of six (row 50 had none: past the 30 labels)
    sp.save_npz(tmp_path / "data/a/Y_train.npz", Y_train)
    sp.save_npz(tmp_path / "data/a/Y_test.npz", sp.csr_matrix(Y_test))
    return list(stats)


def test_statistics_from_the_cache(tmp_path):
    levels = _cache(tmp_path)
    st = trial_stats(tmp_path, levels)
    assert st["L"] == 30 and st["dim"] == 8 and st["K"] == 10 and st["n_val"] == 30
    assert st["nnz_per_row"] == pytest.approx(X_nnz(tmp_path) / 300)
    assert st["labels_max"] == 6                         # as the trial's own memory.stats_of reads it
    (tmp_path / "data/a/Y_test.npz").unlink()
    assert "labels_max" not in trial_stats(tmp_path, levels)      # unknown: the estimate takes the support
    (tmp_path / "variant/d/manifest.json").unlink()
    assert trial_stats(tmp_path, levels) is None        # not prepared yet: unknown


def X_nnz(root):
    return sp.load_npz(root / "data/a/X_train.npz").nnz


def test_a_job_asks_for_its_largest_members_share(tmp_path, monkeypatch):
    plan = SimpleNamespace(cfg=SimpleNamespace(resources=SimpleNamespace(gpus_per_trial=0.125)),
                           rd=SimpleNamespace(root=tmp_path))
    pk = packing.Packing.__new__(packing.Packing)
    pk.plan, pk.res, pk.card = plan, plan.cfg.resources, 100 * GIB
    pk.estimates = {"a": 1 * GIB, "b": 30 * GIB, "c": None}
    grid = pk.annotate([{"name": "j1", "members": ["a", "c"]}, {"name": "j2", "members": ["a", "b"]}])
    assert [j["gpu"] for j in grid] == [0.125, gpu_share(0.125, 30 * GIB, 100 * GIB)]
    assert "by memory" in pk.line()


def test_tune_resources_of_a_job():
    assert job_resources("tune", 2, 0.25) == {"CPU": 2, "GPU": 0.25}
    assert job_resources("tune", 2, 0) == {"CPU": 2}
    assert "memory" in job_resources("train", 2, 0.25)        # the Train worker holds them
    pgf = _job_bundle("tune", 1, 0.125, {"trial": {"name": "x", "gpu": 0.37}})
    assert pgf.bundles == [{"CPU": 1, "GPU": 0.37}]
    assert _job_bundle("tune", 1, 0.125, {"trial": {"name": "x"}}).bundles == [{"CPU": 1, "GPU": 0.125}]


def test_out_of_memory_is_recognised_through_wrappers():
    class OutOfMemoryError(RuntimeError):
        pass
    assert is_oom(OutOfMemoryError("x"))
    try:
        try:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        except RuntimeError as inner:
            raise ValueError("worker died") from inner
    except ValueError as outer:
        assert is_oom(outer)
    assert not is_oom(RuntimeError("CUDA error: an illegal memory access"))


class _Files:
    def __init__(self, root, name):
        self.root, self.name = root / "trials" / name, name
        self.root.mkdir(parents=True, exist_ok=True)

    def read_json(self, f, default=None):
        p = self.root / f
        return json.loads(p.read_text()) if p.exists() else default

    def write_json(self, f, obj):
        (self.root / f).write_text(json.dumps(obj))


def test_oom_passes_retry_at_a_larger_share_until_a_whole_card(tmp_path):
    from orchestration.rundir import set_trial_state
    names = ["t1", "t2", "t3"]
    plan = SimpleNamespace(specs=[SimpleNamespace(name=n) for n in names],
                           rd=SimpleNamespace(root=tmp_path, trial=lambda n: tmp_path / "trials" / n))
    for n in names:
        _Files(tmp_path, n)
    set_trial_state(tmp_path / "trials/t1", "errored", oom=True)
    assert record_oom(_Files(tmp_path, "t1"), 0.25) == 1
    set_trial_state(tmp_path / "trials/t2", "errored", oom=False)      # a real failure: not retried here
    set_trial_state(tmp_path / "trials/t3", "errored", oom=True)
    record_oom(_Files(tmp_path, "t3"), 1.0)                           # already a whole card: errored for good
    passes = []

    def make_tuner(specs, name):
        def fit():
            passes.append((name, [s.name for s in specs]))
            if len(passes) == 1:      # t1 runs out of memory once more, then finishes
                record_oom(_Files(tmp_path, "t1"), 0.5)
            else:
                (tmp_path / "trials/t1/done.json").write_text("{}")
                set_trial_state(tmp_path / "trials/t1", "done")
        return SimpleNamespace(fit=fit)
    oom_passes(plan, make_tuner, say=lambda m: None)
    assert passes == [("oom-1", ["t1"]), ("oom-2", ["t1"])]
    assert oom_doublings(tmp_path, "t1") == 2 and oom_doublings(tmp_path, "t2") == 0


def test_mps_client_limit():
    assert mps_memory_limit(0.25, 100 * GIB) == "0=25600M"
    assert mps_memory_limit(0.25, None) is None and mps_memory_limit(0, 100 * GIB) is None


def test_sweep_summary_lists_each_trials_memory(tmp_path):
    from orchestration.rundir import RunDir
    from orchestration.stages.gather import sweep_summary
    rd = RunDir(tmp_path)
    for n, mem in (("a", {"estimate_mb": 6289.0, "peak_mb": 5207.0}), ("b", None)):
        rd.trial(n).mkdir(parents=True)
        (rd.trial(n) / "summary.json").write_text(json.dumps({"memory": mem} if mem else {}))
    rd.summary_json.parent.mkdir(parents=True, exist_ok=True)
    out = sweep_summary(rd, 2, 2, ["a", "b"], [], set(), {"wall": 10.0}, 2)
    assert out["trial_gpu_memory_mb"] == {"a": {"estimate_mb": 6289.0, "peak_mb": 5207.0}}


def test_memory_goes_to_each_mlflow_run_of_the_trial(tmp_path):
    from orchestration.stages.trial import log_memory
    (tmp_path / "summary.json").write_text(json.dumps({"memory": {"estimate_mb": 6289.0, "peak_mb": 5207.0,
                                                                  "estimate_over_peak": 1.2}}))
    sent = []
    logger = SimpleNamespace(c=SimpleNamespace(log_batch=lambda rid, metrics: sent.append(
        (rid, {m.key: m.value for m in metrics}))))
    log_memory(logger, ["r1", "r2"], tmp_path)
    want = {"train/gpu_memory_estimate_mb": 6289.0, "train/gpu_memory_peak_mb": 5207.0}
    assert sent == [("r1", want), ("r2", want)]


def test_a_prepared_seed_is_read_off_the_cache_without_a_task(tmp_path):
    """prepare.cached_result: every variant of a (dataset, seed) complete in the driver's cache gives the
    task's result at once; one level missing, or storage mode, gives None (a task runs)."""
    import numpy as np

    from orchestration.stages.prepare import cached_result
    from orchestration.stages.handoff import variant_at
    from poxm_core.config.schema import load_config
    cfg = load_config("configs/quickstart.yaml", ["seeds=[0]"])
    plan = SimpleNamespace(cfg=cfg, storage=None, cache_dir=tmp_path)
    ds = cfg.datasets[0].name
    assert cached_result(plan, ds, 0) is None
    for v in cfg.datasets[0].variants:
        at = variant_at(cfg, ds, 0, v.name)
        parents = dict(zip(("data", "model", "candidates"), at.levels[:3]))
        for rel in at.levels:
            (tmp_path / rel).mkdir(parents=True, exist_ok=True)
            (tmp_path / rel / "manifest.json").write_text(json.dumps({"key": {"parents": parents}, "stats": {}}))
        np.save(tmp_path / at.dir / "covering.npy", np.zeros(3))
    res = cached_result(plan, ds, 0)
    assert set(res["variants"]) == {v.name for v in cfg.datasets[0].variants} and res["seconds"] == 0.0
    assert res["variants"][cfg.datasets[0].variants[0].name]["dir"] == variant_at(cfg, ds, 0, cfg.datasets[0].variants[0].name).dir
    assert cached_result(SimpleNamespace(cfg=cfg, storage=object(), cache_dir=tmp_path), ds, 0) is None
    (tmp_path / variant_at(cfg, ds, 0, cfg.datasets[0].variants[-1].name).dir / "manifest.json").unlink()
    assert cached_result(plan, ds, 0) is None
