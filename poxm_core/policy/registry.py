"""The policy registry: name -> builder. `build_policy` is the one place a trial's policies are made."""
from __future__ import annotations

import numpy as np
import torch

from poxm_core.errors import PoxmInputError, nearest
from poxm_core.policy.base import Policy
from poxm_core.policy.network import EndToEndPolicy, LinearPolicy, NetworkPolicy, fresh_output, logging_output

__all__ = ["POLICIES", "build_policy"]

POLICIES: dict[str, type[Policy]] = {c.name: c for c in (LinearPolicy, NetworkPolicy, EndToEndPolicy)}


def build_policy(name: str, *, init: str, W0: np.ndarray, b0: np.ndarray, n_features: int | None, hidden: int,
                 lr: float, weight_decay: float, seed: int, device: torch.device) -> Policy:
    """A policy `name` ('linear' | 'network' | 'end2end') with init 'fresh' or 'logging' (seeded by `seed`).

    The linear policy's features are the frozen encoder's (width d = W0.shape[1]); the others have
    width `hidden`. init='logging' copies the logging model's head (W0, b0) into the output layer."""
    if name not in POLICIES:
        raise PoxmInputError(f"training.policy: unknown policy '{name}'" + nearest(name, POLICIES))
    if init == "random":
        init = "fresh"
    L, d = W0.shape
    gen = torch.Generator().manual_seed(int(seed))
    h = d if name == "linear" else (d if init == "logging" else hidden)
    out = logging_output(W0, b0, device) if init == "logging" else fresh_output(L, h, gen, device)
    if name == "linear":
        return LinearPolicy(out, lr, weight_decay, device)
    if n_features is None:
        raise PoxmInputError(f"training.policy={name} reads the sparse input, but the prepared data has no X_train "
                             "(re-run `poxm prepare`)")
    return POLICIES[name](out, lr, weight_decay, device, n_features=n_features, dim=d, gen=gen, init=init)
