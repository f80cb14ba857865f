"""Adam's update written once (poxm_core/policy/adam.py): against torch.optim.Adam and a hand-computed
step, the row-sparse update against the dense one, the sync-free row update against the host one."""
from __future__ import annotations

import math

import pytest
import torch

from poxm_core.optim.adam import adam_update_, row_adam_update_
from poxm_core.accel.static import static_unique

BETAS, EPS = (0.9, 0.999), 1e-8


def test_first_step_by_hand():
    # t = 1, wd = 0.5: g' = 2 + 0.5 * 1 = 2.5; m = 0.25; v = 0.001 * 6.25 = 0.00625;
    # m_hat = 2.5, v_hat = 6.25 -> p = 1 - 0.1 * 2.5 / (2.5 + 1e-8) = 0.9 (up to eps)
    for after in (False, True):
        p, g, m, v = (torch.tensor([1.0], dtype=torch.float64), torch.tensor([2.0], dtype=torch.float64),
                      torch.zeros(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64))
        adam_update_(p, g, m, v, step=0.1 / (1 - 0.9), sqrt_c2=math.sqrt(1 - 0.999), betas=BETAS, eps=EPS,
                     weight_decay=0.5, scale_after_divide=after)
        assert m.item() == pytest.approx(0.25) and v.item() == pytest.approx(0.00625)
        assert p.item() == pytest.approx(1 - 0.1 * 2.5 / (2.5 + 1e-8), rel=1e-14)
        assert g.item() == 2.0        # the gradient is not modified


@pytest.mark.parametrize("after", [False, True])
def test_dense_equals_torch_adam_over_steps(after):
    gen = torch.Generator().manual_seed(0)
    p0 = torch.randn(7, 5, generator=gen, dtype=torch.float64)
    grads = [torch.randn(7, 5, generator=gen, dtype=torch.float64) for _ in range(5)]
    ref = p0.clone().requires_grad_()
    opt = torch.optim.Adam([ref], lr=0.03, betas=BETAS, eps=EPS, weight_decay=0.01)
    p, m, v = p0.clone(), torch.zeros_like(p0), torch.zeros_like(p0)
    for t, g in enumerate(grads, 1):
        ref.grad = g.clone()
        opt.step()
        adam_update_(p, g, m, v, step=0.03 / (1 - BETAS[0] ** t), sqrt_c2=(1 - BETAS[1] ** t) ** 0.5, betas=BETAS,
                     eps=EPS, weight_decay=0.01, scale_after_divide=after)
    torch.testing.assert_close(p, ref.detach(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("static", [False, True])
def test_row_update_touches_only_its_rows_and_equals_dense_adam_on_them(static):
    gen = torch.Generator().manual_seed(1)
    L, d = 40, 3
    p, m, v = torch.randn(L, d, generator=gen), torch.rand(L, d, generator=gen), torch.rand(L, d, generator=gen)
    ids = torch.tensor([[3, 17, 3], [25, 17, 8]])
    kw = dict(step=0.01, sqrt_c2=0.3, betas=BETAS, eps=EPS, weight_decay=0.1)
    if static:   # static_unique's fixed-size slots: 4 real rows, 2 padding slots that must write nothing new
        rows, _, src = static_unique(ids)
        g = torch.randn(rows.numel(), d, generator=gen)
        g[4:] = 0.0
    else:
        rows = torch.unique(ids)
        src = None
        g = torch.randn(rows.numel(), d, generator=gen)
    P, M, V = p.clone(), m.clone(), v.clone()
    row_adam_update_(P, g, M, V, rows, src=src, **kw)
    touched = torch.tensor([3, 8, 17, 25])
    others = torch.tensor([i for i in range(L) if i not in touched.tolist()])
    for new, old in ((P, p), (M, m), (V, v)):
        assert torch.equal(new[others], old[others])          # untouched rows keep their bits
    ps, ms, vs = p[touched].clone(), m[touched].clone(), v[touched].clone()
    adam_update_(ps, g[:4], ms, vs, **kw)                      # the sorted unique rows are the first 4 slots
    assert torch.equal(P[touched], ps) and torch.equal(M[touched], ms) and torch.equal(V[touched], vs)


def test_kernels_step_aside_for_the_plain_update():
    """Without a GPU (or without Triton, or when a kernel fails its first-use check) the fused functions
    do nothing and say so (False): the caller runs the plain update."""
    from poxm_core.accel import triton_adam as T

    p = torch.zeros(4, 3)
    assert T.fused_adam(p, p, p, p, torch.ones(3), torch.ones(2), BETAS, EPS, 0.0) is False
    assert T.fused_row_adam(p, p, p, p[:, 0], p[:, 0], p[:, 0], None, None, p, p[:, 0], None, BETAS, EPS, 0.0) is False
    assert torch.equal(p, torch.zeros(4, 3))

    def no_triton():
        raise ImportError("No module named 'triton'")
    with pytest.warns(RuntimeWarning, match="fused Adam unavailable .*ImportError"):
        assert T._first_use(no_triton, lambda k, d: True, torch.device("cpu"), "fused Adam") is False
    with pytest.warns(RuntimeWarning, match="disagrees with the torch ops"):
        assert T._first_use(lambda: "kernel", lambda k, d: False, torch.device("cpu"), "fused Adam") is False
    assert T._first_use(lambda: "kernel", lambda k, d: True, torch.device("cpu"), "fused Adam") == "kernel"
