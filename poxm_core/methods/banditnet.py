"""BanditNet (Joachims et al. 2018; docs/methods.md): the translated IS objective with a softmax over all L labels.

    loss = -(1/B) sum_i sum_j w_ij([L]) (r_ij - lam),   w_ij = pi_[L](y_ij | x_i, y_i,<j) / q_ij

pi_[L] is the Plackett-Luce conditional of docs/estimators.md over every label (logits (B, L) per batch; the
step costs O(B L d)). Option softmax="sampled" (for very large L): the normaliser is estimated from
the logged actions plus n_negatives labels drawn uniformly with replacement (shared by the batch,
a seeded generator per head), each negative logit shifted by log(L / n_negatives) (the log-Q
correction: E[(L/n) sum_k e^{s_k}] = sum_y e^{s_y}); a negative that equals one of the instance's
logged actions is masked. log of the estimated normaliser is a biased (standard) approximation of
the exact one. Test time: pi over all L, stochastic (evaluated on its top `eval_max_support` labels).
"""
from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field

from poxm_core.config.schema import MethodConfig
from poxm_core.methods.base import Batch, HeadContext, Method, pl_logpi, translated_loss


class BanditNetOptions(MethodConfig):
    """BanditNet's (and PM-BanditNet's) settings: which softmax the loss normalises with."""
    softmax: Literal["full", "sampled"] = Field("full", description="BanditNet: full softmax over L or sampled")
    n_negatives: int = Field(1024, gt=0, description="sampled softmax: negatives per instance")


def full_or_sampled_logpi(logits: torch.Tensor, batch: Batch, ctx: HeadContext) -> torch.Tensor:
    """(G, B, ell) log pi_[L](y_ij | x_i, y_<j): exact from the logits of every label (G, B, L) (full
    softmax), or the sampled-softmax approximation from the logged actions' and the draws' logits
    (G, B, ell + k)."""
    if ctx.mc.softmax == "full":
        return pl_logpi(logits, batch.actions)
    B, ell = batch.actions.shape
    scores = sampled_scores(logits[..., :ell], logits[..., ell:], batch.actions, ctx.draws, ctx.n_labels)
    return pl_logpi(scores, torch.arange(ell, device=scores.device).expand(B, ell))


def sampled_scores(logged: torch.Tensor, negs: torch.Tensor, actions: torch.Tensor, neg: torch.Tensor,
                   L: int) -> torch.Tensor:
    """The sampled softmax's scores (..., B, ell + k): the logged actions' logits `logged` (..., B, ell),
    then the negatives' `negs` (..., B, k) shifted by log(L / k) (the log-Q correction) and set to -inf
    where the negative (neg (..., k) label ids) is one of the instance's logged `actions` (B, ell).
    Leading dims: none for one head, (G,) for a group of heads (training/batched.py)."""
    k = neg.shape[-1]
    collide = (actions.unsqueeze(-1) == neg.unsqueeze(-2).unsqueeze(-2)).any(dim=-2)     # (..., B, k)
    shifted = torch.where(collide, torch.full_like(negs, float("-inf")), negs + math.log(L / k))
    return torch.cat([logged, shifted], dim=-1)


class BanditNet(Method):
    name = "banditnet"
    uses_lam = True
    train_support = "all"
    test_policy = "softmax"
    Options = BanditNetOptions
    lr_group = "is"
    graph_safe = True

    def scores_every_label(self, mc: BanditNetOptions) -> bool:
        return mc.softmax == "full"

    def draws(self, mc: BanditNetOptions) -> int:
        return 0 if mc.softmax == "full" else int(mc.n_negatives)

    def ids(self, batch: Batch, ctx: HeadContext) -> torch.Tensor | None:
        return None if ctx.mc.softmax == "full" else batch.actions      # sampled: + the draws (`draws`)

    def loss(self, logits: torch.Tensor, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        return translated_loss(full_or_sampled_logpi(logits, batch, ctx), batch.q, batch.rewards, ctx.shift)
