"""How often a trial hands its epoch reports to Ray Train.

Ray Train's controller polls a job's worker every `RAY_TRAIN_HEALTH_CHECK_INTERVAL_S` seconds (2 by
default) and takes one report per poll; the worker's queue holds one, so `ray.train.report` blocks
while the previous report is still waiting. A trial whose epochs are shorter than the poll would wait
at every epoch (a large share of the real-data benchmark's trial time on four GPUs; docs/performance.md).

So a trial reports an epoch only when a poll has passed since its previous report returned: the
queue is then empty again and the call does not wait. The epochs in between are not reported to Ray
(their metrics still reach MLflow, written by the worker itself, and their checkpoints stay in the
trial folder, which a resume falls back to); Ray gets fewer checkpoints and progress updates, never
older ones. The last epoch is not reported either: the trial's `member_finished` report follows it at
once and would wait for it. Forced reports are always made: in storage mode every checkpoint (it
reaches storage, and so another node, only through its report) and fault injection's epoch.
"""
from __future__ import annotations

import os
import time

POLL_ENV = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"   # Ray Train V2's name for its controller's poll interval
DEFAULT_POLL_S = 2.0                               # Ray's default (a test checks it against Ray's constant)


def poll_interval(environ=None) -> float:
    """The poll interval this worker's Ray Train uses: $RAY_TRAIN_HEALTH_CHECK_INTERVAL_S, else 2 s."""
    raw = (os.environ if environ is None else environ).get(POLL_ENV, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_POLL_S
    except ValueError:
        return DEFAULT_POLL_S      # Ray itself would refuse to start with it; nothing to pace by here
    return max(value, 0.0)


class ReportPace:
    """`due()` says whether a report now would find Ray's queue empty; `sent()` after each report."""

    def __init__(self, interval: float | None = None, clock=time.monotonic) -> None:
        self.interval = poll_interval() if interval is None else float(interval)
        self._clock = clock
        self._last: float | None = None
        self.skipped = 0

    def due(self) -> bool:
        return self._last is None or self._clock() - self._last >= self.interval

    def sent(self) -> None:
        self._last = self._clock()

    def epoch_report_due(self, epoch: int, epochs: int, forced: bool = False) -> bool:
        """Report epoch `epoch` of `epochs`? Forced (a checkpoint bound for storage; fault injection: a
        test's crash right after this epoch's report) always; the last epoch otherwise never (its
        member_finished report follows)."""
        if forced:
            return True
        if epoch < epochs and self.due():
            return True
        self.skipped += 1
        return False
