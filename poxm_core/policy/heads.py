"""Head parameters, the row scorer and the row-wise Adam that keep a POXM step independent of L.

The output layer of every policy (`policy.base`), so it lives in the policy package: the policy layer
imports nothing from training (the trainer, above it, uses policies).

A head is s(x, y) = W[y] . z(x) + b[y], W (L, d), b (L,), initialised from the logging model's head
(or randomly: N(0, 0.01^2) weights, zero bias, seeded by the trial seed and the head's key).

`RowScorer(W, b, z)` is the `score(ids)` a method's loss receives. Asked for ids (B, m) it gathers
the unique rows r = unique(ids) into fresh leaf tensors (r, d), (r,) and returns their logits
(B, m); asked for None it returns z @ W.T + b (B, L) with W itself as the leaf. After backward,
`RowAdam.step(scorer)` updates exactly those rows: Adam (Kingma & Ba) with one global step count
for the bias correction and L2 weight decay added to the gradient of the touched rows only — the
"lazy" Adam of sparse embeddings (torch.optim.SparseAdam's update, plus weight decay). Rows that a
step does not touch are left bit-identical; when every row is touched it is torch.optim.Adam.

Static mode (`RowScorer(..., static=True)`, `RowAdam.step_static`; the CUDA-graph training loop of
poxm_core/training/epoch.py): the same update without a host synchronisation or a data-dependent
shape, so that a step can be captured in a CUDA graph. The unique rows come from a sort
(`static_unique`: B*m slots, the first r of them the sorted unique rows, the rest padding that gets no
gradient and is never written back), the Adam bias corrections from a step counter on the device. The
arithmetic is the same; only the float summation order of a row's gradient may differ (atomic adds).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from poxm_core.policy.adam import adam_update_, row_adam_update_

__all__ = ["RowScorer", "RowAdam", "HeadParams", "static_unique"]


@dataclass
class HeadParams:
    W: torch.Tensor   # (L, d) float32
    b: torch.Tensor   # (L,) float32


def static_unique(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sync-free `torch.unique(ids, return_inverse=True)` with a fixed shape: (rows (N,), inv like ids,
    src (N,)), N = ids.numel(). rows[:r] are the r sorted unique ids (rows[r:] = 0, padding), inv maps
    each id to its slot (so rows[inv] == ids), src[j] = j for the r real slots and 0 for the padding
    (the slot a write-back takes instead: padding slots rewrite slot 0's row with slot 0's value)."""
    flat = ids.reshape(-1)
    n = flat.numel()
    srt, order = torch.sort(flat)
    first = torch.ones(n, dtype=torch.bool, device=flat.device)
    first[1:] = srt[1:] != srt[:-1]
    seg = torch.cumsum(first, 0) - 1                                  # slot of each sorted position
    inv = torch.empty_like(seg).scatter_(0, order, seg)
    rows = torch.zeros_like(flat).scatter_(0, seg, srt)               # duplicates write the same value
    ar = torch.arange(n, device=flat.device)
    src = torch.where(ar <= seg[-1], ar, torch.zeros_like(ar))
    return rows, inv.view(ids.shape), src


class RowScorer:
    """score(ids) for one loss evaluation: logits of the requested labels with gradient on their rows.

    ids (B, m) int64 -> (B, m): per row, logit = W[ids[i, c]] . z_i + b[ids[i, c]]. The product is a
    batched gather-dot (B*m*d multiply-adds) unless the unique rows are few enough that z @ W_r.T
    (B*r*d) is cheaper. ids None -> (B, L) logits z @ W.T + b. Call it once per loss.
    """

    def __init__(self, params: HeadParams, z: torch.Tensor, grad: bool = True, static: bool = False,
                 shared: dict | None = None):
        self.params, self.z, self.grad, self.static = params, z, grad, static
        self.shared = shared     # static mode: static_unique results by ids tensor, shared by the heads of a step
        self.rows: torch.Tensor | None = None
        self.src: torch.Tensor | None = None
        self.leaf_W: torch.Tensor | None = None
        self.leaf_b: torch.Tensor | None = None
        self.called = False

    def __call__(self, ids: torch.Tensor | None) -> torch.Tensor:
        if self.called:
            raise RuntimeError("RowScorer: a loss may ask for logits once per step")
        self.called = True
        W, b = self.params.W, self.params.b
        if ids is None:
            self.leaf_W = W.detach().requires_grad_(self.grad)
            self.leaf_b = b.detach().requires_grad_(self.grad)
            return self.z @ self.leaf_W.T + self.leaf_b
        if self.static:
            return self._static(ids)
        rows, inv = torch.unique(ids, return_inverse=True)
        self.rows = rows
        self.leaf_W = W.index_select(0, rows).requires_grad_(self.grad)
        self.leaf_b = b.index_select(0, rows).requires_grad_(self.grad)
        B, m = ids.shape
        if rows.numel() <= 2 * m:
            full = self.z @ self.leaf_W.T + self.leaf_b                  # (B, r)
            return full.gather(1, inv)
        Wg = self.leaf_W.index_select(0, inv.reshape(-1)).view(B, m, -1)  # (B, m, d)
        return torch.bmm(Wg, self.z.unsqueeze(2)).squeeze(2) + self.leaf_b[inv]

    def _static(self, ids: torch.Tensor) -> torch.Tensor:
        """The gather path on `static_unique`'s slots (no sync; index_select everywhere, whose backward
        is an index_add)."""
        W, b = self.params.W, self.params.b
        key = (ids.data_ptr(), tuple(ids.shape), ids.stride())
        if self.shared is not None and key in self.shared:
            self.rows, inv, self.src, _ = self.shared[key]   # heads with the same ids (same p): one sort
        else:
            self.rows, inv, self.src = static_unique(ids)
            if self.shared is not None:   # ids kept alive: no other tensor can take its address meanwhile
                self.shared[key] = (self.rows, inv, self.src, ids)
        self.leaf_W = W.index_select(0, self.rows).requires_grad_(self.grad)
        self.leaf_b = b.index_select(0, self.rows).requires_grad_(self.grad)
        B, m = ids.shape
        flat = inv.reshape(-1)
        Wg = self.leaf_W.index_select(0, flat).view(B, m, -1)
        return torch.bmm(Wg, self.z.unsqueeze(2)).squeeze(2) + self.leaf_b.index_select(0, flat).view(B, m)


@dataclass
class RowAdam:
    """Adam over (W, b) updating only the rows a step touched (see the module docstring)."""
    shape_W: tuple
    device: torch.device
    lr: float
    weight_decay: float = 0.0
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    step_count: int = 0
    m_W: torch.Tensor = field(init=False)
    v_W: torch.Tensor = field(init=False)
    m_b: torch.Tensor = field(init=False)
    v_b: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        L, d = self.shape_W
        self.m_W = torch.zeros((L, d), device=self.device)
        self.v_W = torch.zeros((L, d), device=self.device)
        self.m_b = torch.zeros((L,), device=self.device)
        self.v_b = torch.zeros((L,), device=self.device)

    @torch.no_grad()
    def step(self, params: HeadParams, scorer: RowScorer) -> None:
        self.step_count += 1
        t = self.step_count
        b1, b2 = self.betas
        adam = dict(step=self.lr / (1 - b1 ** t), sqrt_c2=(1 - b2 ** t) ** 0.5, betas=self.betas, eps=self.eps,
                    weight_decay=self.weight_decay)
        rows = scorer.rows
        for p, leaf, m, v in ((params.W, scorer.leaf_W, self.m_W, self.v_W),
                              (params.b, scorer.leaf_b, self.m_b, self.v_b)):
            g = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
            if rows is None:
                adam_update_(p, g, m, v, **adam)
            else:
                row_adam_update_(p, g, m, v, rows, **adam)

    @torch.no_grad()
    def step_static(self, params: HeadParams, scorer: RowScorer) -> None:
        """`step` for a static scorer, with the step count on the device (`self.t`, see
        `sync_counter`): no host synchronisation, so it can run inside a CUDA graph. The caller
        advances `step_count` on the host (one per step). On CUDA with Triton the whole update (W and b
        rows, both moments) is one kernel (`_row_adam_kernel`); else torch ops."""
        b1, b2 = self.betas
        self.t.add_(1.0)
        step = (self.lr / (1.0 - torch.pow(b1, self.t))).float()           # lr / c1, as the host computes it
        sqrt_c2 = (1.0 - torch.pow(b2, self.t)).sqrt().float()
        rows, src = scorer.rows, scorer.src
        gW = scorer.leaf_W.grad if scorer.leaf_W.grad is not None else torch.zeros_like(scorer.leaf_W)
        gb = scorer.leaf_b.grad if scorer.leaf_b.grad is not None else torch.zeros_like(scorer.leaf_b)
        if params.W.is_cuda and _fused_row_adam(self, params, rows, src, gW.contiguous(), gb.contiguous(),
                                                torch.stack([step, sqrt_c2])):
            return
        for p, g, m, v in ((params.W, gW, self.m_W, self.v_W), (params.b, gb, self.m_b, self.v_b)):
            row_adam_update_(p, g, m, v, rows, src=src, step=step, sqrt_c2=sqrt_c2, betas=self.betas, eps=self.eps,
                             weight_decay=self.weight_decay, scale_after_divide=True)

    def sync_counter(self) -> None:
        """Set the device step counter `t` (float64) to the host's step_count."""
        if getattr(self, "t", None) is None:
            self.t = torch.zeros((), dtype=torch.float64, device=self.m_W.device)
        self.t.fill_(float(self.step_count))

    def state_dict(self) -> dict:
        return {"step_count": self.step_count, "m_W": self.m_W, "v_W": self.v_W, "m_b": self.m_b, "v_b": self.v_b}

    def load_state_dict(self, s: dict) -> None:
        self.step_count = int(s["step_count"])
        for k in ("m_W", "v_W", "m_b", "v_b"):
            getattr(self, k).copy_(s[k])


# ------------------------------------------------------------------------------ fused row Adam (CUDA)

_ROW_KERNEL = None     # None: not built yet; False: unavailable (no Triton, or it failed its self-check)


def _row_adam_kernel():
    """The Triton kernel of `RowAdam.step_static`: slot j < r (src[j] == j) updates row rows[j] of W, b
    and their moments from the slot's gradient; padding slots do nothing. Same arithmetic as the torch
    ops (IEEE sqrt and division; (1 - b1), (1 - b2) and lr / c1 from the host/device in double)."""
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


def _launch_row(kernel, opt: RowAdam, params: HeadParams, rows, src, gW, gb, sc) -> None:
    N, d = gW.shape
    b1, b2 = opt.betas
    block_d = triton_next_pow2(d)
    block_r = max(1, min(64, 4096 // block_d))
    kernel[((N + block_r - 1) // block_r,)](params.W, opt.m_W, opt.v_W, params.b, opt.m_b, opt.v_b, gW, gb, rows, src,
                                            sc, N, d, 1 - b1, b2, 1 - b2, opt.eps, float(opt.weight_decay),
                                            HAS_WD=bool(opt.weight_decay), BLOCK_R=block_r, BLOCK_D=block_d)


def triton_next_pow2(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def _fused_row_adam(opt: RowAdam, params: HeadParams, rows, src, gW, gb, sc) -> bool:
    """Run the fused kernel; False (the caller uses torch ops) where it is unavailable. The first use
    checks the kernel against the torch ops on a small random problem and disables it on a mismatch."""
    global _ROW_KERNEL
    if _ROW_KERNEL is None:
        _ROW_KERNEL = False
        try:
            kernel = _row_adam_kernel()
            if _self_check(kernel, params.W.device):
                _ROW_KERNEL = kernel
        except Exception as exc:   # noqa: BLE001  (no Triton, or it cannot compile the kernel)
            import warnings
            warnings.warn(f"fused row Adam unavailable ({type(exc).__name__}: {exc}); using torch ops",
                          RuntimeWarning, stacklevel=3)
    if _ROW_KERNEL is False:
        return False
    _launch_row(_ROW_KERNEL, opt, params, rows, src, gW, gb, sc)
    return True


def _self_check(kernel, device) -> bool:
    """The kernel against the torch ops of `step_static` on random data (2 steps, 37 rows of width 20)."""
    import warnings
    g = torch.Generator(device=device).manual_seed(0)
    L, d, B, m = 300, 20, 9, 6
    W0, b0 = torch.randn(L, d, generator=g, device=device), torch.randn(L, generator=g, device=device)
    res = []
    for fused in (False, True):
        params = HeadParams(W0.clone(), b0.clone())
        opt = RowAdam((L, d), device, lr=0.01)
        opt.sync_counter()
        gg = torch.Generator(device=device).manual_seed(1)
        for _ in range(2):
            ids = torch.randint(0, L, (B, m), generator=gg, device=device)
            rows, inv, src = static_unique(ids)
            gW = torch.randn(rows.numel(), d, generator=gg, device=device)
            gb = torch.randn(rows.numel(), generator=gg, device=device)
            gW[src != torch.arange(rows.numel(), device=device)] = 0.0     # padding slots get no gradient
            opt.t.add_(1.0)
            step = (opt.lr / (1.0 - torch.pow(opt.betas[0], opt.t))).float()
            sqrt_c2 = (1.0 - torch.pow(opt.betas[1], opt.t)).sqrt().float()
            if fused:
                _launch_row(kernel, opt, params, rows, src, gW, gb, torch.stack([step, sqrt_c2]))
            else:
                opt.t.sub_(1.0)
                sc = RowScorer(params, torch.zeros(B, d, device=device), static=True)
                sc.rows, sc.src = rows, src
                sc.leaf_W = params.W.index_select(0, rows).requires_grad_()
                sc.leaf_b = params.b.index_select(0, rows).requires_grad_()
                sc.leaf_W.grad, sc.leaf_b.grad = gW, gb
                _torch_row_step(opt, params, sc)
        res.append((params.W.clone(), params.b.clone(), opt.m_W.clone(), opt.v_W.clone(), opt.v_b.clone()))
    ok = all(torch.allclose(a, b, rtol=1e-6, atol=1e-7) for a, b in zip(*res))
    if not ok:
        warnings.warn("fused row Adam disagrees with the torch ops; using torch ops", RuntimeWarning, stacklevel=4)
    return ok


def _torch_row_step(opt: RowAdam, params: HeadParams, scorer: RowScorer) -> None:
    """step_static through the torch ops only (the self-check's reference)."""
    global _ROW_KERNEL
    saved, _ROW_KERNEL = _ROW_KERNEL, False
    try:
        opt.step_static(params, scorer)
    finally:
        _ROW_KERNEL = saved
