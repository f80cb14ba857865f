"""The network stack's lazy input layer (`training.input_adam: lazy`): Adam on the rows of V that a
batch's features touch, the rest bit-identical; checked against an independent float64 lazy Adam over
plain per-head models, the sync-free (CUDA-graph) step against the eager one with the static bag's
padding, and batches that touch nothing."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from poxm_core.model.core import csr_to_bag
from poxm_core.policy import NetworkStack

CPU = torch.device("cpu")
B1, B2, EPS = 0.9, 0.999, 1e-8


def _data(n=10, D=12, seed=0, feature0=True):
    rng = np.random.default_rng(seed)
    A = rng.random((n, D)) * (rng.random((n, D)) < 0.3)
    A[:, D - 3:] = 0.0                     # three features no instance holds
    A[4] = 0.0                             # an instance with no features
    A[0, 0] = 0.7
    if not feature0:
        A[:, 0] = 0.0
    return sp.csr_matrix(A.astype(np.float32))


def _stack(D, lrs, wd, lazy=True, h=3):
    gens = [torch.Generator().manual_seed(20 + k) for k in range(len(lrs))]
    return NetworkStack(D, 2, h, ["fresh"] * len(lrs), gens, lrs, wd, CPU, input_adam="lazy" if lazy else "dense")


def _loss(out, targets):
    return (torch.tanh(out) * targets).sum() + 0.5 * (out ** 2).mean()


@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_lazy_input_layer_is_lazy_adam_on_touched_rows(wd):
    X = _data()
    n, D = X.shape
    lrs, h = [0.02, 0.005], 3
    stack = _stack(D, lrs, wd, h=h)
    z = torch.zeros(n, 2)
    tg = torch.randn(n, len(lrs) * h, generator=torch.Generator().manual_seed(1))
    # reference, float64: V by lazy Adam (touched rows only, wd on them only), c by dense Adam
    V = stack.V.detach().double().clone()
    c = stack.c.detach().double().clone()
    mV, vV, mc, vc = (torch.zeros_like(V), torch.zeros_like(V), torch.zeros_like(c), torch.zeros_like(c))
    lr = torch.tensor(np.repeat(lrs, h), dtype=torch.float64)
    A = torch.tensor(X.toarray(), dtype=torch.float64)
    An = A / A.norm(dim=1, keepdim=True).clamp(min=1e-300)
    batches = [[0, 1, 2, 3], [5, 6], [4], [7, 8, 9, 0], [1, 5]]
    moved = False
    for t, rows in enumerate(batches, start=1):
        before = stack.V.detach().clone()
        sub = X[rows]
        out = stack(z[rows], csr_to_bag(sub, CPU))
        _loss(out, tg[rows]).backward()
        stack.step()
        Vr, cr = V.clone().requires_grad_(), c.clone().requires_grad_()
        _loss(An[rows] @ Vr + cr, tg[rows].double()).backward()
        touched = np.unique(sub.indices[sub.data != 0])
        for p, g, m, v, sel in ((V, Vr.grad, mV, vV, touched), (c, cr.grad, mc, vc, slice(None))):
            g = g[sel] + wd * p[sel]
            m[sel] = B1 * m[sel] + (1 - B1) * g
            v[sel] = B2 * v[sel] + (1 - B2) * g * g
            p[sel] = p[sel] - lr / (1 - B1 ** t) * m[sel] / ((v[sel] / (1 - B2 ** t)).sqrt() + EPS)
        np.testing.assert_allclose(stack.V.detach().numpy(), V.numpy(), rtol=0, atol=2e-6)
        np.testing.assert_allclose(stack.c.detach().numpy(), c.numpy(), rtol=0, atol=2e-6)
        untouched = np.setdiff1d(np.arange(D), touched)
        assert torch.equal(stack.V.detach()[untouched], before[untouched]), t
        moved |= not torch.equal(stack.V.detach()[touched], before[touched])
    assert moved and stack.step_count == len(batches)
    # the lazy update is not the dense one once moments exist (the test above could not pass for dense)
    dense = _stack(D, lrs, wd, lazy=False, h=h)
    for rows in batches:
        _loss(dense(z[rows], csr_to_bag(X[rows], CPU)), tg[rows]).backward()
        dense.step()
    assert not torch.allclose(dense.V, stack.V, atol=1e-4)


def _padded(bag, pad):
    idx, off, w = bag
    E = idx.numel() + pad
    idx = torch.cat([idx, torch.zeros(pad, dtype=idx.dtype)])      # the static bag's padding: row 0, weight 0
    w = torch.cat([w, torch.zeros(pad, dtype=w.dtype)])
    return idx, off, w, torch.searchsorted(off, torch.arange(E), right=True) - 1


def test_static_lazy_step_equals_eager_and_padding_touches_nothing():
    X = _data(seed=3, feature0=False)      # feature 0: held by no instance, read by every padding entry
    n, D = X.shape
    a, b = _stack(D, [0.01, 0.03], 0.01), _stack(D, [0.01, 0.03], 0.01)
    z = torch.zeros(n, 2)
    tg = torch.randn(n, 6, generator=torch.Generator().manual_seed(2))
    v0 = a.V.detach().clone()
    for rows in ([0, 1, 2, 3, 4], [5, 6, 7], [8, 9, 1]):
        bag = csr_to_bag(X[rows], CPU)
        _loss(a(z[rows], bag), tg[rows]).backward()
        a.step()
        _loss(b(z[rows], _padded(bag, 7), static=True), tg[rows]).backward()
        b.step()
        torch.testing.assert_close(b.V, a.V, rtol=0, atol=1e-6)
        torch.testing.assert_close(b.c, a.c, rtol=0, atol=1e-6)
    assert torch.equal(b.V.detach()[0], v0[0]) and torch.equal(a.V.detach()[0], v0[0])
    assert not torch.equal(b.V.detach(), v0)


def test_batches_that_touch_no_feature_leave_V_alone():
    X = _data()
    n, D = X.shape
    z = torch.zeros(n, 2)
    for static in (False, True):
        st = _stack(D, [0.01], 0.01)
        tg = torch.randn(n, 3, generator=torch.Generator().manual_seed(5))
        bag = csr_to_bag(X[[0, 1, 2]], CPU)
        out = st(z[[0, 1, 2]], _padded(bag, 3) if static else bag, static=static)
        _loss(out, tg[[0, 1, 2]]).backward()
        st.step()
        before = st.V.detach().clone()
        empty = csr_to_bag(X[[4]], CPU)                    # the instance with no features
        out = st(z[[4]], _padded(empty, 5) if static else empty, static=static)
        _loss(out, tg[[4]]).backward()
        st.step()
        assert st.step_count == 2
        assert torch.equal(st.V.detach(), before), static


@pytest.mark.slow
def test_lazy_trial_graph_path_equals_eager_and_differs_from_dense(tmp_path, monkeypatch):
    """A whole trial with the lazy input layer (batched heads): the sync-free path the CUDA graph captures
    (run here on CPU without a graph) gives the eager path's numbers; dense Adam gives other numbers."""
    import poxm_core.training.epoch as epoch_mod
    from poxm_core.training.command import pick_trial
    from poxm_core.training.trainer import run_trial
    from tests.poxm_core.training.test_fast_paths import _final
    from tests.trial_fixtures import tiny_config, tiny_prepared

    prep = tiny_prepared(n_tr=24, n_te=12)  # batches of 2 instances: each touches about 9 of the 12 features
    methods = {"dm": {"lr": 0.01}, "poxm": {"p": [4, 8], "lam": [0.5], "lr": 0.01}}
    lazy = tiny_config(methods, epochs=1, input_adam="lazy", batched_heads=True, batch_size=2)
    eager = _final(run_trial(lazy, pick_trial(lazy), prep, tmp_path / "eager", progress=False))
    dense_cfg = tiny_config(methods, epochs=1, batched_heads=True, batch_size=2)
    dense = _final(run_trial(dense_cfg, pick_trial(dense_cfg), prep, tmp_path / "dense", progress=False))
    monkeypatch.setattr(epoch_mod, "_graphable", lambda *a: True)
    static = _final(run_trial(lazy, pick_trial(lazy), prep, tmp_path / "static", progress=False))
    np.testing.assert_allclose(static.to_numpy(), eager.to_numpy(), rtol=1e-4, atol=1e-6)
    assert list(dense.index) == list(eager.index)
    assert np.abs(dense.to_numpy() - eager.to_numpy()).max() > 1e-4
