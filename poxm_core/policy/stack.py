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
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["NetworkStack"]


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
    def forward(self, z: torch.Tensor, bag) -> torch.Tensor:
        """(B, H h) features of every head (column block k = head k)."""
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
            if self.weight_decay:
                g = g + self.weight_decay * p
            m, v = self.moments[n]
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / (c2 ** 0.5)).add_(self.eps)
            p.sub_(m / denom * (self.lr / c1))
            p.grad = None

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
