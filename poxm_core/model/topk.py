"""Chunked top-k of head logits over L labels, memory bounded by a chunk budget (never n x L).

    s(x_i, y) = W[y] . Z[i] + b[y];   top-k labels per row, score descending, ties by smaller label id.

Chunking: rows in blocks of r and labels in blocks of c with r * c * 4 bytes <= chunk_mb (labels are
only split when one row of L scores alone exceeds the budget). Each block's top-k is merged into a
running (r, k) top-k. Ties are exact: torch.topk may keep any of several equal scores at the k-th
place, so rows where more than k scores reach the k-th value are re-ranked by a stable sort of the
whole block (rare: ties need exactly equal float32 scores).
"""
from __future__ import annotations

import numpy as np
import torch

from poxm_core.model.core import resolve_device


def _order_by_score_then_id(scores: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort each row by (score descending, id ascending); both (r, m)."""
    o1 = torch.argsort(ids, dim=1, stable=True)
    s1, i1 = scores.gather(1, o1), ids.gather(1, o1)
    o2 = torch.argsort(s1, dim=1, descending=True, stable=True)
    return s1.gather(1, o2), i1.gather(1, o2)


def _block_topk(S: torch.Tensor, k: int, id0: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-k (score desc, id asc) of a block S (r, c) whose column j is label id0 + j."""
    k = min(k, S.shape[1])
    vals, cols = torch.topk(S, k, dim=1, sorted=False)
    kth = vals.min(dim=1, keepdim=True).values
    tied = (S >= kth).sum(dim=1) > k
    if bool(tied.any()):
        rows = tied.nonzero().squeeze(1)
        # stable descending sort keeps ascending column order among equal scores
        full = torch.argsort(S[rows], dim=1, descending=True, stable=True)[:, :k]
        cols[rows] = full
        vals[rows] = S[rows].gather(1, full)
    return vals, cols + id0


def chunked_topk(Z: np.ndarray, W: np.ndarray, b: np.ndarray, k: int, chunk_mb: int = 256,
                 device: str | torch.device = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """Top-k labels by logit for every row of Z.

    Z: (n, d) float32 encoder outputs; W: (L, d) float32; b: (L,) float32; k <= L.
    Returns idx (n, k) int64 and scores (n, k) float32, sorted by score descending, ties by smaller id.
    """
    Z = np.asarray(Z)
    W = np.asarray(W)
    b = np.asarray(b)
    if Z.ndim != 2 or W.ndim != 2 or b.ndim != 1:
        raise ValueError(f"expected Z (n, d), W (L, d), b (L,), got {Z.shape}, {W.shape}, {b.shape}")
    if Z.shape[1] != W.shape[1] or W.shape[0] != b.shape[0]:
        raise ValueError(f"shapes disagree: Z {Z.shape}, W {W.shape}, b {b.shape}")
    n, L = Z.shape[0], W.shape[0]
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
        raise TypeError(f"k: expected an int, got {type(k).__name__}")
    if not (1 <= k <= L):
        raise ValueError(f"k must be in [1, L={L}], got {k}")
    if chunk_mb <= 0:
        raise ValueError(f"chunk_mb must be > 0, got {chunk_mb}")
    dev = resolve_device(device)
    budget = max(1, int(chunk_mb * 2**20 // 4))  # float32 scores per block
    if L <= budget:
        c, r = L, max(1, budget // L)
    else:
        r = max(1, min(n, 64))
        c = max(k, budget // r)
    Wt = torch.as_tensor(W, dtype=torch.float32, device=dev)
    bt = torch.as_tensor(b, dtype=torch.float32, device=dev)
    idx = np.empty((n, k), dtype=np.int64)
    scores = np.empty((n, k), dtype=np.float32)
    with torch.no_grad():
        for r0 in range(0, n, r):
            z = torch.as_tensor(np.array(Z[r0:r0 + r], dtype=np.float32), device=dev)  # copy: Z may be a read-only memmap
            best_s = best_i = None
            for c0 in range(0, L, c):
                S = torch.addmm(bt[c0:c0 + c], z, Wt[c0:c0 + c].T)
                s, i = _block_topk(S, k, c0)
                if best_s is not None:
                    s, i = torch.cat([best_s, s], 1), torch.cat([best_i, i], 1)
                s, i = _order_by_score_then_id(s, i)
                best_s, best_i = s[:, :k], i[:, :k]
            idx[r0:r0 + r] = best_i.cpu().numpy()
            scores[r0:r0 + r] = best_s.cpu().numpy()
    return idx, scores
