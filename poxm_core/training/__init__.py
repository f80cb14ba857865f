"""Training: trial specs, the grouped-head trainer, checkpoints, `poxm train` (docs/training.md)."""
from poxm_core.training.spec import HeadSpec, TrialSpec, trial_specs
# imported eagerly: the function shadows its module's name in this package
from poxm_core.training.train_command import train_command

__all__ = ["HeadSpec", "TrialSpec", "trial_specs", "run_trial", "train_command"]


def __getattr__(name):   # the trainer pulls in metrics/estimators: load it on first use
    if name == "run_trial":
        from poxm_core.training.trainer import run_trial
        return run_trial
    raise AttributeError(name)
