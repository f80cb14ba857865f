"""Where each epoch of a trial goes as it ends, on its Ray Train worker: run_trial's `on_epoch`.

Every epoch's metrics go to the trial's MLflow runs and its state.json. An epoch goes to Ray Train,
with its checkpoint, only when a report is due (report_pace.py: as often as Ray's controller takes
them) or forced: in storage mode every checkpoint (it reaches storage, and so other nodes, only
through its report), and the epoch that fault injection targets. Fault injection (CRASH_ENV, for the
resume tests) kills the worker right after that epoch's report, so it is decided here too; a hold
(HOLD_ENV, for the node-loss test) keeps a trial waiting after an epoch while a file exists, so that
several trials are mid-training at once however slowly the machine starts them.

What a report to Ray costs: Ray copies a reported checkpoint folder into its storage (a trial of 60
heads: hundreds of MB, every epoch) and Tune snapshots its experiment state every `num_to_keep`
checkpoints of a trial. Where the trial folder is on the driver's filesystem (no storage mode), a resume
takes the newer of Ray's checkpoint and the folder's (trial.resume_point), so Ray needs one only now and
then: a due report carries its checkpoint only when RAY_CHECKPOINT_S (POXM_RAY_CHECKPOINT_S, default 60 s)
have passed since the last one it carried; the others go without (metrics only). Resume stays exact:
the folder keeps every checkpoint the trainer writes.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from orchestration.stages.report_pace import ReportPace

CRASH_ENV = "POXM_INJECT_CRASH_ONCE"   # '<epoch>' or '<epoch>:<trial name>': crash after that epoch's report, once
HOLD_ENV = "POXM_INJECT_HOLD"          # '<epoch>:<file>': after that epoch, wait while the file exists (at most HOLD_MAX_S)
HOLD_MAX_S = 600.0
RAY_CHECKPOINT_ENV = "POXM_RAY_CHECKPOINT_S"
RAY_CHECKPOINT_S = 60.0


def ray_checkpoint_s(environ=None) -> float:
    """Seconds between the checkpoints a trial hands Ray outside storage mode (module doc); 0: every one."""
    raw = (os.environ if environ is None else environ).get(RAY_CHECKPOINT_ENV, "").strip()
    if not raw:
        return RAY_CHECKPOINT_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{RAY_CHECKPOINT_ENV}={raw!r}: expected seconds (0: every checkpoint)") from None
    return max(value, 0.0)


def crash_spec() -> str | None:
    return os.environ.get(CRASH_ENV) or None


def crashes_after(spec: str | None, trial: str, epoch: int) -> bool:
    """Whether fault injection (`spec`, see CRASH_ENV) targets this trial's epoch."""
    if not spec:
        return False
    e, _, only = spec.partition(":")
    return int(e) == epoch and (not only or only == trial)


def crash_once(spec: str | None, trial: str, epoch: int, trial_dir: Path) -> None:
    """Fault injection for tests: the worker process dies right after epoch `e` was checkpointed and
    reported, once per trial (a marker file in the trial's working dir records that it fired)."""
    if not crashes_after(spec, trial, epoch):
        return
    marker = trial_dir / ".crash_injected"
    if marker.exists():
        return
    marker.write_text(f"{epoch}\n")
    os._exit(17)


def hold_spec() -> tuple[int, Path] | None:
    """HOLD_ENV parsed: (epoch, file), or None when unset. A malformed value is a one-line error."""
    v = os.environ.get(HOLD_ENV)
    if not v:
        return None
    e, sep, f = v.partition(":")
    if not sep or not e.strip().isdigit() or not f:
        raise ValueError(f"{HOLD_ENV}={v!r}: expected '<epoch>:<file>'")
    return int(e), Path(f)


def hold(spec: tuple[int, Path] | None, epoch: int, max_s: float = HOLD_MAX_S) -> None:
    """Fault injection for tests: after epoch `spec[0]`, sleep while the file `spec[1]` exists (the test
    removes it when it has done what needs trials mid-training), at most `max_s` seconds."""
    if spec is None or spec[0] != epoch:
        return
    end = time.monotonic() + max_s
    while spec[1].exists() and time.monotonic() < end:
        time.sleep(0.1)


class EpochReports:
    """run_trial's `on_epoch` for one trial of a job. Everything it needs is fixed when the trial starts;
    the only state that changes between epochs is `pace`, the job's (one Ray Train queue a job).

    files: the trial's result files (trial.TrialFiles); out_dir: where run_trial writes; logger: its
    MLflow PointLogger or None; member: the trial's index in its job; head_epochs_before: the job's
    head-epochs before this trial (the progress bar counts in head-epochs); packed: more than one
    trial in the job (its checkpoint folders then carry the trial's name)."""

    def __init__(self, *, trial: str, files, out_dir: Path, logger, pace: ReportPace | None, crash: str | None,
                 epochs: int, member: int, heads: int, head_epochs_before: int, packed: bool,
                 session=None) -> None:
        self.trial, self.files, self.out_dir, self.logger, self.pace = trial, files, out_dir, logger, pace
        self.crash, self.epochs, self.member, self.heads = crash, epochs, member, heads
        self.head_epochs_before, self.packed = head_epochs_before, packed
        self.hold = hold_spec()
        self.session = session        # ray_session.RaySession (None: Ray Train's)
        self.ray_every_s = ray_checkpoint_s()
        self._clock = time.monotonic
        self._ray_ckpt_at: float | None = None    # when a report last carried a checkpoint to Ray

    def __call__(self, epoch: int, metrics: dict, ckpt_dir: Path | None) -> None:
        if self.logger is not None:
            self.logger.log_epoch(epoch, metrics)
        self.files.set_state("running", epoch=epoch, epochs=self.epochs)
        # in storage mode a checkpoint reaches storage (and other nodes) only through its report: every one
        # is reported; otherwise the trial folder keeps them and only a poll's worth of epochs are reported
        must = crashes_after(self.crash, self.trial, epoch) or (self.files.store is not None and ckpt_dir is not None)
        if self.pace is None or self.pace.epoch_report_due(epoch, self.epochs, forced=must):
            carry = ckpt_dir is not None and (must or self._ray_checkpoint_due())
            self._to_ray(epoch, metrics, ckpt_dir if carry else None)
            if self.pace is not None:
                self.pace.sent()
        crash_once(self.crash, self.trial, epoch, self.out_dir)
        hold(self.hold, epoch)

    def _ray_checkpoint_due(self) -> bool:
        """Storage mode: always (its checkpoints reach storage only this way); else every ray_every_s."""
        now = self._clock()
        if self.files.store is None and self._ray_ckpt_at is not None and now - self._ray_ckpt_at < self.ray_every_s:
            return False
        self._ray_ckpt_at = now
        return True

    def _to_ray(self, epoch: int, metrics: dict, ckpt_dir: Path | None) -> None:
        from orchestration.stages.ray_session import RaySession

        session = self.session or RaySession("train")
        extra = {"epoch": epoch, "member": self.member, "head_epochs": self.head_epochs_before + self.heads * epoch}
        if ckpt_dir is None:   # none this epoch (training.checkpoint_every > 1), or Ray had one recently
            session.report({**metrics, **extra})
            return
        name = f"{self.trial}.epoch_{epoch:04d}" if self.packed else f"epoch_{epoch:04d}"
        session.report({**metrics, **extra}, ckpt_dir, name)
