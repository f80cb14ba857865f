"""Direct Method (docs/methods.md): a reward model fit on the logged (x, y_ij, r_ij) only.

    loss = (1/(B ell)) sum_i sum_j BCE(s(x_i, y_ij), r_ij)      (logistic loss, logits s = W[y].z + b[y])

Touches only the rows of the logged actions. Test time: greedy top-k over C(x) by predicted reward
sigma(s) (the ranking by s). The trainer also uses a DM head as the reward model of the DR estimate.

Option `loss_on` (an ablation, docs/protocol.md section 8): 'logged' (default, the above) or a
classification loss on the clicks as partial labels, every other label a negative: over the candidates
C(x) ('candidates': (1/(B K)) sum_i sum_{y in C(x_i)} BCE(s(x_i, y), c_iy), c_iy = 1 iff y was logged
for x_i and rewarded) or over every label ('all', the same over [L]). An unlogged label is then read as
"not relevant", which the log does not say.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field

from poxm_core.config.schema import MethodConfig
from poxm_core.methods.base import Batch, HeadContext, Method


class DirectMethodOptions(MethodConfig):
    """Which labels DM's logistic loss reads."""
    loss_on: Literal["logged", "candidates", "all"] = Field(
        "logged", description="dm: the logged actions only (default), or the clicks as partial labels over the "
                              "candidates C(x) / every label, the rest negatives (an ablation)")


def loss_on(mc: MethodConfig | None) -> str:
    """`mc.loss_on`; 'logged' for a config without the option (the base MethodConfig, built by hand)."""
    return getattr(mc, "loss_on", "logged")


def clicked_targets(ids: torch.Tensor | None, batch: Batch) -> torch.Tensor:
    """c (B, m): 1.0 where label ids[i, k] was logged for instance i and rewarded, else 0; ids None:
    every label (B, L). Built from the batch's logged actions and rewards alone (no training labels)."""
    clicked = batch.rewards > 0                                                       # (B, ell)
    if ids is None:
        target = torch.zeros(batch.size, batch.n_labels, dtype=batch.rewards.dtype, device=batch.rewards.device)
        return target.scatter_reduce(1, batch.actions, clicked.to(target.dtype), reduce="amax")
    hit = (ids.unsqueeze(-1) == batch.actions.unsqueeze(-2)) & clicked.unsqueeze(-2)   # (B, m, ell)
    return hit.any(dim=-1).to(batch.rewards.dtype)


class DirectMethod(Method):
    name = "dm"
    train_support = "logged"
    test_policy = "greedy"
    lr_group = "supervised"
    graph_safe = True
    Options = DirectMethodOptions

    def initial_bias(self, prepared, mc: DirectMethodOptions | None = None) -> np.ndarray:
        """The log-odds of the rate of positives the loss sees, for every label (logged data only): the
        logged reward rate; under `loss_on` candidates / all the clicks per candidate / per label."""
        rewards = prepared.log_train.rewards
        on = loss_on(mc)
        per = {"logged": rewards.size, "candidates": rewards.shape[0] * prepared.policy_train.cand.shape[1],
               "all": rewards.shape[0] * prepared.n_labels}[on]
        r = float(np.clip(rewards.sum(dtype=np.float64) / max(per, 1), 1e-4, 1 - 1e-4))
        return np.full(prepared.n_labels, np.log(r / (1 - r)), dtype=np.float32)

    def scores_every_label(self, mc: DirectMethodOptions) -> bool:
        return loss_on(mc) == "all"

    def ids(self, batch: Batch, ctx: HeadContext) -> torch.Tensor | None:
        on = loss_on(ctx.mc)
        return batch.actions if on == "logged" else batch.cand if on == "candidates" else None

    def loss(self, logits: torch.Tensor, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        on = loss_on(ctx.mc)
        target = batch.rewards if on == "logged" else clicked_targets(batch.cand if on == "candidates" else None, batch)
        bce = F.binary_cross_entropy_with_logits(logits, target.expand_as(logits), reduction="none")
        return bce.mean(dim=(-2, -1))


# The reward model a trial fits for the methods that declare `needs_reward_model` (and the report's
# reward-model checks): the Direct Method's head, trained hidden when the trial does not list it.
REWARD_METHOD = DirectMethod.name
