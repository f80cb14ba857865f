"""The fast paths compute what the plain ones compute.

- The sync-free training step of the CUDA-graph loop (accel/graph.py `GraphedSteps` running the static
  training/step.py `TrainStep`: static RowScorer / RowAdam / NetworkStack steps): run here on CPU
  without a graph (the same kernels a
  capture records), a trial's numbers agree with the eager loop's within float tolerance, and the
  sync-free unique is torch.unique.
- The Monte-Carlo slate metrics' vectorised Gumbel noise is NumPy's `Generator.gumbel` to the last
  ulp, and the thread-pooled chunks sum to the sequential loop's floats.
- A checkpoint written without the zip CRC loads back equal."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import poxm_core.training.epoch as epoch_mod
from poxm_core.metrics.gumbel_noise import _gumbel
from poxm_core.metrics.slate import stochastic_metrics
from poxm_core.training.checkpoint import load_checkpoint, save_checkpoint
from poxm_core.accel.static import static_unique
from poxm_core.policy.heads import HeadParams, RowAdam, RowScorer
from poxm_core.training.command import pick_trial
from poxm_core.training.trainer import run_trial
from tests.trial_fixtures import tiny_config, tiny_prepared


def test_static_unique_is_torch_unique():
    g = torch.Generator().manual_seed(0)
    for shape in [(7, 5), (16, 8), (1, 1), (30, 3)]:
        ids = torch.randint(0, 20, shape, generator=g)
        rows, inv, src = static_unique(ids)
        u, uinv = torch.unique(ids, return_inverse=True)
        r = u.numel()
        assert torch.equal(rows[:r], u) and torch.equal(rows[inv], ids) and torch.equal(inv, uinv)
        assert torch.equal(src[:r], torch.arange(r)) and bool((src[r:] == 0).all())


def test_static_row_step_equals_eager_row_step():
    g = torch.Generator().manual_seed(1)
    L, d, B, m = 50, 4, 6, 5
    W0 = torch.randn(L, d, generator=g)
    outs = []
    for static in (False, True):
        params = HeadParams(W0.clone(), torch.zeros(L))
        opt = RowAdam((L, d), torch.device("cpu"), lr=0.05)
        gg = torch.Generator().manual_seed(2)
        for _ in range(4):
            ids = torch.randint(0, L, (B, m), generator=gg)
            z = torch.randn(B, d, generator=gg)
            sc = RowScorer(params, z, static=static)
            (sc(ids) ** 2).sum().backward()
            opt.step(params, sc)          # one step; the scorer's mode says how its rows are written back
        assert opt.step_count == 4
        outs.append((params.W.clone(), params.b.clone(), opt.m_W.clone(), opt.v_W.clone()))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def _final(df: pd.DataFrame) -> pd.Series:
    fin = df[df["final"]].copy()
    fin["p"] = fin["p"].fillna(-1)
    fin["lam"] = fin["lam"].fillna(-1)
    return fin.set_index(["method", "p", "lam", "split", "metric"])["value"].sort_index()


@pytest.mark.parametrize("epochs", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_static_trial_equals_eager_trial(tmp_path, monkeypatch, epochs):
    prep = tiny_prepared(n_tr=120)
    cfg = tiny_config({"dm": {"lr": 0.01}, "poxm": {"p": [4, 8], "lam": [0.5], "lr": 0.01},
                       "wpoxm": {"p": [4], "lam": [0.5], "lr": 0.01}}, epochs=epochs)
    spec = pick_trial(cfg)
    eager = run_trial(cfg, spec, prep, tmp_path / "eager", progress=False)
    calls = []
    orig = epoch_mod.GraphedSteps.run_epoch

    def counted(self, *a):
        calls.append(1)
        return orig(self, *a)
    monkeypatch.setattr(epoch_mod, "_graphable", lambda *a: True)
    monkeypatch.setattr(epoch_mod.GraphedSteps, "run_epoch", counted)
    static = run_trial(cfg, spec, prep, tmp_path / "static", progress=False)
    assert len(calls) == epochs
    a, b = _final(eager), _final(static)
    assert list(a.index) == list(b.index)
    np.testing.assert_allclose(b.to_numpy(), a.to_numpy(), rtol=1e-4, atol=1e-6)


def test_vectorised_gumbel_is_numpy_gumbel():
    for seed, shape in [(0, (64, 8, 10)), (3, (5, 3, 7)), (11, (1, 1, 1))]:
        want = np.random.default_rng([seed, 2]).gumbel(size=shape)
        got = _gumbel(np.random.default_rng([seed, 2]), shape)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)


def test_thread_pooled_chunks_sum_like_the_sequential_loop():
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    n, L, m = 700, 300, 20
    Y = sp.random(n, L, density=4 / L, format="csr", random_state=1)
    Y.data[:] = 1
    sup = np.stack([rng.choice(L, m, replace=False) for _ in range(n)])
    pr = rng.dirichlet(np.ones(m), size=n)
    inv = rng.uniform(1, 4, L)
    kw = dict(n_slates=6, seed=4, exact_budget=0)
    one = stochastic_metrics(Y, sup, pr, inv, chunk_elems=6 * m * 64 * 100, **kw)     # one chunk
    many = stochastic_metrics(Y, sup, pr, inv, chunk_elems=6 * m * 64, **kw)          # 11 chunks on the pool
    assert one.keys() == many.keys()
    for k in one:
        assert abs(one[k] - many[k]) <= 1e-12 * max(1.0, abs(one[k])), k


def test_checkpoint_without_crc_loads_back(tmp_path):
    state = {"w": torch.randn(50, 7), "rows": [{"a": 1.5}], "epoch": 3}
    path = save_checkpoint(tmp_path, 3, state, {"trial": "t"})
    back = load_checkpoint(path, torch.device("cpu"))
    assert torch.equal(back["w"], state["w"]) and back["rows"] == state["rows"] and back["epoch"] == 3


def test_eval_threads_setting(monkeypatch):
    """POXM_EVAL_THREADS: unset -> 0 (the CPU count); a positive int; anything else a one-line error naming it."""
    import pytest

    from poxm_core.common.errors import PoxmInputError
    from poxm_core.training.eval_threads import GPU_EVAL_THREADS, eval_threads, eval_threads_for
    from poxm_core.training.reporting import map_heads

    monkeypatch.delenv("POXM_EVAL_THREADS", raising=False)
    assert eval_threads() == 0
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    # unset: the CPU count on the host, at most GPU_EVAL_THREADS on a CUDA device (no GPU needed to ask)
    assert (eval_threads_for(None), eval_threads_for("cpu")) == (16, 16)
    assert eval_threads_for("cuda") == eval_threads_for("cuda:1") == GPU_EVAL_THREADS == 4
    monkeypatch.setenv("POXM_EVAL_THREADS", "3")
    assert eval_threads() == 3
    assert eval_threads_for("cuda") == eval_threads_for(None) == 3        # the setting wins everywhere
    assert map_heads(lambda x: x * x, [1, 2, 3, 4]) == [1, 4, 9, 16]
    for bad in ("0", "abc", "-2"):
        monkeypatch.setenv("POXM_EVAL_THREADS", bad)
        with pytest.raises(PoxmInputError, match="POXM_EVAL_THREADS"):
            eval_threads()
