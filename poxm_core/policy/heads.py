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

import numpy as np
import torch

__all__ = ["RowScorer", "RowAdam", "HeadParams", "init_head", "static_unique"]


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

    @torch.no_grad()
    def step_static(self, params: HeadParams, scorer: RowScorer) -> None:
        """`step` for a static scorer, with the step count on the device (`self.t`, see
        `sync_counter`): no host synchronisation, so it can run inside a CUDA graph. The caller
        advances `step_count` on the host (one per step)."""
        b1, b2 = self.betas
        self.t.add_(1.0)
        step = (self.lr / (1.0 - torch.pow(b1, self.t))).float()           # lr / c1, as the host computes it
        sqrt_c2 = (1.0 - torch.pow(b2, self.t)).sqrt().float()
        rows, src = scorer.rows, scorer.src
        dst = rows.index_select(0, src)
        for p, leaf, m, v in ((params.W, scorer.leaf_W, self.m_W, self.v_W),
                              (params.b, scorer.leaf_b, self.m_b, self.v_b)):
            g = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
            ps, ms, vs = p.index_select(0, rows), m.index_select(0, rows), v.index_select(0, rows)
            if self.weight_decay:
                g = g + self.weight_decay * ps
            ms.lerp_(g, 1 - b1)
            vs.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (vs.sqrt() / sqrt_c2).add_(self.eps)
            ps.sub_(ms / denom * step)
            for full, part in ((p, ps), (m, ms), (v, vs)):
                full.index_copy_(0, dst, part.index_select(0, src))

    def sync_counter(self) -> None:
        """Set the device step counter `t` (float64) to the host's step_count."""
        if getattr(self, "t", None) is None:
            self.t = torch.zeros((), dtype=torch.float64, device=self.m_W.device)
        self.t.fill_(float(self.step_count))

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
