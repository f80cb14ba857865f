"""Sync-free pieces of the training step: the same arithmetic as their plain counterparts, with a fixed
shape and no host synchronisation (a step made of them can be captured in a CUDA graph).

- `static_unique(ids)`: `torch.unique(ids, return_inverse=True)` as fixed-size slots (sort-based).
- `BagSum`: sum-mode EmbeddingBag with per-sample weights whose backward is an index_add (the
  plain EmbeddingBag backward synchronises with the host); padding entries of weight 0 add exactly 0.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["static_unique", "BagSum"]


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


class BagSum(torch.autograd.Function):
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
