"""How many threads evaluate a trial's heads (reporting.map_heads), as the trial and the sweep's packing
(which counts their working sets in a trial's memory estimate before the trial starts) both see it.
No torch here: the sweep's driver imports it."""
from __future__ import annotations

import os

from poxm_core.common.errors import PoxmInputError

__all__ = ["GPU_EVAL_THREADS", "eval_threads", "eval_threads_for"]


def eval_threads() -> int:
    """POXM_EVAL_THREADS as a positive int, 0 when unset."""
    raw = os.environ.get("POXM_EVAL_THREADS", "").strip()
    if not raw:
        return 0
    if not raw.isdigit() or int(raw) < 1:
        raise PoxmInputError(f"POXM_EVAL_THREADS={raw!r}: expected a positive integer (threads evaluating heads)")
    return int(raw)


# Threads evaluating heads on a GPU when POXM_EVAL_THREADS is unset. The device runs one trial's kernels
# in turn, so more threads only overlap the host's share (NumPy estimators, launches) while each holds a
# head's working set on the card: on a 16-core machine packed 8 trials a card, the CPU count was 16
# threads a trial and made memory, not time, the bound (training/memory.py counts every thread).
GPU_EVAL_THREADS = 4


def eval_threads_for(device) -> int:
    """Threads that evaluate a trial's heads: POXM_EVAL_THREADS, else the CPU count (at most
    GPU_EVAL_THREADS on a CUDA device)."""
    n = eval_threads()
    if n:
        return n
    cpus = os.cpu_count() or 1
    return min(cpus, GPU_EVAL_THREADS) if device is not None and str(device).startswith("cuda") else cpus
