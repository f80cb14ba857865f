"""Training: trial specs, the grouped-head trainer, checkpoints, `poxm train` (docs/training.md)."""
from poxm_core.training.command import train_command
from poxm_core.training.spec import HeadSpec, TrialSpec, trial_specs
from poxm_core.training.trainer import run_trial

__all__ = ["HeadSpec", "TrialSpec", "trial_specs", "run_trial", "train_command"]
