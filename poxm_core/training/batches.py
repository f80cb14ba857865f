"""What the training loop reads, moved to the training device once per trial, and the epoch's batches.

Why: a batch built on the host (NumPy fancy indexing, a SciPy CSR slice, L2 normalisation, eight
host->device copies) costs more than the GPU step itself at Amazon-670K scale (docs/performance.md).
Here the fit log, the frozen features z, the candidates, the inverse
propensities of the logged actions and the L2-normalised sparse input are device tensors; a batch is
a few index_select calls on them, with no host round trip.

The sparse input of one epoch is gathered once in the epoch's shuffled order (`EpochBags`), so that a
batch's EmbeddingBag input is a slice of it: the row offsets come to the host once per epoch (one
synchronisation per epoch instead of one per batch). The values are exactly those of
`csr_to_bag(X[rows])` (same normalisation, same order of a row's entries).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from poxm_core.methods import Batch
from poxm_core.model.core import csr_to_bag
from poxm_core.prepare.prepared import Prepared

__all__ = ["DeviceCSR", "TrainData", "EpochBags", "padded_labels"]


def _t(a, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(a), dtype=dtype, device=device)


class DeviceCSR:
    """Rows of a CSR matrix on the device, L2-normalised as `csr_to_bag` does, gatherable by row ids."""

    def __init__(self, X: sp.csr_matrix, device: torch.device) -> None:
        indices, _, weights = csr_to_bag(X, device)     # the same normalisation as a per-batch csr_to_bag
        self.indices, self.weights = indices, weights
        self.indptr = _t(X.indptr, torch.int64, device)
        self.device = device

    def gather(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray]:
        """(indices, offsets, weights) of `rows` in their order, and the host copy of the row pointer
        (len(rows) + 1,): rows a..b of the result are entries ptr[a]:ptr[b]. One sync (the total)."""
        start = self.indptr.index_select(0, rows)
        counts = self.indptr.index_select(0, rows + 1) - start
        ptr = torch.zeros(rows.numel() + 1, dtype=torch.int64, device=self.device)
        torch.cumsum(counts, 0, out=ptr[1:])
        ptr_host = ptr.cpu().numpy()
        total = int(ptr_host[-1])
        # entry e of the result is entry start[row(e)] + (e - ptr[row(e)]) of the matrix
        shift = torch.repeat_interleave(start - ptr[:-1], counts, output_size=total)
        pos = shift + torch.arange(total, device=self.device)
        return self.indices.index_select(0, pos), ptr[:-1], self.weights.index_select(0, pos), ptr_host


class EpochBags:
    """The sparse input of one epoch's instances, in batch order: batch [a, b) is a slice."""

    def __init__(self, X: DeviceCSR, inst: torch.Tensor) -> None:
        self.indices, self.offsets, self.weights, self.ptr = X.gather(inst)

    def bag(self, a: int, b: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        lo, hi = int(self.ptr[a]), int(self.ptr[b])
        return self.indices[lo:hi], self.offsets[a:b] - lo, self.weights[lo:hi]


PAD_LABELS_MAX_BYTES = 1 << 30


def padded_labels(Y: sp.csr_matrix | None, device: torch.device,
                  max_bytes: int = PAD_LABELS_MAX_BYTES) -> torch.Tensor | None:
    """CSR labels (n, L) -> (n, k) int64 device tensor of each row's label ids, padded with L; k = the
    largest row's count (at least 1). None without labels or above `max_bytes`."""
    if Y is None:
        return None
    Y = sp.csr_matrix(Y)
    n, L = Y.shape
    counts = np.diff(Y.indptr)
    k = max(1, int(counts.max()) if n else 1)
    if n * k * 8 > max_bytes:
        return None
    out = np.full((n, k), L, dtype=np.int64)
    rows = np.repeat(np.arange(n), counts)
    cols = np.arange(Y.indptr[-1]) - np.repeat(Y.indptr[:-1], counts)
    out[rows, cols] = Y.indices
    return torch.as_tensor(out, device=device)


class TrainData:
    """The fit log and everything a training batch reads, as tensors on `device` (built once)."""

    def __init__(self, prepared: Prepared, device: torch.device, sparse: bool) -> None:
        log = prepared.log_train
        self.prepared, self.device, self.n = prepared, device, log.n
        self.instance_host = np.asarray(log.instance)
        self.instance = _t(log.instance, torch.int64, device)
        self.actions = _t(log.actions, torch.int64, device)
        self.cand_pos = _t(log.cand_pos, torch.int64, device)
        self.q = _t(log.q, torch.float32, device)
        self.rewards = _t(log.rewards, torch.float32, device)
        self.inv_prop_actions = _t(prepared.inv_propensity[log.actions], torch.float32, device)
        self.Z = _t(prepared.Z_train, torch.float32, device)
        self.cand = _t(prepared.policy_train.cand, torch.int64, device)
        self.rho = _t(prepared.policy_train.rho, torch.float32, device)   # (n, K): POTEC's cluster marginals
        self.X = DeviceCSR(prepared.X_train, device) if sparse else None
        self.graphs: dict = {}     # epoch.py's captured training steps, by the trained heads' keys
        self._labels_pad: torch.Tensor | None | bool = False    # False: not built yet

    def labels_padded(self) -> torch.Tensor | None:
        """The training labels of every instance as a device (n, k) int64 table of label ids padded with
        L (k = the largest label count), for the CUDA-graph loop's skyline heads; built on first use.
        None when there are no labels or the table would exceed `PAD_LABELS_MAX_BYTES` (the loop then
        runs eagerly)."""
        if self._labels_pad is False:
            self._labels_pad = padded_labels(self.prepared.Y_train, self.device)
        return self._labels_pad

    def epoch(self, perm: torch.Tensor) -> tuple[torch.Tensor, EpochBags | None]:
        """The epoch's log rows (device) in `perm` order and, if the heads read it, the sparse input."""
        rows = perm.to(self.device)
        bags = EpochBags(self.X, self.instance.index_select(0, rows)) if self.X is not None else None
        return rows, bags

    def batch(self, rows: torch.Tensor, perm: np.ndarray, a: int, b: int, bags: EpochBags | None,
              labels: bool) -> Batch:
        """Batch of log rows rows[a:b] (= perm[a:b] on the host, read only for the skyline's labels)."""
        r = rows[a:b]
        inst = self.instance.index_select(0, r)
        Y = self.prepared.Y_train[self.instance_host[perm[a:b]]] if labels else None
        return Batch(z=self.Z.index_select(0, inst), actions=self.actions.index_select(0, r),
                     cand_pos=self.cand_pos.index_select(0, r), q=self.q.index_select(0, r),
                     rewards=self.rewards.index_select(0, r), cand=self.cand.index_select(0, inst),
                     inv_prop_actions=self.inv_prop_actions.index_select(0, r), n_labels=self.prepared.n_labels,
                     labels=Y, bag=bags.bag(a, b) if bags is not None else None, rho=self.rho.index_select(0, inst))
