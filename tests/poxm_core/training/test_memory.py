"""A trial's peak GPU memory estimated from its shapes (poxm_core/training/memory.py): the formula against
values computed by hand, the heads read off the methods, and the estimate in summary.json."""
from __future__ import annotations

import json

import pytest
import torch

from poxm_core.training import run_trial
from poxm_core.training.memory import (CHUNK_GPU, HeadShape, PeakMemory, TrialShape, estimate_peak_bytes,
                                       head_shapes, shape_from_stats, stats_of)
from test_trainer import PREP, SMALL, spec_of
from trial_fixtures import tiny_config

HEADS = (HeadShape(32, 4, False, True), HeadShape(32, 30, True, True))
SHAPE = TrialShape(n_train=100, n_test=50, n_fit=80, n_val=20, L=30, dim=8, D=40, nnz=5, K=10, slate=5,
                   batch=16, hidden=32, heads=HEADS, eval_threads=4)


def test_the_formula_by_hand():
    data = 150 * (4 * 8 + 12 * 5 + 12 * 10) + 24 * 5 * (80 + 20)       # 31,800 + 12,000
    heads = 2 * 20 * 30 * 33                                            # 39,600
    stacks = 2 * 16 * 32 * (40 + 8)                                     # 49,152
    step = 2 * 4 * 16 * (4 * (32 + 4) + 30 * 4)                         # 33,792
    chunk = max(50 * 10 * 32, 50 * 30)                                   # 16,000 elements
    ev = 2 * 3 * 4 * chunk                                               # 2 threads: no more than heads
    assert data + heads + stacks + step + ev == 550_344
    assert estimate_peak_bytes(SHAPE) == 550_344


def test_the_evaluation_chunk_is_capped_and_linear_heads_read_no_sparse_input():
    from dataclasses import replace
    big = replace(SHAPE, n_test=10**6, heads=(HeadShape(8, 4, False, False),), eval_threads=1)
    # no network head: no sparse input (12 nnz) and no stack; the chunk is CHUNK_GPU elements at most
    want = (10**6 + 100) * (4 * 8 + 12 * 10) + 24 * 5 * 100 + 20 * 30 * 9 + 2 * 4 * 16 * 4 * (8 + 4) \
        + 3 * 4 * CHUNK_GPU
    assert estimate_peak_bytes(big) == want


def test_heads_and_stats_of_a_tiny_trial():
    cfg = tiny_config(SMALL, epochs=1)
    spec = spec_of(cfg, "poxm", "banditnet", "dm")
    st = stats_of(PREP)
    assert (st["N_train"], st["N_test"], st["L"], st["dim"]) == (PREP.Z_train.shape[0], PREP.Z_test.shape[0],
                                                              PREP.n_labels, PREP.dim)
    hs = {h: s for h, s in zip([h.method for h in spec.heads], head_shapes(cfg, spec, 30, 8))}
    H = cfg.training.hidden
    assert hs["poxm"] == HeadShape(H, 4, False, True)                       # p = 4
    # sampled softmax: the logged slate and 6 drawn negatives, not every label
    assert hs["banditnet"] == HeadShape(H, cfg.model.slate_size + 6, False, True)
    assert hs["dm"] == HeadShape(H, cfg.model.slate_size, False, True)      # the logged slate


def test_summary_records_the_estimate(tmp_path):
    cfg = tiny_config(SMALL, epochs=1)
    spec = spec_of(cfg, "poxm")
    run_trial(cfg, spec, PREP, tmp_path, progress=False)
    mem = json.loads((tmp_path / "summary.json").read_text())["memory"]
    import os
    from poxm_core.training.reporting import eval_threads
    want = estimate_peak_bytes(shape_from_stats(cfg, spec, stats_of(PREP), eval_threads() or os.cpu_count()))
    assert mem == {"estimate_mb": round(want / 2**20, 1)}      # on a CPU no measured peak


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.gpu
def test_measured_peak_on_a_gpu():
    dev = torch.device("cuda")
    pm = PeakMemory(dev, 1 << 20)
    x = torch.empty(64 << 20, dtype=torch.uint8, device=dev)
    pm.epoch_done()
    del x
    f = pm.facts()
    assert f["peak_first_epoch_mb"] >= 64 and f["peak_mb"] >= 64 and f["estimate_mb"] == 1.0
