"""Fused Triton kernels of Adam: one read of p, g, m, v and one write of p, m, v instead of ten passes.

- `fused_row_adam(...)`: the row-wise Adam of an output layer's step in slot mode (`RowAdam.step` after
  a slot-mode scorer): every slot of `static_unique` updates its row of W, b and both moments in one kernel.
- `fused_adam(...)`: the dense Adam of the network stack's step on CUDA (`NetworkStack.step`), a learning
  rate per column.
- `fused_slot_rows_adam(...)`, `fused_lazy_rows_adam(...)`: one kernel that updates touched rows in
  place from their slots' gradient (slots that are not a touched row read and write nothing): for the
  batched heads' row step in slot mode (`training.batched.BatchedHeads.step`: rows of the stacked (H L, h)
  output layers, each slot with its head's rate and bias correction) and for the lazy input layer
  (`NetworkStack`, input_adam="lazy": a rate per column).

The three kernels only find their elements; the update itself is ONE Triton function, `_ADAM_BODY`
(built by `_adam_body`), which computes `poxm_core.optim.adam`'s update with `scale_after_divide=True`
(IEEE sqrt and division; (1 - b1), (1 - b2) from the host in double, as torch). Each kernel is built on first use and checked then against
that plain update on a small random problem; where Triton is missing, cannot compile, or the check
disagrees, the function returns False (once with a warning) and the caller runs the plain update.
"""
from __future__ import annotations

import warnings

import torch

from poxm_core.accel.static import static_unique
from poxm_core.optim.adam import adam_update_, row_adam_update_

__all__ = ["fused_row_adam", "fused_adam", "fused_lazy_rows_adam", "fused_slot_rows_adam", "row_kernel_ok",
           "dense_kernel_ok", "touched_rows_kernel_ok"]

_ROW = None       # None: not built yet; False: unavailable or failed its check; else the kernel
_DENSE = None
_TOUCHED = None
_ADAM_BODY = None  # the one Triton Adam update, a module global so that every kernel resolves it by name


def _adam_body():
    """Build (once) the Triton function every kernel calls for the update of its elements:
    (p, g, m, v) -> (p, m, v) with `step` = lr / c1 and `sqrt_c2` = sqrt(1 - b2^t)."""
    global _ADAM_BODY
    if _ADAM_BODY is None:
        import triton
        import triton.language as tl

        @triton.jit
        def adam_body(p, g, m, v, step, sqrt_c2, omb1, b2, omb2, eps, wd, HAS_WD: tl.constexpr):
            if HAS_WD:
                g = g + wd * p
            m = m + omb1 * (g - m)                          # torch.lerp(m, g, 1 - b1)
            v = v * b2 + omb2 * g * g                       # (1 - b1), (1 - b2) from the host in double
            denom = tl.div_rn(tl.sqrt_rn(v), sqrt_c2) + eps  # IEEE sqrt and division, as torch's kernels
            p = p - tl.div_rn(m, denom) * step
            return p, m, v

        _ADAM_BODY = adam_body
    return _ADAM_BODY


def _next_pow2(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


# ------------------------------------------------------------------------------ row-wise (output layers)

def _row_kernel():
    """Slot j < r (src[j] == j) updates row rows[j] of W, b and their moments from the slot's gradient;
    padding slots do nothing."""
    import triton
    import triton.language as tl

    _adam_body()

    @triton.jit
    def kernel(W, mW, vW, b, mb, vb, gW, gb, rows, src, sc, N, d, omb1, b2, omb2, eps, wd,
               HAS_WD: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
        j = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
        jm = j < N
        s = tl.load(src + j, mask=jm, other=-1)
        valid = jm & (s == j)
        r = tl.load(rows + j, mask=valid, other=0).to(tl.int64)
        step = tl.load(sc)
        sqrt_c2 = tl.load(sc + 1)
        cols = tl.arange(0, BLOCK_D)
        m2 = valid[:, None] & (cols < d)[None, :]
        off = r[:, None] * d + cols[None, :]
        g = tl.load(gW + j[:, None] * d + cols[None, :], mask=m2, other=0.0)
        p = tl.load(W + off, mask=m2, other=0.0)
        m = tl.load(mW + off, mask=m2, other=0.0)
        v = tl.load(vW + off, mask=m2, other=0.0)
        p, m, v = _ADAM_BODY(p, g, m, v, step, sqrt_c2, omb1, b2, omb2, eps, wd, HAS_WD)
        tl.store(W + off, p, mask=m2)
        tl.store(mW + off, m, mask=m2)
        tl.store(vW + off, v, mask=m2)
        g1 = tl.load(gb + j, mask=valid, other=0.0)
        p1 = tl.load(b + r, mask=valid, other=0.0)
        m1 = tl.load(mb + r, mask=valid, other=0.0)
        v1 = tl.load(vb + r, mask=valid, other=0.0)
        p1, m1, v1 = _ADAM_BODY(p1, g1, m1, v1, step, sqrt_c2, omb1, b2, omb2, eps, wd, HAS_WD)
        tl.store(b + r, p1, mask=valid)
        tl.store(mb + r, m1, mask=valid)
        tl.store(vb + r, v1, mask=valid)

    return kernel


def _launch_row(kernel, W, mW, vW, b, mb, vb, rows, src, gW, gb, sc, betas, eps, wd) -> None:
    N, d = gW.shape
    b1, b2 = betas
    block_d = _next_pow2(d)
    block_r = max(1, min(64, 4096 // block_d))
    kernel[((N + block_r - 1) // block_r,)](W, mW, vW, b, mb, vb, gW, gb, rows, src, sc, N, d, 1 - b1, b2, 1 - b2,
                                            eps, float(wd), HAS_WD=bool(wd), BLOCK_R=block_r, BLOCK_D=block_d)


def _check_row(kernel, device) -> bool:
    """The kernel against `row_adam_update_` on random data (2 steps, rows of width 20, with padding)."""
    g = torch.Generator(device=device).manual_seed(0)
    L, d, B, m = 300, 20, 9, 6
    W0, b0 = torch.randn(L, d, generator=g, device=device), torch.randn(L, generator=g, device=device)
    betas, eps, lr = (0.9, 0.999), 1e-8, 0.01
    res = []
    for fused in (False, True):
        W, b = W0.clone(), b0.clone()
        mW, vW, mb, vb = (torch.zeros_like(W), torch.zeros_like(W), torch.zeros_like(b), torch.zeros_like(b))
        gg = torch.Generator(device=device).manual_seed(1)
        t = torch.zeros((), dtype=torch.float64, device=device)
        for _ in range(2):
            ids = torch.randint(0, L, (B, m), generator=gg, device=device)
            rows, _, src = static_unique(ids)
            gW = torch.randn(rows.numel(), d, generator=gg, device=device)
            gb = torch.randn(rows.numel(), generator=gg, device=device)
            gW[src != torch.arange(rows.numel(), device=device)] = 0.0     # padding slots get no gradient
            t.add_(1.0)
            step = (lr / (1.0 - torch.pow(betas[0], t))).float()
            sqrt_c2 = (1.0 - torch.pow(betas[1], t)).sqrt().float()
            if fused:
                _launch_row(kernel, W, mW, vW, b, mb, vb, rows, src, gW, gb, torch.stack([step, sqrt_c2]), betas, eps, 0.0)
            else:
                for p, gr, mm, vv in ((W, gW, mW, vW), (b, gb, mb, vb)):
                    row_adam_update_(p, gr, mm, vv, rows, src=src, step=step, sqrt_c2=sqrt_c2, betas=betas, eps=eps,
                                     scale_after_divide=True)
        res.append((W, b, mW, vW, mb, vb))
    return all(torch.allclose(x, y, rtol=1e-6, atol=1e-7) for x, y in zip(*res))


def row_kernel_ok(device: torch.device) -> bool:
    """Build the row kernel and check it (once per process); False where it cannot be used."""
    global _ROW
    if _ROW is None:
        _ROW = _first_use(_row_kernel, _check_row, device, "fused row Adam")
    return _ROW is not False


def fused_row_adam(W, mW, vW, b, mb, vb, rows, src, gW, gb, sc, betas, eps, weight_decay) -> bool:
    """`row_adam_update_` of W and b (with src: the sync-free slots) in one kernel; `sc` = [lr / c1,
    sqrt(c2)] float32 on the device. False (nothing done) where the kernel cannot be used."""
    if not W.is_cuda or not row_kernel_ok(W.device):
        return False
    _launch_row(_ROW, W, mW, vW, b, mb, vb, rows, src, gW, gb, sc, betas, eps, weight_decay)
    return True


# ------------------------------------------------------------------------------ dense (network stack)

def _dense_kernel():
    import triton
    import triton.language as tl

    _adam_body()

    @triton.jit
    def adam_kernel(p_ptr, g_ptr, m_ptr, v_ptr, lr_ptr, sc_ptr, n, ncol, omb1, b2, omb2, eps, wd,
                    HAS_WD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        c1 = tl.load(sc_ptr)
        sqrt_c2 = tl.load(sc_ptr + 1)
        p = tl.load(p_ptr + offs, mask=mask)
        g = tl.load(g_ptr + offs, mask=mask)
        m = tl.load(m_ptr + offs, mask=mask)
        v = tl.load(v_ptr + offs, mask=mask)
        lr = tl.load(lr_ptr + offs % ncol, mask=mask)
        p, m, v = _ADAM_BODY(p, g, m, v, tl.div_rn(lr, c1), sqrt_c2, omb1, b2, omb2, eps, wd, HAS_WD)
        tl.store(p_ptr + offs, p, mask=mask)
        tl.store(m_ptr + offs, m, mask=mask)
        tl.store(v_ptr + offs, v, mask=mask)

    return adam_kernel


def _launch_dense(kernel, p, g, m, v, lr, sc, betas, eps, wd) -> None:
    b1, b2 = betas
    N = p.numel()
    kernel[((N + 1023) // 1024,)](p, g, m, v, lr, sc, N, lr.numel(), 1 - b1, b2, 1 - b2, eps, float(wd),
                                  HAS_WD=bool(wd), BLOCK=1024)


def _check_dense(kernel, device) -> bool:
    """The kernel against `adam_update_` on random data (3 steps of a (50, 24) parameter, a rate per column)."""
    g = torch.Generator(device=device).manual_seed(0)
    p0 = torch.randn(50, 24, generator=g, device=device)
    lr = torch.rand(24, generator=g, device=device) * 1e-2
    grads = [torch.randn(50, 24, generator=g, device=device) for _ in range(3)]
    betas, eps, wd = (0.9, 0.999), 1e-8, 1e-3
    res = []
    for fused in (False, True):
        p, m, v = p0.clone(), torch.zeros_like(p0), torch.zeros_like(p0)
        t = torch.zeros((), dtype=torch.float64, device=device)
        for gr in grads:
            t.add_(1.0)
            c1 = (1.0 - torch.pow(betas[0], t)).float()
            sqrt_c2 = (1.0 - torch.pow(betas[1], t)).sqrt().float()
            if fused:
                _launch_dense(kernel, p, gr, m, v, lr, torch.stack([c1, sqrt_c2]), betas, eps, wd)
            else:
                adam_update_(p, gr, m, v, step=lr / c1, sqrt_c2=sqrt_c2, betas=betas, eps=eps, weight_decay=wd,
                             scale_after_divide=True)
        res.append((p, m, v))
    return all(torch.allclose(x, y, rtol=1e-6, atol=1e-7) for x, y in zip(*res))


def dense_kernel_ok(device: torch.device) -> bool:
    """Build the dense kernel and check it (once per process); False where it cannot be used."""
    global _DENSE
    if _DENSE is None:
        _DENSE = _first_use(_dense_kernel, _check_dense, device, "fused Adam")
    return _DENSE is not False


def fused_adam(p, g, m, v, lr, sc, betas, eps, weight_decay) -> bool:
    """`adam_update_` (scale_after_divide=True, step = lr / c1 with lr a rate per column) in one kernel;
    `sc` = [c1, sqrt(c2)] float32 on the device; p, g contiguous. False (nothing done) where the kernel
    cannot be used."""
    global _DENSE
    if not p.is_cuda or not dense_kernel_ok(p.device):
        return False
    try:
        _launch_dense(_DENSE, p, g, m, v, lr, sc, betas, eps, weight_decay)
    except Exception as exc:   # noqa: BLE001  (a Triton that cannot compile it for this shape: the torch ops)
        _DENSE = False
        warnings.warn(f"fused Adam unavailable ({type(exc).__name__}: {exc}); using torch ops", RuntimeWarning,
                      stacklevel=2)
        return False
    return True


# ------------------------------------------------------------------------------ touched rows, updated in place

def _touched_kernel():
    """Slot j with src[j] == j updates row rows[j] of p, m, v (viewed as (rows, ncol)) from g[j];
    other slots read and write nothing. The step: PER_ROW, step[j] (lr / c1 of the slot's head) and
    sqrt_c2[j]; else lr[col] / c1 with c1, sqrt_c2 = sc[0], sc[1]."""
    import triton
    import triton.language as tl

    _adam_body()

    @triton.jit
    def touched_rows_kernel(p_ptr, m_ptr, v_ptr, g_ptr, rows_ptr, src_ptr, a_ptr, b_ptr, N, ncol, omb1, b2, omb2,
                            eps, wd, PER_ROW: tl.constexpr, HAS_WD: tl.constexpr, BLOCK_R: tl.constexpr,
                            BLOCK_C: tl.constexpr):
        j = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
        cols = tl.program_id(1).to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C)
        jm = j < N
        cm = cols < ncol
        ok = jm & (tl.load(src_ptr + j, mask=jm, other=-1) == j)
        r = tl.load(rows_ptr + j, mask=ok, other=0).to(tl.int64)
        mask = ok[:, None] & cm[None, :]
        off = r[:, None] * ncol + cols[None, :]
        if PER_ROW:      # a_ptr: step (N,), b_ptr: sqrt_c2 (N,)
            step = tl.load(a_ptr + j, mask=ok, other=0.0)[:, None]
            sqrt_c2 = tl.load(b_ptr + j, mask=ok, other=1.0)[:, None]
        else:            # a_ptr: lr (ncol,), b_ptr: [c1, sqrt_c2]
            step = tl.div_rn(tl.load(a_ptr + cols, mask=cm, other=0.0), tl.load(b_ptr))[None, :]
            sqrt_c2 = tl.load(b_ptr + 1)
        g = tl.load(g_ptr + j[:, None] * ncol + cols[None, :], mask=mask, other=0.0)
        p = tl.load(p_ptr + off, mask=mask, other=0.0)
        m = tl.load(m_ptr + off, mask=mask, other=0.0)
        v = tl.load(v_ptr + off, mask=mask, other=0.0)
        p, m, v = _ADAM_BODY(p, g, m, v, step, sqrt_c2, omb1, b2, omb2, eps, wd, HAS_WD)
        tl.store(p_ptr + off, p, mask=mask)
        tl.store(m_ptr + off, m, mask=mask)
        tl.store(v_ptr + off, v, mask=mask)

    return touched_rows_kernel


def _launch_touched(kernel, p, m, v, g, rows, src, a, b, per_row: bool, betas, eps, wd) -> None:
    b1, b2 = betas
    N = g.shape[0]
    ncol = g.numel() // max(N, 1)
    block_c = min(256, _next_pow2(ncol))
    block_r = max(1, 2048 // block_c)
    grid = ((N + block_r - 1) // block_r, (ncol + block_c - 1) // block_c)
    kernel[grid](p, m, v, g, rows, src, a, b, N, ncol, 1 - b1, b2, 1 - b2, eps, float(wd), PER_ROW=per_row,
                 HAS_WD=bool(wd), BLOCK_R=block_r, BLOCK_C=block_c)


def _check_touched(kernel, device) -> bool:
    """The kernel against `row_adam_update_` (scale_after_divide=True) on random data, 3 steps each:
    a step per slot (rows of width 20 and of width 1, a bias) and a rate per column (300 columns: two
    column blocks and a partial one), slots with padding, weight decay."""
    g = torch.Generator(device=device).manual_seed(0)
    betas, eps, wd = (0.9, 0.999), 1e-8, 1e-3
    ok = True
    for C, per_row in ((20, True), (1, True), (300, False)):
        p0 = torch.randn(60, C, generator=g, device=device)
        lr = torch.rand(C, generator=g, device=device) * 1e-2
        res = []
        for fused in (False, True):
            p, m, v = p0.clone(), torch.zeros_like(p0), torch.zeros_like(p0)
            gg = torch.Generator(device=device).manual_seed(1)
            for t in range(1, 4):
                rows, _, src = static_unique(torch.randint(0, 60, (5, 6), generator=gg, device=device))
                grad = torch.randn(rows.numel(), C, generator=gg, device=device)
                c1, sqrt_c2 = 1 - betas[0] ** t, (1 - betas[1] ** t) ** 0.5
                if per_row:
                    step = torch.rand(rows.numel(), generator=gg, device=device) * 1e-2 / c1
                    sq = torch.full((rows.numel(),), sqrt_c2, device=device)
                    coef = dict(step=step.view(-1, 1), sqrt_c2=sq.view(-1, 1))
                    a, b = step, sq
                else:
                    coef = dict(step=lr / torch.tensor(c1, device=device), sqrt_c2=torch.tensor(sqrt_c2, device=device))
                    a, b = lr, torch.tensor([c1, sqrt_c2], dtype=torch.float32, device=device)
                if fused:
                    _launch_touched(kernel, p, m, v, grad, rows, src, a, b, per_row, betas, eps, wd)
                else:
                    row_adam_update_(p, grad, m, v, rows, src=src, betas=betas, eps=eps, weight_decay=wd,
                                     scale_after_divide=True, **coef)
            res.append((p, m, v))
        ok = ok and all(torch.allclose(x, y, rtol=1e-6, atol=1e-7) for x, y in zip(*res))
    return ok


def touched_rows_kernel_ok(device: torch.device) -> bool:
    """Build the touched-rows kernel and check it (once per process); False where it cannot be used."""
    global _TOUCHED
    if _TOUCHED is None:
        _TOUCHED = _first_use(_touched_kernel, _check_touched, device, "fused touched-rows Adam")
    return _TOUCHED is not False


def fused_slot_rows_adam(p, m, v, g, rows, src, step, sqrt_c2, betas, eps, weight_decay) -> bool:
    """`row_adam_update_` with src (the sync-free slots; scale_after_divide=True) in one kernel, with a
    step (lr / c1) and a sqrt(c2) per slot (N,) float32: every real slot (src[j] == j) updates row
    rows[j] of p, m, v (viewed as (rows, g.numel() // N)) from g[j]; padding slots do nothing (the
    batched heads' row step). False (nothing done) where the kernel cannot be used."""
    if not p.is_cuda or not touched_rows_kernel_ok(p.device):
        return False
    _launch_touched(_TOUCHED, p, m, v, g, rows, src, step, sqrt_c2, True, betas, eps, weight_decay)
    return True


def fused_lazy_rows_adam(p, m, v, g, rows, src, lr, sc, betas, eps, weight_decay) -> bool:
    """The same with a rate per column: step = lr / c1, `sc` = [c1, sqrt(c2)] float32 on the device (the
    lazy input layer). False (nothing done) where the kernel cannot be used."""
    if not p.is_cuda or not touched_rows_kernel_ok(p.device):
        return False
    _launch_touched(_TOUCHED, p, m, v, g, rows, src, lr, sc, False, betas, eps, weight_decay)
    return True


def _first_use(build, check, device, what: str):
    """The kernel if Triton builds it and it passes its check against the plain update, else False
    (with one warning saying why)."""
    try:
        kernel = build()
        ok = check(kernel, device)
    except Exception as exc:   # noqa: BLE001  (no Triton, or it cannot compile the kernel)
        warnings.warn(f"{what} unavailable ({type(exc).__name__}: {exc}); using torch ops", RuntimeWarning,
                      stacklevel=3)
        return False
    if not ok:
        warnings.warn(f"{what} disagrees with the torch ops; using torch ops", RuntimeWarning, stacklevel=3)
        return False
    return kernel
