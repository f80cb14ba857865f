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

Two modes of the forward, one step. Slot mode (`forward(..., static=True)`, the CUDA-graph runner of
poxm_core/accel/graph.py): no host synchronisation; the EmbeddingBag's gradient is an index_add of the
entries (`accel.static.BagSum`: padding entries of weight 0 add exactly 0). The step (`step`) is written
once and capture-safe: the bias corrections come from a step counter on the device (`t`; `step_count`
reads it) and, on CUDA with Triton, the Adam update of each parameter is one fused kernel
(`accel.triton_adam.fused_adam`, one read of p, g, m, v and one write of p, m, v) instead of ten
passes. The update itself is `poxm_core.optim.adam`'s.

Lazy input layer (`input_adam="lazy"`, `training.input_adam`): V is an embedding of the sparse input,
and a batch reads only the rows of the features its instances hold (at Amazon-670K's shape about 15,000
of 135,909). Dense Adam still reads and writes all of V and both moments every step (a large share of
the step's GPU time with many heads; docs/performance.md). Lazy, the forward gathers the touched rows into a
leaf (as `RowScorer` does for the output layer) and the step updates those rows only: the "lazy" Adam of
sparse embeddings that the output layers use (`policy.heads.RowAdam`): untouched rows keep their bits,
weight decay reaches the touched rows only, one global step count for the bias correction. A row is
touched when one of the batch's entries with a non-zero value reads it. U and c stay dense. This changes
the optimiser (not only the float order), so it is a setting, off by default.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from poxm_core.accel.static import BagSum, static_unique
from poxm_core.accel.triton_adam import fused_adam, fused_lazy_rows_adam
from poxm_core.optim.adam import DeviceStepCount, adam_update_
from poxm_core.policy.heads import draw_in_threads

__all__ = ["NetworkStack"]


class NetworkStack(nn.Module, DeviceStepCount):
    def __init__(self, n_features: int, dim: int, hidden: int, inits: list[str], gens: list[torch.Generator],
                 lrs: list[float], weight_decay: float, device: torch.device, use_encoder: bool = False,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, input_adam: str = "dense") -> None:
        super().__init__()
        if input_adam not in ("dense", "lazy"):
            raise ValueError(f"input_adam: 'dense' or 'lazy', got {input_adam!r}")
        self.lazy_input = input_adam == "lazy"
        self._touched = None     # lazy: (rows, valid, leaf) of the last training forward
        H = len(inits)
        self.H, self.h, self.dim, self.device, self.use_encoder = H, hidden, dim, device, use_encoder
        U = torch.empty((dim, H * hidden))
        c = torch.empty(H * hidden)
        V = torch.empty((n_features, H * hidden))
        def init_head(k: int) -> None:     # head k's block, from its own generator (threads: disjoint blocks)
            init, gen = inits[k], gens[k]
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
        draw_in_threads(init_head, H)
        if not use_encoder:
            if any(i == "logging" for i in inits):
                raise ValueError("init='logging' needs the encoder input (training.network_inputs=sparse+encoder)")
            U = torch.zeros((0, H * hidden))
        self.U = nn.Parameter(U.to(device))
        self.c = nn.Parameter(c.to(device))
        self.V = nn.Parameter(V.to(device))
        self.lr = torch.tensor(np.repeat(np.asarray(lrs, dtype=np.float32), hidden), device=device)
        self.weight_decay, self.betas, self.eps = weight_decay, betas, eps
        self.t = torch.zeros((), dtype=torch.float64, device=device)   # the step count, on the device
        self.moments = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in self.named_parameters()}

    # ---- forward ---------------------------------------------------------------------------------
    def forward(self, z: torch.Tensor, bag, static: bool = False) -> torch.Tensor:
        """(B, H h) features of every head (column block k = head k). static: `bag` carries a 4th
        tensor, each entry's bag (`BagSum`, the sync-free backward)."""
        if self.lazy_input and torch.is_grad_enabled() and self.V.requires_grad and bag[0].numel():
            out = self.c + self._touched_rows_forward(bag, static)
        elif static:
            out = self.c + BagSum.apply(self.V, bag[0], bag[1], bag[2], bag[3])
        else:
            out = self.c + F.embedding_bag(bag[0], self.V, bag[1], mode="sum", per_sample_weights=bag[2])
        return out + z @ self.U if self.use_encoder else out

    def _touched_rows_forward(self, bag, static: bool) -> torch.Tensor:
        """The bag product read from a leaf holding only the rows the batch touches (lazy input layer).
        Slots come from `static_unique` (fixed shape, sync-free); entries of value 0 (the static bag's
        padding) read a sentinel row D that sorts last and is never written back."""
        idx, off, w = bag[0], bag[1], bag[2]
        D = self.V.shape[0]
        rows, inv, src = static_unique(torch.where(w != 0, idx, D))
        valid = (src == torch.arange(rows.numel(), device=rows.device)) & (rows < D)
        safe = rows.clamp(max=D - 1)
        leaf = self.V.detach().index_select(0, safe).requires_grad_()
        self._touched = (safe, valid, leaf)
        if static:
            return BagSum.apply(leaf, inv, off, w, bag[3])
        return F.embedding_bag(inv, leaf, off, mode="sum", per_sample_weights=w)

    @torch.no_grad()
    def _lazy_input_step(self, c1, sqrt_c2) -> None:
        """Adam on the rows of V the last forward touched (`_touched_rows_forward`); c1 = 1 - b1^t. On
        CUDA one fused kernel updates the touched rows in place (`fused_lazy_rows_adam`); else the rows
        are gathered, updated and written back by slot: slots that are not a touched row (padding, the
        sentinel) write slot 0's new row to slot 0's row, as `row_adam_update_` does, and when no slot is
        (every entry of the batch zero) nothing changes."""
        if self._touched is None:
            return
        safe, valid, leaf = self._touched
        self._touched = None
        if leaf.grad is None:
            return
        m, v = self.moments["V"]
        ar = torch.arange(safe.numel(), device=safe.device)
        if self.V.is_cuda:
            sc = torch.stack([torch.as_tensor(c1, dtype=torch.float32, device=self.V.device).reshape(()),
                              torch.as_tensor(sqrt_c2, dtype=torch.float32, device=self.V.device).reshape(())])
            if fused_lazy_rows_adam(self.V, m, v, leaf.grad, safe, torch.where(valid, ar, -1), self.lr, sc,
                                    self.betas, self.eps, self.weight_decay):
                return
        src = torch.where(valid, ar, torch.zeros_like(ar))
        parts = [t.index_select(0, safe) for t in (self.V, m, v)]
        first = [t[0].clone() for t in parts]
        adam_update_(*parts[:1], leaf.grad, *parts[1:], step=self.lr / c1, sqrt_c2=sqrt_c2, betas=self.betas,
                     eps=self.eps, weight_decay=self.weight_decay, scale_after_divide=True)
        for t, old in zip(parts, first):
            t[0] = torch.where(valid[0], t[0], old)
        dst = safe.index_select(0, src)
        for full, t in zip((self.V, m, v), parts):
            full.index_copy_(0, dst, t.index_select(0, src))

    def head_features(self, k: int, z: torch.Tensor, bag) -> torch.Tensor:
        """(B, h) features of head k alone (evaluation: only its columns are read)."""
        cols = slice(k * self.h, (k + 1) * self.h)
        V = self.V[:, cols].contiguous()
        out = self.c[cols] + F.embedding_bag(bag[0], V, bag[1], mode="sum", per_sample_weights=bag[2])
        return out + z @ self.U[:, cols] if self.use_encoder else out

    # ---- optimiser: H independent Adams, one vectorised step -------------------------------------
    @torch.no_grad()
    def step(self) -> None:
        """One Adam step of every head (a rate per column). No host synchronisation: the CUDA-graph runner
        captures this same step; on CUDA with Triton one fused kernel per parameter."""
        b1, b2 = self.betas
        self.t.add_(1.0)
        dt = self.V.dtype
        c1 = (1.0 - torch.pow(b1, self.t)).to(dt)
        sqrt_c2 = (1.0 - torch.pow(b2, self.t)).sqrt().to(dt)
        sc = torch.stack([c1, sqrt_c2]) if self.V.is_cuda and dt == torch.float32 else None
        for n, p in self.named_parameters():
            g = p.grad
            if g is None or (self.lazy_input and n == "V"):    # lazy: V's rows are stepped below
                p.grad = None
                continue
            m, v = self.moments[n]
            lr = self.lr if p.dim() == 1 or p.shape[-1] == self.lr.numel() else None
            fused = (sc is not None and p.numel() and lr is not None and g.is_contiguous() and p.is_contiguous()
                     and fused_adam(p, g, m, v, lr, sc, self.betas, self.eps, self.weight_decay))
            if not fused:
                adam_update_(p, g, m, v, step=self.lr / c1, sqrt_c2=sqrt_c2, betas=self.betas, eps=self.eps,
                             weight_decay=self.weight_decay, scale_after_divide=True)
            p.grad = None
        self._lazy_input_step(c1, sqrt_c2)

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
