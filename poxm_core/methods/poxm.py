"""POXM (paper §4, Eq. obj_not_corrected; docs/methods.md): translated selective importance sampling.

    loss = -(1/B) sum_i sum_j w_ij(Phi^p) (r_ij - lam),   w_ij(Phi^p) = pi_Phi(y_ij | x_i, y_i,<j) / q_ij

pi_Phi is the Plackett-Luce conditional (docs/estimators.md) of the softmax restricted to Phi^p(x_i) =
cand[i, :p]; positions with y_ij outside Phi^p get weight 0. The loss asks the scorer for the p
logits of Phi^p(x) only, so a step reads and updates at most B*p rows of W: its cost does not grow
with L. Test time: pi restricted to Phi^p(x), stochastic (option support="candidates": C(x)).
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from poxm_core.config.schema import MethodConfig
from poxm_core.estimators import phi, selector_pos
from poxm_core.methods.base import Batch, HeadContext, Method, pl_logpi, translated_loss


class POXMOptions(MethodConfig):
    """The POXM family's settings (POXM, wPOXM, DR-POXM): the test-time support."""
    support: Literal["phi", "candidates"] = Field("phi", description="POXM test-time support")


class POXM(Method):
    name = "poxm"
    uses_p = True
    uses_lam = True
    train_support = "phi"
    test_policy = "softmax"
    Options = POXMOptions
    lr_group = "is"
    graph_safe = True

    def test_support(self, mc: POXMOptions) -> str:
        return mc.support   # "phi" | "candidates"

    def weight_scale(self, batch: Batch) -> torch.Tensor | None:
        return None

    def ids(self, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        return phi(batch.cand, ctx.p)                                   # (B, p): Phi^p(x) only

    def loss(self, logits: torch.Tensor, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        logpi = pl_logpi(logits, selector_pos(batch.cand_pos, ctx.p))    # (G, B, ell)
        return translated_loss(logpi, batch.q, batch.rewards, ctx.shift, self.weight_scale(batch))
