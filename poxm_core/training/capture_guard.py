"""Keeping a CUDA-graph capture and the overlapped validation apart (one guard per process).

The training thread captures the epoch's step in a CUDA graph (accel/graph.py) while, on a GPU, the
previous epoch's validation estimates run on a thread of their own (overlap.py). Those estimates make
synchronising calls (`.cpu()`, `.item()`, a stream's synchronize, a cudaMalloc). In CUDA's global
capture mode such a call from ANY thread while a capture is open is refused ("operation not permitted
when stream is capturing") and invalidates the capture: the capture fails and the validation raises,
which killed the trial. Two measures, either of which suffices, at the cause:

- the capture runs in the thread-local mode (only the capturing thread's unsafe calls are refused);
- this guard: a capture waits for the validation work in flight to end and holds new validation work
  back until it ends (`capture()` exclusive, `device_work()` shared, writer first), so no synchronising
  call of the validation ever meets an open capture, whatever the mode.

Captures are rare (once per trial and group of heads, again only when a buffer grows), so the wait costs
at most one head's validation once per capture.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

__all__ = ["CaptureGuard", "CAPTURE_GUARD"]


class CaptureGuard:
    """A readers-writer lock with the writer first: `capture()` for the thread capturing a graph,
    `device_work()` for device work on other threads (validation). Not re-entrant: a thread holding
    `device_work()` must not enter it again (a capture waiting in between would deadlock them)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._workers = 0          # device_work() sections open
        self._capturing = False
        self._waiting = 0          # captures waiting for the work in flight to end

    @property
    def capturing(self) -> bool:
        """A capture is open now."""
        return self._capturing

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            try:
                self._cond.wait_for(lambda: not self._capturing and self._workers == 0)
            finally:
                self._waiting -= 1
            self._capturing = True
        try:
            yield
        finally:
            with self._cond:
                self._capturing = False
                self._cond.notify_all()

    @contextlib.contextmanager
    def device_work(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._capturing and self._waiting == 0)
            self._workers += 1
        try:
            yield
        finally:
            with self._cond:
                self._workers -= 1
                self._cond.notify_all()


CAPTURE_GUARD = CaptureGuard()
