"""An epoch's validation estimates beside the next epoch's training (GPU trials).

The per-epoch validation estimates are mostly host work (NumPy estimators, the greedy heads' ranking,
small launches), while an epoch's training mostly waits for the GPU (CUDA-graph replays). On a GPU the
trainer therefore freezes what the estimates read at the end of epoch e (`reporting.freeze`: each head's
view with a copy of its output layer, and its validation features, queued before epoch e+1's work) and
computes them on a thread of their own, on a CUDA stream of their own, while epoch e+1 trains; it collects
them after epoch e+1 (the schedule's `EpochSchedule._collect`). The numbers are those of epoch e's parameters: the same
function as computed in place.

What else waits for them: epoch e's rows, its checkpoint (its state is cloned where it lives at the end
of epoch e, written once the rows are complete, so a resume from it sees exactly what an uninterrupted run
had) and its report (on_epoch). The last epoch is evaluated in place. Used only when the copies are small
(`OVERLAP_MAX_BYTES` of output layers; the Amazon-670K shape would copy gigabytes, and its epochs are
long enough for the estimates not to matter) and POXM_VALIDATION_OVERLAP is not 0.

The estimates' device work (synchronising calls among it) never runs while the training thread captures
a CUDA graph: each head's estimates hold `capture_guard.CAPTURE_GUARD.device_work()`, which a capture
waits for and holds back (a synchronising call during a global-mode capture failed both).
"""
from __future__ import annotations

import contextlib
import os
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from poxm_core.common.errors import PoxmInputError
from poxm_core.training.capture_guard import CAPTURE_GUARD, CaptureGuard
from poxm_core.training.reporting import EvalInputs, epoch_rows, freeze, frozen_bytes, map_heads, val_estimates
from poxm_core.training.spec import TrialSpec
from poxm_core.training.trial_setup import TrialHead

__all__ = ["OVERLAP_MAX_BYTES", "BackgroundValidation", "overlap_wanted"]

OVERLAP_MAX_BYTES = 256 << 20
ENV = "POXM_VALIDATION_OVERLAP"


def overlap_wanted(device: torch.device, heads: list[TrialHead]) -> bool:
    """Whether this trial computes its per-epoch validation estimates beside the next epoch (module doc):
    by default on a GPU when the copies are small; POXM_VALIDATION_OVERLAP=0 never, =1 on any device when
    they are small (on a CPU the thread only competes with training: for tests of the schedule)."""
    raw = os.environ.get(ENV, "").strip()
    if raw not in ("", "0", "1"):
        raise PoxmInputError(f"{ENV}={raw!r}: expected 0 (off) or 1 (on, also on a CPU)")
    small = frozen_bytes(heads) <= OVERLAP_MAX_BYTES
    return small and (raw == "1" or (raw == "" and device.type == "cuda"))


class BackgroundValidation:
    """`start` freezes the heads and queues their estimates on a thread and a CUDA stream of their own."""

    def __init__(self, device: torch.device, guard: CaptureGuard = CAPTURE_GUARD) -> None:
        self.device, self.guard = device, guard
        self.stream = torch.cuda.Stream(device=device) if device.type == "cuda" else None
        self._pool: ThreadPoolExecutor | None = None

    def start(self, spec: TrialSpec, heads: list[TrialHead], losses: dict[str, float], ev: EvalInputs,
              epoch: int) -> Future:
        """Epoch `epoch`'s (rows, metrics), as `reporting.epoch_report` gives them, as a Future."""
        trained = [h for h in heads if h.trains]
        frozen = [freeze(h, ev) for h in trained]          # queued on the training stream, before the next epoch
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
            for view, feats in frozen:                     # used on the side stream: not reused before it is done
                for t in (feats, *((view.params.W, view.params.b) if view.params is not None else ())):
                    t.record_stream(self.stream)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="validation")

        def one(item):
            h, fr = item
            # the current stream is per thread: each of map_heads' threads takes the side stream; one
            # head's device work at a time between the training thread's graph captures (capture_guard)
            with self.guard.device_work(), \
                    torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext():
                return val_estimates(h, ev, None, frozen=fr)

        def run():
            ests = map_heads(one, list(zip(trained, frozen)), self.device)
            if self.stream is not None:
                with self.guard.device_work():
                    self.stream.synchronize()
            return epoch_rows(spec, trained, losses, ests, epoch)
        return self._pool.submit(run)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
