"""What follows each epoch's training in a trial: its validation estimates, its checkpoint, its on_epoch.

`run_trial` (trainer.py) trains the epochs; after each it hands the epoch to an `EpochSchedule`, which
decides when the rest happens. In the plain order an epoch is validated, its rows kept, its checkpoint
written (every training.checkpoint_every epochs) and on_epoch called, before the next epoch trains.
Two pieces move work beside training without changing what is computed or written:

- The validation overlap (overlap.py): on a GPU the per-epoch validation estimates are mostly host work
  while an epoch's training mostly waits for the card, so the estimates of epoch e run on a thread and a
  CUDA stream of their own while epoch e+1 trains. Everything that needs them waits with them: epoch e's
  rows, its checkpoint (its state copied, on the device, at the end of epoch e, `snapshot`; its rows
  filled in once they are in, so a resume from it sees exactly what an uninterrupted run had) and its
  on_epoch follow once they are collected, after epoch e+1's training. The last epoch of a phase is
  validated in place.
- The background checkpoint: the last epoch's checkpoint is copied to the host and written on a thread
  while the final report runs (nothing changes the parameters any more; at Amazon-670K's size it is
  gigabytes). `last_checkpoint()` wraps the final report: it waits for the write even when the report
  fails (a resume reads that checkpoint) and calls the last epoch's on_epoch once both are done.

Phase 1 (the reward model alone, `reward_epoch`) keeps its epochs' rows; its per-epoch metrics join the
metrics of phase 2's epoch of the same number (`epoch`), so on_epoch sees one set per epoch. After an
epoch's on_epoch returns, `reported.json` in out_dir records it (a restart hands over an epoch whose
on_epoch never returned: trainer._report_restored). Each stage's seconds go to `Timing`, summary.json's
"timing".
"""
from __future__ import annotations

import contextlib
import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterator

import torch

from poxm_core.common.atomic import write_text
from poxm_core.training.checkpoint import on_host, save_checkpoint, snapshot
from poxm_core.training.overlap import BackgroundValidation
from poxm_core.training.reporting import EvalInputs, epoch_report
from poxm_core.training.spec import TrialSpec
from poxm_core.training.trial_setup import TrialHead

__all__ = ["EpochSchedule", "Timing", "REPORTED", "mark_reported", "OnEpoch"]

OnEpoch = Callable[[int, dict, "Path | None"], None]
REPORTED = "reported.json"      # in out_dir: the last epoch whose on_epoch returned


def mark_reported(out_dir: Path, epoch: int) -> None:
    write_text(out_dir / REPORTED, json.dumps({"epoch": epoch}))


class Timing(dict):
    """summary.json's "timing": seconds by stage (setup_s, train_s, eval_s, checkpoint_s, report_s with an
    on_epoch, and their parts), counted from `t0`, the trial's start."""

    def __init__(self, device: torch.device, report: bool) -> None:
        self.t0 = time.perf_counter()
        super().__init__(setup_s=0.0, train_s=0.0, eval_s=0.0, checkpoint_s=0.0, **({"report_s": 0.0} if report else {}))
        self.device = device

    def sync(self) -> None:
        """Wait for the device, so that a stage's timing includes its queued GPU work."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def timed(self, key: str, fn, *args):
        """fn(*args), its seconds (queued GPU work included) added to `key`."""
        t = time.perf_counter()
        out = fn(*args)
        self.sync()
        self[key] += time.perf_counter() - t
        return out

    def since(self, key: str, t: float) -> None:
        """The seconds since `t` added to `key` (no device wait)."""
        self[key] += time.perf_counter() - t


def _in_background(fn, *args) -> Future:
    """fn(*args) on a thread of its own; the Future gives its result (or raises its exception)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
    try:
        return pool.submit(fn, *args)
    finally:
        pool.shutdown(wait=False)


class EpochSchedule:
    """After each epoch: its validation, rows, checkpoint and on_epoch, in the order of the module doc.

    `rows`: the rows so far (a resumed trial's, from its checkpoint), extended epoch by epoch.
    `state(epoch, rows, metrics=None)`: a checkpoint's content; `rhash`: the settings hash its meta
    carries; `every`: training.checkpoint_every; `overlap`: validate beside the next epoch (overlap.py's
    `overlap_wanted`). `validate` and `save` are the stages (reporting.epoch_report,
    checkpoint.save_checkpoint), given by the caller so that it names the stages it runs.
    """

    def __init__(self, spec: TrialSpec, ev: EvalInputs, out_dir: Path, rows: list[dict],
                 state: Callable[..., dict], rhash: str, *, timing: Timing, on_epoch: OnEpoch | None, every: int,
                 overlap: bool, validate=epoch_report, save=save_checkpoint) -> None:
        self.spec, self.ev, self.out_dir, self.rows = spec, ev, out_dir, rows
        self._state, self._meta = state, {"trial": spec.name, "result_hash": rhash}
        self.timing, self.on_epoch, self.every = timing, on_epoch, every
        self._validate, self._save = validate, save
        self._background = BackgroundValidation(ev.device) if overlap else None
        self._pending: dict | None = None     # the epoch whose estimates are being computed: what waits for them
        self._early: dict[int, dict[str, float]] = {}    # phase 1's metrics, by epoch, for phase 2's on_epoch
        self._writing: Future | None = None   # the last checkpoint's write
        self._last: tuple[int, dict] | None = None      # its epoch and metrics, for its on_epoch

    def reward_epoch(self, epoch: int, heads: list[TrialHead], losses: dict, last: bool) -> None:
        """Phase 1's epoch `epoch` trained (`heads`: the reward model, or none when it is hidden): its rows
        kept, its metrics held for phase 2's epoch `epoch`; no checkpoint, no on_epoch."""
        if self._pending is not None:
            e, new, self._early[e], _ = self._collect()
            self.rows += new
        done = self._report(heads, losses, epoch, last)
        if done is not None:
            new, self._early[epoch] = done
            self.rows += new

    def epoch(self, epoch: int, heads: list[TrialHead], losses: dict, last: bool) -> None:
        """Phase 2's epoch `epoch` trained (`heads`: those that write rows): the previous epoch finished
        if its estimates were computed meanwhile, then this one validated (or started), checkpointed and
        reported; the last one's checkpoint written in the background (`last_checkpoint`)."""
        if self._pending is not None:        # the previous epoch's estimates, computed meanwhile
            e, new, metrics, state = self._collect()
            metrics.update(self._early.get(e, {}))
            self.rows += new
            self._finish(e, metrics, state)
        done = self._report(heads, losses, epoch, last)
        if done is None:
            if epoch % self.every == 0:     # this epoch's state, as it is now
                t = time.perf_counter()
                self._pending["state"] = snapshot(self._state(epoch, []))
                self.timing.since("checkpoint_s", t)
            return
        new, metrics = done
        metrics.update(self._early.get(epoch, {}))
        self.rows += new
        if last:
            # the last checkpoint: copied to the host here, then written on a thread while the final
            # evaluation runs (written from the device, its copies slowed the evaluation about as
            # much as the overlap saved); on_epoch gets it once it is complete
            t = time.perf_counter()
            self._writing = _in_background(self._save, self.out_dir, epoch,
                                           on_host(self._state(epoch, self.rows, metrics)), self._meta)
            self.timing.since("checkpoint_s", t)
            self._last = (epoch, metrics)
            return
        self._finish(epoch, metrics, None)

    @contextlib.contextmanager
    def last_checkpoint(self) -> Iterator[None]:
        """Around the final report: the last checkpoint's write is waited for when it ends, even when it
        failed (a resume reads that checkpoint); then, if it succeeded, the last epoch's on_epoch."""
        ckpt_dir = None
        try:
            yield
        finally:
            if self._writing is not None:
                t = time.perf_counter()
                ckpt_dir = self._writing.result()
                self.timing.since("checkpoint_s", t)
        if self._writing is not None and self.on_epoch is not None:
            self.timing.timed("report_s", self.on_epoch, *self._last, ckpt_dir)
            mark_reported(self.out_dir, self._last[0])

    def close(self) -> None:
        """Stop the validation thread (waiting for estimates still running: a failed epoch's)."""
        if self._background is not None:
            self._background.close()

    def _report(self, heads: list[TrialHead], losses: dict, epoch: int, last: bool) -> tuple[list[dict], dict] | None:
        """The epoch's rows and metrics now, or None when they are computed beside the next epoch."""
        if self._background is None or last:
            return self.timing.timed("eval_s", self._validate, self.spec, heads, losses, self.ev, epoch)
        self._pending = {"epoch": epoch, "future": self._background.start(self.spec, heads, losses, self.ev, epoch)}
        return None

    def _collect(self) -> tuple[int, list[dict], dict, dict | None]:
        """The pending epoch's (epoch, rows, metrics, host state to checkpoint or None)."""
        t = time.perf_counter()
        new, metrics = self._pending["future"].result()
        self.timing.since("eval_s", t)
        done, self._pending = self._pending, None
        return done["epoch"], new, metrics, done.get("state")

    def _finish(self, epoch: int, metrics: dict, state: dict | None) -> None:
        """A phase-2 epoch's checkpoint (every `every` epochs) and on_epoch, its rows complete."""
        ckpt_dir = None
        if epoch % self.every == 0:
            if state is None:
                state = self._state(epoch, self.rows, metrics)
            else:      # copied (on the device) at the end of its epoch; its rows are complete only now
                state["rows"], state["metrics"] = list(self.rows), metrics
            ckpt_dir = self.timing.timed("checkpoint_s", self._save, self.out_dir, epoch, state, self._meta)
        if self.on_epoch is not None:
            self.timing.timed("report_s", self.on_epoch, epoch, metrics, ckpt_dir)
            mark_reported(self.out_dir, epoch)
