"""Supervised on the logs (docs/methods.md): weighted log-likelihood of the rewarded logged actions.

    loss = -(1/B) sum_i sum_j c_ij r_ij log pi_C(y_ij | x_i, y_i,<j)

pi_C is the Plackett-Luce conditional (docs/estimators.md) of the softmax over the candidates C(x):
the policy is pushed towards the logged labels that were clicked, in their logged order. c_ij is 1
(`weights: none`, the plain cross-entropy on the logged data of UIPS, Zhang et al. 2023) or the
inverse conditional logging propensity 1/q_ij (`weights: ips`), capped at `clip` when given (the
weighted log-likelihood of Aouali & Sakhi 2025). The loss reads the K logits of C(x) only.
Test time: pi over C(x), stochastic (its greedy ranking reported beside it, as for every softmax).
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from poxm_core.config.schema import MethodConfig
from poxm_core.methods.base import Batch, HeadContext, Method, pl_logpi


class SupervisedLogsOptions(MethodConfig):
    """The weights c_ij of the logged positions."""
    weights: Literal["none", "ips"] = Field("none", description="supervised_logs: c_ij = 1 or 1/q_ij")
    clip: float | None = Field(None, gt=0, description="supervised_logs: largest c_ij under weights=ips")


def position_weights(q: torch.Tensor, weights: str, clip: float | None) -> torch.Tensor | None:
    """c_ij (B, ell): None for weights='none' (all 1), else 1/q_ij capped at `clip` (None: uncapped)."""
    if weights == "none":
        return None
    c = 1.0 / q
    return c.clamp(max=clip) if clip is not None else c


def weighted_loglik_loss(logpi: torch.Tensor, rewards: torch.Tensor, c: torch.Tensor | None) -> torch.Tensor:
    """-(1/B) sum_ij c_ij r_ij log pi_ij per head: logpi (..., B, ell); rewards, c (B, ell). A position
    with r_ij = 0 adds nothing (and no NaN from a -inf log pi)."""
    coef = rewards if c is None else rewards * c
    rewarded = coef > 0
    terms = torch.where(rewarded, logpi, torch.zeros_like(logpi)) * coef
    return -terms.sum(dim=(-2, -1)) / rewards.shape[0]


class SupervisedLogs(Method):
    name = "supervised_logs"
    train_support = "candidates"
    test_policy = "softmax"
    Options = SupervisedLogsOptions
    lr_group = "supervised"
    graph_safe = True

    def test_support(self, mc: SupervisedLogsOptions) -> str:
        return "candidates"

    def ids(self, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        return batch.cand                                                # (B, K): C(x)

    def loss(self, logits: torch.Tensor, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        logpi = pl_logpi(logits, batch.cand_pos)                         # (G, B, ell)
        c = position_weights(batch.q, ctx.mc.weights, ctx.mc.clip)
        return weighted_loglik_loss(logpi, batch.rewards, c)
