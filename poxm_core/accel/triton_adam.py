"""Fused Triton kernels of Adam: one read of p, g, m, v and one write of p, m, v instead of ten passes.

- `fused_row_adam(...)`: the row-wise Adam of an output layer's sync-free step (`RowAdam.step_static`):
  every slot of `static_unique` updates its row of W, b and both moments in one kernel.
- `fused_adam(...)`: the dense Adam of the network stack's sync-free step (`NetworkStack.step_static`),
  a learning rate per column.
- `fused_slot_rows_adam(...)`: the batched heads' row step (`training.batched.BatchedHeads.step_static`):
  each slot's row of the stacked (H L, h) output layers updated in place with its head's rate and bias
  correction (one value per slot); padding slots read and write nothing.
- `fused_lazy_rows_adam(...)`: the lazy input layer's step (`NetworkStack`, input_adam="lazy"): the
  touched rows of V updated in place from their slots' gradient, a learning rate per column; slots
  that are not a touched row read and write nothing.

Both compute `poxm_core.adam`'s update with `scale_after_divide=True` (IEEE sqrt and division; (1 - b1),
(1 - b2) from the host in double, as torch). Each kernel is built on first use and checked then against
that plain update on a small random problem; where Triton is missing, cannot compile, or the check
disagrees, the function returns False (once with a warning) and the caller runs the plain update.
"""
from __future__ import annotations

import warnings

import torch

from poxm_core.accel.static import static_unique
from poxm_core.adam import adam_update_, row_adam_update_

__all__ = ["fused_row_adam", "fused_adam", "fused_lazy_rows_adam", "fused_slot_rows_adam", "row_kernel_ok",
           "dense_kernel_ok", "lazy_rows_kernel_ok", "slot_rows_kernel_ok"]

_ROW = None       # None: not built yet; False: unavailable or failed its check; else the kernel
_DENSE = None
_LAZY = None
_SLOTS = None


def _next_pow2(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


# ------------------------------------------------------------------------------ row-wise (output layers)

def _row_kernel():
    """Slot j < r (src[j] == j) updates row rows[j] of W, b and their moments from the slot's gradient;
    padding slots do nothing."""
    import triton
    import triton.language as tl

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
        if HAS_WD:
            g = g + wd * p
        m = m + omb1 * (g - m)
        v = v * b2 + omb2 * g * g
        denom = tl.div_rn(tl.sqrt_rn(v), sqrt_c2) + eps
        p = p - tl.div_rn(m, denom) * step
        tl.store(W + off, p, mask=m2)
        tl.store(mW + off, m, mask=m2)
        tl.store(vW + off, v, mask=m2)
        g1 = tl.load(gb + j, mask=valid, other=0.0)
        p1 = tl.load(b + r, mask=valid, other=0.0)
        m1 = tl.load(mb + r, mask=valid, other=0.0)
        v1 = tl.load(vb + r, mask=valid, other=0.0)
        if HAS_WD:
            g1 = g1 + wd * p1
        m1 = m1 + omb1 * (g1 - m1)
        v1 = v1 * b2 + omb2 * g1 * g1
        denom1 = tl.div_rn(tl.sqrt_rn(v1), sqrt_c2) + eps
        p1 = p1 - tl.div_rn(m1, denom1) * step
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
        if HAS_WD:
            g = g + wd * p
        m = m + omb1 * (g - m)                  # torch.lerp(m, g, 1 - b1)
        v = v * b2 + omb2 * g * g               # (1 - b1), (1 - b2) from the host in double, as torch
        denom = tl.div_rn(tl.sqrt_rn(v), sqrt_c2) + eps   # IEEE sqrt and division, as torch's kernels
        p = p - tl.div_rn(m, denom) * tl.div_rn(lr, c1)
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


# ------------------------------------------------------------------------------ lazy rows (input layer)

def _lazy_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def lazy_rows_kernel(p_ptr, m_ptr, v_ptr, g_ptr, rows_ptr, valid_ptr, lr_ptr, sc_ptr, N, ncol, omb1, b2, omb2,
                         eps, wd, HAS_WD: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
        j = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
        cols = tl.program_id(1).to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C)
        jm = j < N
        ok = jm & (tl.load(valid_ptr + j, mask=jm, other=0) != 0)
        r = tl.load(rows_ptr + j, mask=ok, other=0).to(tl.int64)
        cm = cols < ncol
        mask = ok[:, None] & cm[None, :]
        off = r[:, None] * ncol + cols[None, :]
        c1 = tl.load(sc_ptr)
        sqrt_c2 = tl.load(sc_ptr + 1)
        g = tl.load(g_ptr + j[:, None] * ncol + cols[None, :], mask=mask, other=0.0)
        p = tl.load(p_ptr + off, mask=mask, other=0.0)
        m = tl.load(m_ptr + off, mask=mask, other=0.0)
        v = tl.load(v_ptr + off, mask=mask, other=0.0)
        lr = tl.load(lr_ptr + cols, mask=cm, other=0.0)
        if HAS_WD:
            g = g + wd * p
        m = m + omb1 * (g - m)
        v = v * b2 + omb2 * g * g
        denom = tl.div_rn(tl.sqrt_rn(v), sqrt_c2) + eps
        p = p - tl.div_rn(m, denom) * tl.div_rn(lr, c1)[None, :]
        tl.store(p_ptr + off, p, mask=mask)
        tl.store(m_ptr + off, m, mask=mask)
        tl.store(v_ptr + off, v, mask=mask)

    return lazy_rows_kernel


def _launch_lazy(kernel, p, m, v, g, rows, valid, lr, sc, betas, eps, wd) -> None:
    b1, b2 = betas
    N, ncol = g.shape
    block_c = min(256, _next_pow2(ncol))
    block_r = max(1, 2048 // block_c)
    grid = ((N + block_r - 1) // block_r, (ncol + block_c - 1) // block_c)
    kernel[grid](p, m, v, g, rows, valid, lr, sc, N, ncol, 1 - b1, b2, 1 - b2, eps, float(wd), HAS_WD=bool(wd),
                 BLOCK_R=block_r, BLOCK_C=block_c)


def _lazy_reference(p, m, v, g, rows, valid, lr, c1, sqrt_c2, betas, eps, wd) -> None:
    """The plain update the kernel must equal: `adam_update_` on the valid slots' rows (unique)."""
    sel = rows[valid]
    ps, ms, vs = p[sel], m[sel], v[sel]
    adam_update_(ps, g[valid], ms, vs, step=lr / c1, sqrt_c2=sqrt_c2, betas=betas, eps=eps, weight_decay=wd,
                 scale_after_divide=True)
    p[sel], m[sel], v[sel] = ps, ms, vs


def _check_lazy(kernel, device) -> bool:
    """The kernel against `_lazy_reference` on random data: 3 steps, 40 x 300 columns (two column
    blocks and a partial one), slots with padding and a sentinel, a rate per column, weight decay."""
    g = torch.Generator(device=device).manual_seed(0)
    L, C = 40, 300
    p0 = torch.randn(L, C, generator=g, device=device)
    lr = torch.rand(C, generator=g, device=device) * 1e-2
    betas, eps, wd = (0.9, 0.999), 1e-8, 1e-3
    res = []
    for fused in (False, True):
        p, m, v = p0.clone(), torch.zeros_like(p0), torch.zeros_like(p0)
        gg = torch.Generator(device=device).manual_seed(1)
        t = torch.zeros((), dtype=torch.float64, device=device)
        for _ in range(3):
            ids = torch.randint(0, L + 1, (17,), generator=gg, device=device)       # L: the sentinel
            rows, _, src = static_unique(ids)
            valid = (src == torch.arange(rows.numel(), device=device)) & (rows < L)
            grad = torch.randn(rows.numel(), C, generator=gg, device=device)
            t.add_(1.0)
            c1 = (1.0 - torch.pow(betas[0], t)).float()
            sqrt_c2 = (1.0 - torch.pow(betas[1], t)).sqrt().float()
            safe = rows.clamp(max=L - 1)
            if fused:
                _launch_lazy(kernel, p, m, v, grad, safe, valid, lr, torch.stack([c1, sqrt_c2]), betas, eps, wd)
            else:
                _lazy_reference(p, m, v, grad, safe, valid, lr, c1, sqrt_c2, betas, eps, wd)
        res.append((p, m, v))
    return all(torch.allclose(x, y, rtol=1e-6, atol=1e-7) for x, y in zip(*res))


def lazy_rows_kernel_ok(device: torch.device) -> bool:
    """Build the lazy-rows kernel and check it (once per process); False where it cannot be used."""
    global _LAZY
    if _LAZY is None:
        _LAZY = _first_use(_lazy_kernel, _check_lazy, device, "fused lazy-rows Adam")
    return _LAZY is not False


def fused_lazy_rows_adam(p, m, v, g, rows, valid, lr, sc, betas, eps, weight_decay) -> bool:
    """Adam (scale_after_divide=True, step = lr / c1, lr a rate per column) on rows[j] of p, m, v from
    g[j] for every slot j with valid[j] (those rows distinct); `sc` = [c1, sqrt(c2)] float32 on the
    device; p, m, v, g contiguous. False (nothing done) where the kernel cannot be used."""
    if not p.is_cuda or not lazy_rows_kernel_ok(p.device):
        return False
    _launch_lazy(_LAZY, p, m, v, g, rows, valid, lr, sc, betas, eps, weight_decay)
    return True


# ------------------------------------------------------------------------------ slot rows (batched heads)

def _slots_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def slot_rows_kernel(p_ptr, m_ptr, v_ptr, g_ptr, rows_ptr, src_ptr, step_ptr, sq_ptr, N, ncol, omb1, b2, omb2,
                         eps, wd, HAS_WD: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
        j = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
        cols = tl.program_id(1).to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C)
        jm = j < N
        ok = jm & (tl.load(src_ptr + j, mask=jm, other=-1) == j)
        r = tl.load(rows_ptr + j, mask=ok, other=0).to(tl.int64)
        step = tl.load(step_ptr + j, mask=ok, other=0.0)
        sqrt_c2 = tl.load(sq_ptr + j, mask=ok, other=1.0)
        mask = ok[:, None] & (cols < ncol)[None, :]
        off = r[:, None] * ncol + cols[None, :]
        g = tl.load(g_ptr + j[:, None] * ncol + cols[None, :], mask=mask, other=0.0)
        p = tl.load(p_ptr + off, mask=mask, other=0.0)
        m = tl.load(m_ptr + off, mask=mask, other=0.0)
        v = tl.load(v_ptr + off, mask=mask, other=0.0)
        if HAS_WD:
            g = g + wd * p
        m = m + omb1 * (g - m)
        v = v * b2 + omb2 * g * g
        denom = tl.div_rn(tl.sqrt_rn(v), sqrt_c2[:, None]) + eps
        p = p - tl.div_rn(m, denom) * step[:, None]
        tl.store(p_ptr + off, p, mask=mask)
        tl.store(m_ptr + off, m, mask=mask)
        tl.store(v_ptr + off, v, mask=mask)

    return slot_rows_kernel


def _launch_slots(kernel, p, m, v, g, rows, src, step, sq, betas, eps, wd) -> None:
    b1, b2 = betas
    N = g.shape[0]
    ncol = g.numel() // max(N, 1)
    block_c = min(256, _next_pow2(ncol))
    block_r = max(1, 2048 // block_c)
    grid = ((N + block_r - 1) // block_r, (ncol + block_c - 1) // block_c)
    kernel[grid](p, m, v, g, rows, src, step, sq, N, ncol, 1 - b1, b2, 1 - b2, eps, float(wd), HAS_WD=bool(wd),
                 BLOCK_R=block_r, BLOCK_C=block_c)


def _check_slots(kernel, device) -> bool:
    """The kernel against `row_adam_update_` (scale_after_divide=True) on random data: 3 steps of rows
    of width 20 and of width 1 (a bias), slots with padding, a rate and a step count per slot, weight decay."""
    g = torch.Generator(device=device).manual_seed(0)
    betas, eps, wd = (0.9, 0.999), 1e-8, 1e-3
    ok = True
    for C in (20, 1):
        p0 = torch.randn(300, C, generator=g, device=device)
        res = []
        for fused in (False, True):
            p, m, v = p0.clone(), torch.zeros_like(p0), torch.zeros_like(p0)
            gg = torch.Generator(device=device).manual_seed(1)
            for t in range(1, 4):
                rows, _, src = static_unique(torch.randint(0, 300, (9, 6), generator=gg, device=device))
                grad = torch.randn(rows.numel(), C, generator=gg, device=device)
                step = torch.rand(rows.numel(), generator=gg, device=device) * 1e-2 / (1 - betas[0] ** t)
                sq = torch.full((rows.numel(),), (1 - betas[1] ** t) ** 0.5, device=device)
                if fused:
                    _launch_slots(kernel, p, m, v, grad, rows, src, step, sq, betas, eps, wd)
                else:
                    row_adam_update_(p, grad, m, v, rows, src=src, step=step.view(-1, 1), sqrt_c2=sq.view(-1, 1),
                                     betas=betas, eps=eps, weight_decay=wd, scale_after_divide=True)
            res.append((p, m, v))
        ok = ok and all(torch.allclose(x, y, rtol=1e-6, atol=1e-7) for x, y in zip(*res))
    return ok


def slot_rows_kernel_ok(device: torch.device) -> bool:
    """Build the slot-rows kernel and check it (once per process); False where it cannot be used."""
    global _SLOTS
    if _SLOTS is None:
        _SLOTS = _first_use(_slots_kernel, _check_slots, device, "fused slot-rows Adam")
    return _SLOTS is not False


def fused_slot_rows_adam(p, m, v, g, rows, src, step, sqrt_c2, betas, eps, weight_decay) -> bool:
    """`row_adam_update_` with src (the sync-free slots; scale_after_divide=True) in one kernel, with a
    step (lr / c1) and a sqrt(c2) per slot (N,) float32: every real slot (src[j] == j) updates row
    rows[j] of p, m, v (viewed as (rows, g.numel() // N)) from g[j]; padding slots do nothing. False
    (nothing done) where the kernel cannot be used."""
    if not p.is_cuda or not slot_rows_kernel_ok(p.device):
        return False
    _launch_slots(_SLOTS, p, m, v, g, rows, src, step, sqrt_c2, betas, eps, weight_decay)
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
