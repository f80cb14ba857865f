"""H policy networks trained side by side as ONE module: the trial's heads share batches, not weights.

Every head k of a trial has its own network h_k(x) = V_k^T x~ + c_k [+ U_k z with
training.network_inputs='sparse+encoder'] (policy/network.py). Run
one by one, 60 heads cost 60 small matmuls, 60 embedding-bag backward passes and 60 optimiser
steps per batch, and Python, not arithmetic, sets the pace. Stacked, the heads' parameters are
column blocks of three tensors,

    U (d, H h), c (H h), V (D, H h)      head k owns columns [k h, (k + 1) h)

so one forward `z @ U + c + EmbeddingBag(V)` gives every head's features (B, H h), one backward of
the sum of the heads' losses gives every head its own gradient (the blocks are disjoint), and one
vectorised Adam step updates them all. Adam is elementwise, so this IS H independent Adams; the
per-head learning rate is a vector over the columns. Each head's init is drawn from its own seeded
generator into its block, exactly as when the head is trained alone.

Static mode (`forward(..., static=True)`, `step_static`; the CUDA-graph training loop of
training/epoch.py): no host synchronisation. The EmbeddingBag's gradient is an index_add of the
entries (`_BagSum`: padding entries of weight 0 add exactly 0), the bias corrections come from a
step counter on the device, and on CUDA the Adam update of each parameter is one fused Triton
kernel (`_fused_adam`, one read of p, g, m, v and one write of p, m, v) instead of ten passes.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from poxm_core.policy.adam import adam_update_

__all__ = ["NetworkStack"]


class _BagSum(torch.autograd.Function):
    """sum-mode EmbeddingBag with per-sample weights whose backward is an index_add (no host sync):
    grad V[idx[e]] += w[e] * grad_out[bag(e)]. bag_of (n_entries,) gives each entry's bag."""

    @staticmethod
    def forward(ctx, V, idx, off, w, bag_of):
        ctx.save_for_backward(idx, w, bag_of)
        ctx.shape = V.shape
        return F.embedding_bag(idx, V, off, mode="sum", per_sample_weights=w)

    @staticmethod
    def backward(ctx, g):
        idx, w, bag_of = ctx.saved_tensors
        gV = torch.zeros(ctx.shape, dtype=g.dtype, device=g.device)
        gV.index_add_(0, idx, g.index_select(0, bag_of) * w.unsqueeze(1))
        return gV, None, None, None, None


_TRITON = None


def _triton_adam():
    """The fused Adam kernel (Triton), or None where Triton is not available."""
    global _TRITON
    if _TRITON is None:
        try:
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

            _TRITON = adam_kernel
        except Exception:   # noqa: BLE001  (no Triton, or no GPU it can compile for)
            _TRITON = False
    return _TRITON or None


class NetworkStack(nn.Module):
    def __init__(self, n_features: int, dim: int, hidden: int, inits: list[str], gens: list[torch.Generator],
                 lrs: list[float], weight_decay: float, device: torch.device, use_encoder: bool = False,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        super().__init__()
        H = len(inits)
        self.H, self.h, self.dim, self.device, self.use_encoder = H, hidden, dim, device, use_encoder
        U = torch.empty((dim, H * hidden))
        c = torch.empty(H * hidden)
        V = torch.empty((n_features, H * hidden))
        for k, (init, gen) in enumerate(zip(inits, gens)):
            cols = slice(k * hidden, (k + 1) * hidden)
            if init == "logging":          # starts at the logging model's features: U = I, V = 0, c = 0
                U[:, cols] = torch.eye(dim, hidden)
                c[cols] = 0.0
                V[:, cols] = 0.0
            else:                          # torch's Linear init for U, c; V ~ N(0, 1/h)
                bound = 1.0 / dim ** 0.5
                U[:, cols] = (torch.rand((hidden, dim), generator=gen) * 2 * bound - bound).T
                c[cols] = torch.rand(hidden, generator=gen) * 2 * bound - bound
                V[:, cols] = torch.randn((n_features, hidden), generator=gen) / hidden ** 0.5
        if not use_encoder:
            if any(i == "logging" for i in inits):
                raise ValueError("init='logging' needs the encoder input (training.network_inputs=sparse+encoder)")
            U = torch.zeros((0, H * hidden))
        self.U = nn.Parameter(U.to(device))
        self.c = nn.Parameter(c.to(device))
        self.V = nn.Parameter(V.to(device))
        self.lr = torch.tensor(np.repeat(np.asarray(lrs, dtype=np.float32), hidden), device=device)
        self.weight_decay, self.betas, self.eps = weight_decay, betas, eps
        self.step_count = 0
        self.moments = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in self.named_parameters()}

    # ---- forward ---------------------------------------------------------------------------------
    def forward(self, z: torch.Tensor, bag, static: bool = False) -> torch.Tensor:
        """(B, H h) features of every head (column block k = head k). static: `bag` carries a 4th
        tensor, each entry's bag (`_BagSum`, the sync-free backward)."""
        if static:
            out = self.c + _BagSum.apply(self.V, bag[0], bag[1], bag[2], bag[3])
        else:
            out = self.c + F.embedding_bag(bag[0], self.V, bag[1], mode="sum", per_sample_weights=bag[2])
        return out + z @ self.U if self.use_encoder else out

    def head_features(self, k: int, z: torch.Tensor, bag) -> torch.Tensor:
        """(B, h) features of head k alone (evaluation: only its columns are read)."""
        cols = slice(k * self.h, (k + 1) * self.h)
        V = self.V[:, cols].contiguous()
        out = self.c[cols] + F.embedding_bag(bag[0], V, bag[1], mode="sum", per_sample_weights=bag[2])
        return out + z @ self.U[:, cols] if self.use_encoder else out

    # ---- optimiser: H independent Adams, one vectorised step -------------------------------------
    @torch.no_grad()
    def step(self) -> None:
        self.step_count += 1
        t = self.step_count
        b1, b2 = self.betas
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        for n, p in self.named_parameters():
            g = p.grad
            if g is None:
                continue
            m, v = self.moments[n]
            adam_update_(p, g, m, v, step=self.lr / c1, sqrt_c2=c2 ** 0.5, betas=self.betas, eps=self.eps,
                         weight_decay=self.weight_decay, scale_after_divide=True)
            p.grad = None

    @torch.no_grad()
    def step_static(self) -> None:
        """`step` with the step count on the device (`self.t`, set by `sync_counter`) and, on CUDA with
        Triton, one fused kernel per parameter; no host synchronisation (CUDA graphs). The caller
        advances `step_count` on the host."""
        b1, b2 = self.betas
        self.t.add_(1.0)
        c1 = (1.0 - torch.pow(b1, self.t)).float()
        sqrt_c2 = (1.0 - torch.pow(b2, self.t)).sqrt().float()
        kernel = _triton_adam() if self.V.is_cuda else None
        if kernel is not None:
            sc = torch.stack([c1, sqrt_c2])
        for n, p in self.named_parameters():
            g = p.grad
            if g is None:
                continue
            m, v = self.moments[n]
            lr = self.lr if p.dim() == 1 or p.shape[-1] == self.lr.numel() else None
            fused = kernel is not None and p.numel() and lr is not None and g.is_contiguous() and p.is_contiguous()
            if fused:
                N = p.numel()
                try:
                    kernel[((N + 1023) // 1024,)](p, g, m, v, lr, sc, N, self.lr.numel(), 1 - b1, b2, 1 - b2,
                                                  self.eps, float(self.weight_decay), HAS_WD=bool(self.weight_decay),
                                                  BLOCK=1024)
                except Exception as exc:   # noqa: BLE001  (a Triton that cannot compile it: the torch ops)
                    global _TRITON
                    _TRITON, kernel, fused = False, None, False
                    warnings.warn(f"fused Adam unavailable ({type(exc).__name__}: {exc}); using torch ops",
                                  RuntimeWarning, stacklevel=2)
            if not fused:
                adam_update_(p, g, m, v, step=self.lr / c1, sqrt_c2=sqrt_c2, betas=self.betas, eps=self.eps,
                             weight_decay=self.weight_decay, scale_after_divide=True)
            p.grad = None

    def sync_counter(self) -> None:
        """Set the device step counter `t` (float64) to the host's step_count."""
        if getattr(self, "t", None) is None:
            self.t = torch.zeros((), dtype=torch.float64, device=self.V.device)
        self.t.fill_(float(self.step_count))

    def full_state(self) -> dict:
        return {"params": {n: p.detach() for n, p in self.named_parameters()}, "step_count": self.step_count,
                "moments": self.moments}

    @torch.no_grad()
    def load_full_state(self, s: dict) -> None:
        for n, p in self.named_parameters():
            p.copy_(s["params"][n])
            self.moments[n][0].copy_(s["moments"][n][0])
            self.moments[n][1].copy_(s["moments"][n][1])
        self.step_count = int(s["step_count"])
