"""Training: trial specs, the grouped-head trainer, checkpoints, `poxm train` (docs/training.md)."""
from poxm_core.training.spec import HeadSpec, TrialSpec, trial_specs

__all__ = ["HeadSpec", "TrialSpec", "trial_specs", "run_trial", "train_command"]


def __getattr__(name):   # the trainer pulls in metrics/estimators; keep `import poxm_core.training` light
    if name == "run_trial":
        from poxm_core.training.trainer import run_trial
        return run_trial
    if name == "train_command":
        from poxm_core.training.train_command import train_command
        return train_command
    raise AttributeError(name)
