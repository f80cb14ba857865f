"""The report's figures drawn by a pool of processes.

Drawing and saving (PNG + PDF) is most of a report's time (about half of the four-dataset benchmark's
report, its 36 figures; docs/performance.md) and matplotlib draws on one thread, so figures go to
fresh ('spawn') worker processes: nothing of the driver (Ray's threads, open stores) is inherited. The
report asks for each figure where it belongs and reads the results in the same order, so index.md and
the files are those of drawing them one after another. `POXM_REPORT_PROCS` sets the processes (1: draw
in this process; default half the CPUs up to 8, none below 4 CPUs). A pool that cannot start or breaks falls back to drawing here.
"""
from __future__ import annotations

import os
import sys
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from poxm_core.common.errors import PoxmInputError

ENV = "POXM_REPORT_PROCS"
MAX_PROCS = 8
MIN_FIGURES = 6          # below this, starting processes costs more than it saves


def report_procs(environ=None) -> int:
    """Processes for drawing: $POXM_REPORT_PROCS, else half the CPUs up to 8, and 1 (no pool) below 4
    CPUs, where starting the processes would cost about what they save."""
    environ = os.environ if environ is None else environ
    raw = environ.get(ENV)
    if raw is None or raw == "":
        cpus = os.cpu_count() or 1
        return 1 if cpus < 4 else min(cpus // 2, MAX_PROCS)
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise PoxmInputError(f"{ENV}={raw!r}: expected a whole number >= 1 (1 draws the report's figures in one process)")
    return n


class _Figure:
    """One figure asked for: drawn by the pool (`future`), or here when there is no pool or it broke;
    `result()` gives the figure function's return value, drawn once."""

    def __init__(self, owner: "FigurePool", fn, args: tuple, kwargs: dict, future: Future | None = None):
        self.owner, self.fn, self.args, self.kwargs, self.future = owner, fn, args, kwargs, future
        self.done, self.value = False, None

    def result(self):
        if not self.done:
            if self.future is not None:
                try:
                    self.value = self.future.result()
                    self.owner.drawn_by_pool += 1
                except (BrokenProcessPool, CancelledError) as exc:    # a worker died (killed, out of memory)
                    self.owner.stop(exc)
                    self.future = None
            if self.future is None:
                self.value = self.fn(*self.args, **self.kwargs)
            self.done = True
        return self.value


_prestarted: ProcessPoolExecutor | None = None     # started before the report (prestart), not yet taken


def _spawn(procs: int) -> ProcessPoolExecutor | None:
    import multiprocessing
    try:
        return ProcessPoolExecutor(max_workers=procs, mp_context=multiprocessing.get_context("spawn"))
    except (OSError, ValueError):
        return None


def _ready() -> bool:
    """Run in each new process: importing this module (to find this function) imported the report's
    drawing code; matplotlib's pyplot is the rest of what a figure needs."""
    import matplotlib.pyplot  # noqa: F401
    return True


def prestart(procs: int | None = None) -> bool:
    """Start the drawing processes now, for a report this process builds later (a sweep calls this while
    its last trials run): they start and import matplotlib meanwhile, and the report's FigurePool takes
    them over. Nothing happens with one process (report_procs) or when they are already started."""
    global _prestarted
    procs = report_procs() if procs is None else procs
    if procs <= 1 or _prestarted is not None:
        return False
    _prestarted = _spawn(procs)
    if _prestarted is None:
        return False
    try:
        for _ in range(procs):          # one task per process: each one is started and imports
            _prestarted.submit(_ready)
    except (BrokenProcessPool, RuntimeError, OSError):
        discard_prestarted()
        return False
    return True


def discard_prestarted() -> None:
    """Shut down prestarted processes that no report took (the sweep ended before its report)."""
    global _prestarted
    pool, _prestarted = _prestarted, None
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


def _take_prestarted() -> ProcessPoolExecutor | None:
    global _prestarted
    pool, _prestarted = _prestarted, None
    return pool


class FigurePool:
    """submit(fn, *args) -> a figure whose .result() is fn's return value. `expected` figures decide
    whether a pool is worth starting; processes started earlier (prestart) are used whatever the number;
    close() (or leaving the `with` block) shuts the pool down."""

    def __init__(self, expected: int, procs: int | None = None):
        procs = report_procs() if procs is None else procs
        self.procs = min(procs, max(1, expected))
        self.pool = _take_prestarted() if procs > 1 else None
        self.drawn_by_pool = 0
        self._warned = False
        if self.pool is None and self.procs > 1 and expected >= MIN_FIGURES:
            self.pool = _spawn(self.procs)

    def submit(self, fn, *args, **kwargs) -> _Figure:
        future = None
        if self.pool is not None:
            try:
                future = self.pool.submit(fn, *args, **kwargs)
            except (BrokenProcessPool, RuntimeError, OSError) as exc:
                self.stop(exc)
        return _Figure(self, fn, args, kwargs, future)

    def stop(self, exc: BaseException) -> None:
        """The pool broke: shut it down (its pending figures are cancelled and drawn here), say so once."""
        self.close()
        if not self._warned:
            self._warned = True
            print(f"poxm report: the figure processes stopped ({type(exc).__name__}); drawing the rest in this "
                  "process", file=sys.stderr)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
