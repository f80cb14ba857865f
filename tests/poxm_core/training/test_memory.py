"""A trial's peak GPU memory estimated from its shapes (poxm_core/training/memory.py): the formula against
values computed by hand (a small shape, and the 186 heads of the wide grid at Corel5k's shape), the heads
read off the methods, the bytes a batched step and an evaluation allocate counted on a CPU against it,
the estimate in summary.json, and a trial's start in a reused process."""
from __future__ import annotations

import gc
import json
import math
import threading
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from poxm_core.config.schema import load_config
from poxm_core.metrics.position_probs import elements_per_row
from poxm_core.training import run_trial, trial_specs
from poxm_core.training.memory import (CHUNK_GPU, HeadShape, PeakMemory, TrialShape,
                                       estimate_parts, estimate_peak_bytes, head_shapes, shape_from_stats,
                                       start_trial, stats_of)
from poxm_core.training.spec import TrialSpec
from test_trainer import PREP, SMALL, spec_of
from trial_fixtures import tiny_config, tiny_prepared

MiB = 1 << 20
POXM, POTEC = HeadShape(32, 4, network=True, support=4), HeadShape(32, 10, network=True, support=10, feat=64, pairs=True)
FULL = HeadShape(32, 30, every_label=True, network=True, support=30, all_labels=True)
SAMPLED = HeadShape(32, 5, network=True, draws=6, support=30, all_labels=True)
LOGGING = HeadShape(0, 0, support=10, trained=False)
SHAPE = TrialShape(n_train=100, n_test=50, n_fit=80, n_val=20, L=30, dim=8, D=40, nnz=5, K=10, slate=5, batch=16,
                   hidden=32, heads=(POXM, POTEC, FULL, SAMPLED, LOGGING), eval_threads=4, mc_slates=8, kmax=5,
                   labels_max=3)


def test_the_chunk_is_the_evaluations():
    from poxm_core.training.evaluation import _CHUNK_ELEMS_GPU
    assert CHUNK_GPU == _CHUNK_ELEMS_GPU


def test_the_formula_by_hand():
    # data: the training rows (Z, candidates, rho, row ids and the sparse input at 12 a entry + its pointer),
    # the test rows, the fit log, the validation rows, the epoch's sparse input twice, the sampled negatives
    data = 100 * (4 * 8 + 12 * 10 + 8 + 68) + 50 * (32 + 8 + 68) + 80 * (8 + 28 * 5) + 8 * 20 \
        + 2 * 80 * (12 * 5 + 16) + 4 * 6 * 5                               # 52,480
    params = 4 * 12 * 30 * 33 + 4 * 16 * 32 * (40 + 1)                      # 4 trained heads, 4 stack blocks
    cublas = (3 + 2 * 4) * 32 * MiB                                         # 4 evaluation threads
    row = 20 * 32 + 96                                                      # a gathered row of the step
    step = (16 * 4 * row + 48 * 16 * 4                                      # POXM p = 4
            + 16 * 10 * row + 48 * 16 * 10 + 16 * 16 * 5 * 10               # POTEC: all K candidates, its loss
            + 24 * 30 * 33 + 48 * 16 * 30                                   # full softmax: every label
            + (16 * 5 + 6) * row + 48 * 16 * 11                             # sampled: the slate + 6 draws
            + 4 * 4 * 32 * (2 * 1024 + 4 * 16)                              # 4 stack blocks, 1,024 padded entries
            + 8 * 16 * 10 * 10)                                             # POTEC's (B, K, K) structure
    frozen = 4 * 4 * 30 * 33 + 4 * 20 * (32 + 64 + 32 + 32)
    overlap = frozen + 4 * (8 * 20 * 64 + 6 * 20 * 10 * 64)                 # POTEC's validation is the largest
    def quad(nodes):                                                         # 3 true labels at most
        return 8 * nodes * (2 * 3 * 5 + 8 * 3 + 3 * 5)
    assert 50 < 2 ** 25 // elements_per_row(10, 3, 5)                       # 50 rows in one chunk
    potec_nodes = 8 * 766          # a row's range at most log log(5 / 1e-15) + 745 + 17.3 (position_probs.py)
    # one thread's POTEC head at the larger of its chunk at 300 nodes a row and one row at its nodes (rows
    # that need more run in groups within the chunk's bound), the 3 others at 300; POTEC's features are
    # the widest
    assert 50 * 300 > potec_nodes
    final = 8 * (20 + 50) * 64 + quad(max(50 * 300, potec_nodes)) + 3 * (8 * (20 + 50) * 64 + quad(50 * 300))
    want = data + params + cublas + step + max(step + overlap, final)
    assert (data, step, final) == (52_480, 1_401_104, 33_263_360)
    assert estimate_parts(SHAPE) == {"data": data, "params": params, "cublas": cublas, "step": step,
                                     "overlap": overlap, "final": final}
    assert estimate_peak_bytes(SHAPE) == want == 403_947_184


def test_potec_rows_take_the_quadrature_nodes_the_estimate_gives_them():
    """POTEC's test-time scores put a label of the second round e^-600 below the first: the exact slate
    metrics' quadrature then spans over 600 panels of 8 nodes for a chunk holding it (position_probs._nodes),
    16 times the 300 nodes a row its chunks are sized for, and at most the estimate's count; such a row is
    computed apart from the ordinary ones (node_bounded_groups)."""
    import numpy as np
    from poxm_core.methods.potec import two_stage_scores
    from poxm_core.metrics.position_probs import _nodes
    from poxm_core.training.memory import peaked_nodes

    cc = torch.tensor([[0, 1, 0, 1, 0, 1, 0, 1]])                # 8 candidates in 2 clusters: round 3 for the 5th
    s = two_stage_scores(torch.tensor([[0.3, -0.2] * 4], dtype=torch.float64), torch.linspace(1, 0, 8)[None], cc)
    probs = torch.softmax(s, dim=1).numpy()
    assert probs[0, 4] == 0.0 and 0 < probs[0, 2] < 1e-250            # rounds 3 underflow, round 2 at e^-600
    rows = np.vstack([probs, np.full((1, 8), 1 / 8)])                # a flat row beside it in the chunk
    t, _, _ = _nodes(rows, 5, 1.0, 8)
    assert 16 * 300 < t.shape[1] <= peaked_nodes(5) == 8 * 766
    # the slate metrics compute such rows apart when the chunk sized at 300 nodes a row cannot hold them
    # at theirs: the flat row keeps its own few nodes, and no group is over the bound but a lone row
    from poxm_core.metrics.position_probs import elements_per_row, node_bounded_groups, row_nodes
    bound = 2 * elements_per_row(8, 2, 5, 300)
    groups = node_bounded_groups(rows, 2, 5, bound)
    assert [g.tolist() for g in groups] == [[1], [0]]
    assert row_nodes(rows, 5).tolist()[::-1] == [row_nodes(rows[1:], 5)[0], t.shape[1]]


def test_chunks_cap_the_evaluation_and_monte_carlo_takes_over_wide_tables():
    from dataclasses import replace
    from poxm_core.metrics.slate import GPU_MC_CHUNK_ELEMS
    big = replace(SHAPE, n_test=10**6, L=10**4, heads=(FULL,), eval_threads=1)
    feats = 8 * (20 + 10**6) * 32
    # 10^6 x 10^4 logits: chunks of CHUNK_GPU elements, 4 float32 arrays of them (more than the Monte-Carlo's)
    mc = 24 * (GPU_MC_CHUNK_ELEMS // (8 * 30) // 64 * 64) * 8 * 30
    assert mc < 16 * CHUNK_GPU and estimate_parts(big)["final"] == feats + 16 * CHUNK_GPU
    # a table of 10^5 columns: Monte-Carlo in one block of 64 rows, 3 float64 arrays of (64, 8 slates, 10^5)
    wide = replace(big, heads=(replace(FULL, support=10**5),))
    assert estimate_parts(wide)["final"] == feats + 24 * 64 * 8 * 10**5 > feats + 16 * CHUNK_GPU


WIDE = {"p": [2, 5, 10, 20, 50, 100], "lam": [0.5, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5]}
WIDE_METHODS = {"logging": {}, "dm": {}, "banditnet": {"lam": WIDE["lam"]}, "pm_banditnet": WIDE, "poxm": WIDE,
                "wpoxm": WIDE, "dr_poxm": {"p": WIDE["p"]}, "supervised_logs": {},
                "potec": {"k": WIDE["p"], "lam": WIDE["lam"]}, "skyline": {}, "skyline_e2e": {}}
COREL5K = {"N_train": 3750, "N_test": 1250, "L": 374, "dim": 256, "D": 499, "nnz_per_row": 8.2702, "K": 100,
           "n_fit": 3375, "n_val": 375}


def _config(methods, slate=5, **training):
    return load_config(data={"name": "memory", "seeds": [0], "device": "cpu",
                             "datasets": [{"name": "tiny", "variants": [{"name": "A", "alpha": 0.5}]}],
                             "methods": methods, "model": {"slate_size": slate},
                             "training": {"epochs": 1, "batched_heads": True, **training}})


def _spec(cfg):
    return TrialSpec("tiny", "A", 0, tuple(h for s in trial_specs(cfg, "method") for h in s.heads))


def test_the_wide_grid_step_by_hand():
    """configs/confirmatory.yaml's grid at Corel5k's shape (186 heads, hidden 128, batches of 64): the rows a
    step gathers, method by method, and the step's terms."""
    cfg = _config(WIDE_METHODS, hidden=128, batch_size=64)
    s = shape_from_stats(cfg, _spec(cfg), COREL5K, eval_threads=16)
    assert len(s.heads) == 186 and sum(h.trained for h in s.heads) == 185
    sparse = [h for h in s.heads if h.trained and not h.every_label]
    ps = sum(WIDE["p"])                                                      # 187
    ids = 7 * ps + 7 * ps + ps + 42 * 100 + 100 + 5   # poxm, wpoxm, dr_poxm, POTEC (K, not k), supervised_logs, dm
    assert sum(64 * h.scores + h.draws for h in sparse) == 64 * ids == 455_040
    every = [h for h in s.heads if h.every_label]                            # pm_banditnet, banditnet, skylines
    assert len(every) == 42 + 7 + 2 and sum(h.network for h in s.heads) == 184
    entries = 1024                                                           # 1.2 x 64 x 8.27 entries, padded
    step = (455_040 * (20 * 128 + 96 + 48) + 51 * (24 * 374 * 129 + 48 * 64 * 374)
            + 184 * 4 * 128 * (2 * entries + 4 * 64)
            + 42 * 16 * 64 * 5 * 100 + 8 * 64 * 100 * 100                   # POTEC's loss
            + 4 * 64 * 128 * (ps + 6 * 5))                                   # DR-POXM's reward reads
    assert estimate_parts(s)["step"] == step


def test_heads_and_stats_of_a_tiny_trial():
    cfg = tiny_config(SMALL, epochs=1)
    spec = spec_of(cfg, "logging", "poxm", "banditnet", "dm")
    st = stats_of(PREP)
    assert (st["N_train"], st["N_test"], st["L"], st["dim"]) == (PREP.Z_train.shape[0], PREP.Z_test.shape[0],
                                                              PREP.n_labels, PREP.dim)
    assert st["labels_max"] == max(int(Y.getnnz(axis=1).max()) for Y in (PREP.Y_train, PREP.Y_test))
    K = PREP.policy_train.cand.shape[1]
    hs = dict(zip([h.method for h in spec.heads], head_shapes(cfg, spec, 16, 6, K, 12)))
    H, slate = cfg.training.hidden, cfg.model.slate_size
    assert hs["logging"] == HeadShape(0, 0, support=K, trained=False)     # rho over C(x), evaluated only
    assert hs["poxm"] == HeadShape(H, 4, network=True, support=4)           # p = 4, softmax over Phi^4
    # sampled softmax: the logged slate and 6 draws a step, evaluated on its top labels (L = 16 here)
    assert hs["banditnet"] == HeadShape(H, slate, network=True, draws=6, support=10, all_labels=True)
    assert hs["dm"] == HeadShape(H, slate, network=True)                    # the logged slate; greedy at test


def test_potec_and_the_candidate_losses_read_every_candidate():
    cfg = _config({"logging": {}, "dm": {"loss_on": "candidates"}, "potec": {"k": [2], "lam": [0.5]},
                   "supervised_logs": {}, "dr_poxm": {"p": [3]}, "skyline_e2e": {}}, hidden=16)
    hs = dict(zip([h.method for h in _spec(cfg).heads], head_shapes(cfg, _spec(cfg), 30, 8, 10, 40)))
    assert hs["potec"] == HeadShape(16, 10, network=True, support=10, feat=32, pairs=True)   # + the reward model's
    assert hs["dm"].scores == hs["supervised_logs"].scores == 10
    assert hs["dr_poxm"] == HeadShape(16, 3, network=True, support=3, reward=True)
    assert hs["skyline_e2e"] == HeadShape(16, 30, every_label=True, own=40 * 16)     # its own V (D, h)


def test_summary_records_the_estimate(tmp_path):
    cfg = tiny_config(SMALL, epochs=1)
    spec = spec_of(cfg, "poxm")
    run_trial(cfg, spec, PREP, tmp_path, progress=False)
    mem = json.loads((tmp_path / "summary.json").read_text())["memory"]
    import os
    from poxm_core.training.eval_threads import eval_threads
    want = estimate_peak_bytes(shape_from_stats(cfg, spec, stats_of(PREP), eval_threads() or os.cpu_count()))
    assert mem == {"estimate_mb": round(want / 2**20, 1)}      # on a CPU no measured peak


# ---------------------------------------------------------------------- the bytes a trial allocates, counted

class LiveBytes(TorchDispatchMode):
    """The bytes of the storages created under the mode that are alive, and their peak: each new storage
    counted once (views and in-place results share it), uncounted when it is freed."""

    def __init__(self) -> None:
        super().__init__()
        self.cur = self.peak = 0
        self._seen: dict[int, int] = {}
        self._lock = threading.Lock()

    def restart(self) -> int:
        self.peak = self.cur
        return self.cur

    def _add(self, t: torch.Tensor) -> None:
        st = t.untyped_storage()
        key, n = st.data_ptr(), st.nbytes()
        with self._lock:
            if n == 0 or key in self._seen:
                return
            self._seen[key] = n
            self.cur += n
            self.peak = max(self.peak, self.cur)
        weakref.finalize(st, self._gone, key)

    def _gone(self, key: int) -> None:
        with self._lock:
            self.cur -= self._seen.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._add(t)
        return out


def test_live_bytes_counts_what_is_alive():
    with LiveBytes() as mode:
        a = torch.empty(1000, 250)                  # 1,000,000 bytes
        b = torch.empty(500, 250)
        del a
        c = b * 2                                   # 500,000 more: 1,000,000 alive again, never more
        c.add_(1)                                   # in place: nothing new
        assert mode.cur == 1_000_000
    assert mode.peak == 1_500_000


def _fused_slot_rows(p, m, v, g, rows, src, step, sqrt_c2, betas, eps, weight_decay):
    """The fused row-Adam kernel's update (accel/triton_adam.py: in place, nothing allocated but its
    launch), emulated in blocks of 64 slots: what a GPU step allocates, not the CPU fallback's gathers."""
    from poxm_core.optim.adam import row_adam_update_
    real = (src == torch.arange(src.numel())).nonzero().view(-1)
    shape = (-1,) + (1,) * (p.dim() - 1)
    for a in range(0, real.numel(), 64):
        j = real[a:a + 64]
        row_adam_update_(p, g.index_select(0, j), m, v, rows.index_select(0, j), step=step.index_select(0, j).view(shape),
                         sqrt_c2=sqrt_c2.index_select(0, j).view(shape), betas=betas, eps=eps, weight_decay=weight_decay)
    return True


MANY = {"logging": {}, "dm": {}, "banditnet": {"lam": [0.5, 1.5]}, "pm_banditnet": {"p": [2, 8], "lam": [0.5, 1.5]},
        "poxm": {"p": [2, 4, 8], "lam": [0.5, 1.0, 1.5]}, "wpoxm": {"p": [2, 4, 8], "lam": [0.5, 1.0, 1.5]},
        "dr_poxm": {"p": [2, 8]}, "supervised_logs": {}, "potec": {"k": [2, 4], "lam": [0.5, 1.5]}, "skyline": {},
        "skyline_e2e": {}}


@pytest.mark.slow
@pytest.mark.parametrize("policy,dim", [("network", 6), ("linear", 48)])
def test_counted_allocations_of_a_many_head_trial_stay_under_the_estimate(monkeypatch, policy, dim):
    """A tiny trial of 35 heads of every method, batched, its full batches as the CUDA-graph runner's static
    steps (on a CPU without the capture) with the fused row-Adam update: the bytes its parameters, its
    steps and each head's final evaluation (one thread) hold at their peak, counted as torch creates and
    frees them, are at most the estimate's terms; the training terms within a small factor of them. The
    network policy's step is mostly its stack's input gradient, the linear policy's the gathered rows."""
    import poxm_core.training.batched as batched
    import poxm_core.training.epoch as epoch
    from poxm_core.training.reporting import EvalInputs, final_report
    from poxm_core.training.trial_setup import REWARD_KEY, build_heads

    monkeypatch.setattr(epoch, "graphs_enabled", lambda device: True)
    monkeypatch.setattr(batched, "fused_slot_rows_adam", _fused_slot_rows)
    monkeypatch.setenv("POXM_EVAL_THREADS", "1")
    prep = tiny_prepared(n_tr=160, n_te=60, d=dim, T=dim / 6)          # T: rho as flat as at d = 6
    cfg = _config(MANY, slate=3, hidden=32, batch_size=16, mc_slates=8, eval_max_support=10, policy=policy)
    spec = _spec(cfg)
    dev = torch.device("cpu")
    with LiveBytes() as mode:
        with torch.no_grad():
            heads, _ = build_heads(cfg, spec, prep, dev)
        reward = next(h for h in heads if h.key == REWARD_KEY)
        data = epoch.train_data_for(prep, heads, dev)
        others = [h for h in heads if h is not reward]
        epoch.train_epoch(cfg, spec, prep, [reward], 1, dev, None, data)          # phase 1: the reward model
        epoch.train_epoch(cfg, spec, prep, others, 1, dev, reward, data)          # binds the engine
        held = mode.restart()
        epoch.train_epoch(cfg, spec, prep, others, 2, dev, reward, data)
        step = mode.peak - held
        ev = EvalInputs(prep, dev, Z_train=data.Z, X_train=data.X)
        evals = []
        for h in (h for h in heads if not h.hidden):
            base = mode.restart()
            final_report(cfg, spec, [h], reward, ev, 2, {})
            evals.append(mode.peak - base)
        gc.collect()
    s = shape_from_stats(cfg, spec, stats_of(prep), eval_threads=1)
    parts = estimate_parts(s)
    assert len(spec.heads) == 35
    assert held <= parts["data"] + parts["params"] <= 4 * held, (held, parts)
    assert 0.5 * parts["step"] <= step <= parts["step"], (step, parts)
    assert max(evals) <= parts["final"], (max(evals), parts)


# ---------------------------------------------------------------------- a trial's start in a reused process

def test_start_trial_collects_what_a_previous_trial_left():
    freed = []

    class Cycle:
        pass
    a, b = Cycle(), Cycle()
    a.other, b.other = b, a                       # a reference cycle: only the collector frees it
    weakref.finalize(a, freed.append, "a")
    gc.disable()
    try:
        del a, b
        assert freed == []
        resident = start_trial()
        assert freed == ["a"]
    finally:
        gc.enable()
    assert resident == (torch.cuda.memory_allocated() if torch.cuda.is_available() and torch.cuda.is_initialized()
                        else 0)
    assert PeakMemory(torch.device("cpu"), 3 * MiB).facts() == {"estimate_mb": 3.0}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.gpu
def test_measured_peak_on_a_gpu():
    dev = torch.device("cuda")
    left = torch.empty(32 << 20, dtype=torch.uint8, device=dev)    # what an earlier trial still holds
    assert start_trial() >= 32 << 20
    pm = PeakMemory(dev, 1 << 20)
    x = torch.empty(64 << 20, dtype=torch.uint8, device=dev)
    pm.epoch_done()
    del x
    f = pm.facts()
    assert 64 <= f["peak_first_epoch_mb"] < 96 and 64 <= f["peak_mb"] < 96 and f["estimate_mb"] == 1.0
    assert f["resident_at_start_mb"] >= 32
    del left
    assert math.isclose(f["estimate_over_peak"], 1.0 / f["peak_mb"], abs_tol=1e-3)       # rounded to 3 places
