"""The CUDA-graph runner of the training loop: an epoch's full batches as replays of ONE captured step.

On a GPU a training step is hundreds of small kernels, and launching them from Python, not the GPU,
sets the pace (docs/performance.md). `GraphedSteps` takes the sync-free form of the training step
(`training.step.TrainStep(..., static=True)`), captures it once in a CUDA graph and replays it for
every full batch of each epoch: the batch is gathered on the device from the epoch's order by a batch
counter that the graph advances itself, the sparse input padded to a fixed number of entries (weight
0: adds exactly 0), the labels (skyline heads) as a padded table of label ids, and the reward model's
rhat (DR-POXM heads) computed inside the graph from the same padded input, the sampled softmax's
negatives drawn for the whole epoch before it and read by the counter. The same arithmetic as the
eager loop; only the float summation order of atomic adds differs (as between two CUDA runs anyway).
The last, shorter batch runs eagerly (the caller).

`graphs_enabled(device)`: a CUDA device, POXM_CUDA_GRAPHS not '0', deterministic algorithms off.
Without a GPU the runner runs the same static steps without a graph (what the CPU tests check); a
failed capture falls back to that too, with a warning.
"""
from __future__ import annotations

import contextlib
import os
import warnings

import numpy as np
import torch

from poxm_core.methods import Batch

__all__ = ["GraphedSteps", "graphs_enabled"]


def graphs_enabled(device: torch.device) -> bool:
    return (device.type == "cuda" and os.environ.get("POXM_CUDA_GRAPHS", "1") != "0"
            and not torch.are_deterministic_algorithms_enabled())


class GraphedSteps:
    """The full batches of each epoch as replays of one CUDA graph of `step` (module doc). `data` is the
    trial's `training.batches.TrainData`; `step` a static `TrainStep`; B the batch size."""

    WARMUP = 2     # eager steps (on a side stream) before the capture, as torch.cuda.graph asks

    def __init__(self, data, step, B: int, rhat_of=None, labels: bool = False,
                 rhat_reads_sparse: bool = False, guard=None) -> None:
        dev = data.device
        self.data, self.step, self.B = data, step, B
        # guard(): a context held around the capture (training.capture_guard: no other thread's device
        # work while it is open)
        self.guard = guard or contextlib.nullcontext
        # rhat_of(batch): the fitted reward model's rhat for DR-POXM heads (a forward without gradient);
        # labels: the skyline heads read the batch's labels, gathered from `data.labels_padded()`
        self.rhat_of = rhat_of
        self.labels = data.labels_padded() if labels else None
        self.sparse = bool(step.stacks) or (rhat_of is not None and rhat_reads_sparse and data.X is not None)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.broken = False
        self.cap = 0
        self.i = torch.zeros((), dtype=torch.int64, device=dev)              # the batch counter
        self.total = torch.zeros(len(step.order), dtype=torch.float64, device=dev)
        self.arB = torch.arange(B, device=dev)
        self.rows_ep = torch.empty(data.n, dtype=torch.int64, device=dev)
        self.ind_ep = self.w_ep = self.ptr_ep = self.arC = None

    def _buffers(self, bags) -> None:
        """Copy the epoch's order and sparse input into the static buffers; (re)size the padding."""
        if not self.sparse:
            return
        full = self.data.n // self.B
        ptr = bags.ptr
        need = int((ptr[self.B:(full * self.B) + 1:self.B] - ptr[0:full * self.B:self.B]).max())
        total = int(ptr[-1])
        dev = self.data.device
        if self.ind_ep is None or self.ind_ep.numel() != total:
            self.ind_ep = torch.empty(total, dtype=bags.indices.dtype, device=dev)
            self.w_ep = torch.empty(total, dtype=bags.weights.dtype, device=dev)
            self.ptr_ep = torch.empty(self.data.n + 1, dtype=torch.int64, device=dev)
            self.graph = None
        if need > self.cap:
            self.cap = int(np.ceil(need * 1.05 / 1024) * 1024)
            self.arC = torch.arange(self.cap, device=dev)
            self.graph = None
        self.ind_ep.copy_(bags.indices)
        self.w_ep.copy_(bags.weights)
        self.ptr_ep[:-1].copy_(bags.offsets)
        self.ptr_ep[-1] = total

    def _step(self) -> None:
        """One full batch (number self.i) through the training step; then self.i += 1."""
        d, B = self.data, self.B
        a = self.i * B
        r = self.rows_ep.index_select(0, a + self.arB)
        inst = d.instance.index_select(0, r)
        bag = None
        if self.sparse:
            lo = self.ptr_ep.index_select(0, a.view(1))
            hi = self.ptr_ep.index_select(0, (a + B).view(1))
            pos = lo + self.arC
            real = pos < hi
            pos = pos.clamp(max=self.ind_ep.numel() - 1)
            idx = torch.where(real, self.ind_ep.index_select(0, pos), torch.zeros((), dtype=self.ind_ep.dtype,
                                                                                  device=d.device))
            w = torch.where(real, self.w_ep.index_select(0, pos), torch.zeros((), dtype=self.w_ep.dtype, device=d.device))
            off = self.ptr_ep.index_select(0, a + self.arB) - lo
            bag = (idx, off, w, torch.searchsorted(off, self.arC, right=True) - 1)
        batch = Batch(z=d.Z.index_select(0, inst), actions=d.actions.index_select(0, r),
                      cand_pos=d.cand_pos.index_select(0, r), q=d.q.index_select(0, r),
                      rewards=d.rewards.index_select(0, r), cand=d.cand.index_select(0, inst),
                      inv_prop_actions=d.inv_prop_actions.index_select(0, r), n_labels=d.prepared.n_labels,
                      labels=self.labels.index_select(0, inst) if self.labels is not None else None,
                      bag=bag[:3] if bag is not None else None, rho=d.rho.index_select(0, inst))
        losses = self.step(batch, self.rhat_of(batch) if self.rhat_of is not None else None, stack_bag=bag)
        self.total.add_(losses.double() * B)
        self.i.add_(1)

    def run_epoch(self, rows: torch.Tensor, bags, total: torch.Tensor, ctxs: dict | None = None) -> int:
        """Train the epoch's full batches; adds their losses to `total`; returns where the eager loop goes on.
        ctxs: this epoch's head contexts (their generators are seeded per epoch; the captured arithmetic
        reads none of them, `begin_epoch` draws the sampled negatives from them)."""
        if ctxs is not None:
            self.step.ctxs = ctxs
        full = self.data.n // self.B
        if self.rows_ep.numel() != rows.numel():      # the log's size changed (benchmarks cut it): recapture
            self.rows_ep = torch.empty_like(rows)
            self.graph = None
        self.rows_ep.copy_(rows)
        self._buffers(bags)
        self.i.zero_()
        self.total.zero_()
        engine = self.step.engine
        if engine is not None and engine.begin_epoch(full, self.i, self.step.ctxs):   # the draws: a new buffer
            self.graph = None
        done = 0
        if self.data.device.type == "cuda" and self.graph is None and not self.broken:
            s = torch.cuda.Stream(device=self.data.device)
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(min(self.WARMUP, full)):
                    self._step()
                    done += 1
            torch.cuda.current_stream().wait_stream(s)
            if done < full:
                try:
                    g = torch.cuda.CUDAGraph()
                    # thread-local: another thread's synchronising call (the overlapped validation's)
                    # neither is refused nor invalidates this capture, as in the global mode
                    with self.guard(), torch.cuda.graph(g, capture_error_mode="thread_local"):
                        self._step()
                    self.graph = g
                except Exception as exc:   # noqa: BLE001  (fall back to the same steps without a graph)
                    self.broken = True
                    warnings.warn(f"CUDA graph capture failed ({type(exc).__name__}: {exc}); training "
                                  "without a graph", RuntimeWarning, stacklevel=2)
        for _ in range(done, full):
            if self.graph is not None:
                self.graph.replay()
            else:
                self._step()
        total += self.total      # the step counters advanced on the device, inside the steps
        return full * self.B
