"""Direct Method (docs/methods.md): a reward model fit on the logged (x, y_ij, r_ij) only.

    loss = (1/(B ell)) sum_i sum_j BCE(s(x_i, y_ij), r_ij)      (logistic loss, logits s = W[y].z + b[y])

Touches only the rows of the logged actions. Test time: greedy top-k over C(x) by predicted reward
sigma(s) (the ranking by s). The trainer also uses a DM head as the reward model of the DR estimate.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from poxm_core.methods.base import Batch, HeadContext, Method


class DirectMethod(Method):
    name = "dm"
    train_support = "logged"
    test_policy = "greedy"
    lr_group = "supervised"
    graph_safe = True

    def initial_bias(self, prepared) -> np.ndarray:
        """The log-odds of the logged reward rate (logged data only), for every label."""
        r = float(np.clip(prepared.log_train.rewards.mean(), 1e-4, 1 - 1e-4))
        return np.full(prepared.n_labels, np.log(r / (1 - r)), dtype=np.float32)

    def ids(self, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        return batch.actions                                            # (B, ell): the logged actions only

    def loss(self, logits: torch.Tensor, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        bce = F.binary_cross_entropy_with_logits(logits, batch.rewards.expand_as(logits), reduction="none")
        return bce.mean(dim=(-2, -1))


# The reward model a trial fits for the methods that declare `needs_reward_model` (and the report's
# reward-model checks): the Direct Method's head, trained hidden when the trial does not list it.
REWARD_METHOD = DirectMethod.name
