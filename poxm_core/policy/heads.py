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

One step, two modes of the scorer. The step itself (`RowAdam.step`) is written once and capture-safe:
the bias corrections come from a step counter on the device (`t`; `step_count` reads it), and the rows
are written back by slot. Eager scorers take their rows from `torch.unique` (exactly the touched rows);
in slot mode (`RowScorer(..., static=True)`, the CUDA-graph runner of poxm_core/accel/graph.py) from
`accel.static.static_unique`: B*m slots, the first r of them the sorted unique rows, the rest padding
that gets no gradient and is never written back, so that nothing has a data-dependent shape or
synchronises with the host. On CUDA with Triton the slot update is one fused kernel
(`accel.triton_adam.fused_row_adam`); only the float summation order of a row's gradient may differ
(atomic adds). The update itself is `poxm_core.optim.adam`'s.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from poxm_core.accel.static import static_unique
from poxm_core.accel.triton_adam import fused_row_adam
from poxm_core.optim.adam import DeviceStepCount, adam_update_, row_adam_update_

__all__ = ["RowScorer", "RowAdam", "HeadParams", "draw_in_threads"]


def draw_in_threads(fn, n: int) -> list:
    """[fn(k) for k in range(n)] on up to os.cpu_count() threads. For the heads' seeded initial draws:
    each head draws from its own generator, so the values are those of the plain loop, and torch
    releases the GIL inside a draw (16 heads of Amazon-670K's output layer: about 1.4 billion normal
    draws, most of a trial's set-up one after another)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    workers = min(n, os.cpu_count() or 1)
    if workers <= 1:
        return [fn(k) for k in range(n)]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="init") as pool:
        return list(pool.map(fn, range(n)))


@dataclass
class HeadParams:
    W: torch.Tensor   # (L, d) float32
    b: torch.Tensor   # (L,) float32


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
            return self._slots(ids)
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

    def _slots(self, ids: torch.Tensor) -> torch.Tensor:
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
class RowAdam(DeviceStepCount):
    """Adam over (W, b) updating only the rows a step touched (see the module docstring)."""
    shape_W: tuple
    device: torch.device
    lr: float
    weight_decay: float = 0.0
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    m_W: torch.Tensor = field(init=False)
    v_W: torch.Tensor = field(init=False)
    m_b: torch.Tensor = field(init=False)
    v_b: torch.Tensor = field(init=False)
    t: torch.Tensor = field(init=False)       # the step count (float64, on the device): the step reads it there

    def __post_init__(self) -> None:
        L, d = self.shape_W
        self.m_W = torch.zeros((L, d), device=self.device)
        self.v_W = torch.zeros((L, d), device=self.device)
        self.m_b = torch.zeros((L,), device=self.device)
        self.v_b = torch.zeros((L,), device=self.device)
        self.t = torch.zeros((), dtype=torch.float64, device=self.device)

    @torch.no_grad()
    def step(self, params: HeadParams, scorer: RowScorer) -> None:
        """One Adam step of the rows `scorer` touched (all rows when it scored every label). No host
        synchronisation when the scorer is in slot mode: the CUDA-graph runner captures this same step."""
        b1, b2 = self.betas
        self.t.add_(1.0)
        dt = params.W.dtype
        step = (self.lr / (1.0 - torch.pow(b1, self.t))).to(dt)            # lr / c1, in double as on the host
        sqrt_c2 = (1.0 - torch.pow(b2, self.t)).sqrt().to(dt)
        adam = dict(step=step, sqrt_c2=sqrt_c2, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay)
        rows, src = scorer.rows, scorer.src
        gW = scorer.leaf_W.grad if scorer.leaf_W.grad is not None else torch.zeros_like(scorer.leaf_W)
        gb = scorer.leaf_b.grad if scorer.leaf_b.grad is not None else torch.zeros_like(scorer.leaf_b)
        if rows is None:
            for p, g, m, v in ((params.W, gW, self.m_W, self.v_W), (params.b, gb, self.m_b, self.v_b)):
                adam_update_(p, g, m, v, **adam)
            return
        if src is not None and params.W.is_cuda and fused_row_adam(
                params.W, self.m_W, self.v_W, params.b, self.m_b, self.v_b, rows, src, gW.contiguous(),
                gb.contiguous(), torch.stack([step, sqrt_c2]), self.betas, self.eps, self.weight_decay):
            return
        for p, g, m, v in ((params.W, gW, self.m_W, self.v_W), (params.b, gb, self.m_b, self.v_b)):
            row_adam_update_(p, g, m, v, rows, src=src, **adam)

    def state_dict(self) -> dict:
        return {"step_count": self.step_count, "m_W": self.m_W, "v_W": self.v_W, "m_b": self.m_b, "v_b": self.v_b}

    def load_state_dict(self, s: dict) -> None:
        self.step_count = int(s["step_count"])
        for k in ("m_W", "v_W", "m_b", "v_b"):
            getattr(self, k).copy_(s[k])
