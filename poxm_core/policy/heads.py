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
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["RowScorer", "RowAdam", "HeadParams", "init_head"]


@dataclass
class HeadParams:
    W: torch.Tensor   # (L, d) float32
    b: torch.Tensor   # (L,) float32


def init_head(W0: np.ndarray, b0: np.ndarray, init: str, seed: int, device: torch.device) -> HeadParams:
    """Copy of the logging head (init='logging') or N(0, 0.01^2) / 0 (init='random', seeded)."""
    if init == "logging":
        return HeadParams(torch.tensor(W0, dtype=torch.float32, device=device),
                          torch.tensor(b0, dtype=torch.float32, device=device))
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(W0.shape, generator=g, dtype=torch.float32) * 0.01
    return HeadParams(W.to(device), torch.zeros(b0.shape, dtype=torch.float32, device=device))


class RowScorer:
    """score(ids) for one loss evaluation: logits of the requested labels with gradient on their rows.

    ids (B, m) int64 -> (B, m): per row, logit = W[ids[i, c]] . z_i + b[ids[i, c]]. The product is a
    batched gather-dot (B*m*d multiply-adds) unless the unique rows are few enough that z @ W_r.T
    (B*r*d) is cheaper. ids None -> (B, L) logits z @ W.T + b. Call it once per loss.
    """

    def __init__(self, params: HeadParams, z: torch.Tensor, grad: bool = True):
        self.params, self.z, self.grad = params, z, grad
        self.rows: torch.Tensor | None = None
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
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        rows = scorer.rows
        for p, leaf, m, v in ((params.W, scorer.leaf_W, self.m_W, self.v_W),
                              (params.b, scorer.leaf_b, self.m_b, self.v_b)):
            g = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
            if rows is None:
                self._update(p, g, m, v, c1, c2)
            else:
                ps, ms, vs = p[rows], m[rows], v[rows]
                self._update(ps, g, ms, vs, c1, c2)
                p[rows], m[rows], v[rows] = ps, ms, vs

    def _update(self, p, g, m, v, c1, c2) -> None:
        """In place on p, m, v (torch.optim.Adam's arithmetic, non-fused)."""
        b1, b2 = self.betas
        if self.weight_decay:
            g = g + self.weight_decay * p
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (v.sqrt() / (c2 ** 0.5)).add_(self.eps)
        p.addcdiv_(m, denom, value=-self.lr / c1)

    def state_dict(self) -> dict:
        return {"step_count": self.step_count, "m_W": self.m_W, "v_W": self.v_W, "m_b": self.m_b, "v_b": self.v_b}

    def load_state_dict(self, s: dict) -> None:
        self.step_count = int(s["step_count"])
        for k in ("m_W", "v_W", "m_b", "v_b"):
            getattr(self, k).copy_(s[k])
