"""Where each epoch of a trial goes as it ends, on its Ray Train worker: run_trial's `on_epoch`.

Every epoch's metrics go to the trial's MLflow runs and its state.json. An epoch goes to Ray Train,
with its checkpoint, only when a report is due (report_pace.py: as often as Ray's controller takes
them) or forced: in storage mode every checkpoint (it reaches storage, and so other nodes, only
through its report), and the epoch that fault injection targets. Fault injection (CRASH_ENV, for the
resume tests) kills the worker right after that epoch's report, so it is decided here too.
"""
from __future__ import annotations

import os
from pathlib import Path

from orchestration.stages.report_pace import ReportPace

CRASH_ENV = "POXM_INJECT_CRASH_ONCE"   # '<epoch>' or '<epoch>:<trial name>': crash after that epoch's report, once


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


class EpochReports:
    """run_trial's `on_epoch` for one trial of a job. Everything it needs is fixed when the trial starts;
    the only state that changes between epochs is `pace`, the job's (one Ray Train queue a job).

    files: the trial's result files (trial.TrialFiles); out_dir: where run_trial writes; logger: its
    MLflow PointLogger or None; member: the trial's index in its job; head_epochs_before: the job's
    head-epochs before this trial (the progress bar counts in head-epochs); packed: more than one
    trial in the job (its checkpoint folders then carry the trial's name)."""

    def __init__(self, *, trial: str, files, out_dir: Path, logger, pace: ReportPace | None, crash: str | None,
                 epochs: int, member: int, heads: int, head_epochs_before: int, packed: bool) -> None:
        self.trial, self.files, self.out_dir, self.logger, self.pace = trial, files, out_dir, logger, pace
        self.crash, self.epochs, self.member, self.heads = crash, epochs, member, heads
        self.head_epochs_before, self.packed = head_epochs_before, packed

    def __call__(self, epoch: int, metrics: dict, ckpt_dir: Path | None) -> None:
        if self.logger is not None:
            self.logger.log_epoch(epoch, metrics)
        self.files.set_state("running", epoch=epoch, epochs=self.epochs)
        # in storage mode a checkpoint reaches storage (and other nodes) only through its report: every one
        # is reported; otherwise the trial folder keeps them and only a poll's worth of epochs are reported
        must = crashes_after(self.crash, self.trial, epoch) or (self.files.store is not None and ckpt_dir is not None)
        if self.pace is None or self.pace.epoch_report_due(epoch, self.epochs, forced=must):
            self._to_ray(epoch, metrics, ckpt_dir)
            if self.pace is not None:
                self.pace.sent()
        crash_once(self.crash, self.trial, epoch, self.out_dir)

    def _to_ray(self, epoch: int, metrics: dict, ckpt_dir: Path | None) -> None:
        import ray.train

        extra = {"epoch": epoch, "member": self.member, "head_epochs": self.head_epochs_before + self.heads * epoch}
        if ckpt_dir is None:   # training.checkpoint_every > 1: no checkpoint this epoch
            ray.train.report({**metrics, **extra})
            return
        name = f"{self.trial}.epoch_{epoch:04d}" if self.packed else f"epoch_{epoch:04d}"
        ray.train.report({**metrics, **extra}, checkpoint=ray.train.Checkpoint.from_directory(str(ckpt_dir)),
                         checkpoint_dir_name=name)
