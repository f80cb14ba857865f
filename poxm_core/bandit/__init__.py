"""Logging policies, bandit-feedback simulation and the bandit log (docs/protocol.md)."""
from poxm_core.bandit.log import BanditLog
from poxm_core.bandit.policy import build_variant, frozen_gumbel, name_code, noise_key
from poxm_core.bandit.simulate import fold_assignment, fold_splits, label_membership, simulate_log, validation_split

__all__ = ["BanditLog", "build_variant", "frozen_gumbel", "name_code", "noise_key", "label_membership",
           "simulate_log", "validation_split", "fold_assignment", "fold_splits"]
