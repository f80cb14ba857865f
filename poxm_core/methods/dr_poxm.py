"""DR-POXM (the paper's future work; docs/estimators.md, docs/methods.md): the doubly robust estimator restricted to Phi^p as
the objective, with the Direct Method's reward model rhat fitted first and held fixed.

    loss = -(1/B) sum_i sum_j [ dm_ij + w_ij(Phi^p) (r_ij - rhat(x_i, y_ij)) ]
    dm_ij = E_{y ~ pi_Phi(. | x_i, y_i,<j)} rhat(x_i, y)          (plackett_luce.pl_expectations)

It is minus the registry's 'dr' estimator evaluated in torch on the same pruned weights as POXM's
(`estimators.weights`). The reward model replaces the translation lambda as the control variate, so
DR-POXM has no lambda grid, only p. Like POXM it asks the scorer for the p logits of Phi^p(x) only.
Test time: pi restricted to Phi^p(x), stochastic (option support="candidates": C(x)).
"""
from __future__ import annotations

import torch

from poxm_core.common.errors import PoxmInputError
from poxm_core.estimators import phi, selector_pos
from poxm_core.estimators.dr import dr_value_torch
from poxm_core.methods.base import Batch, HeadContext, Method, masked_weights, pl_expect, pl_logpi
from poxm_core.methods.poxm import POXMOptions


class DRPOXM(Method):
    name = "dr_poxm"
    uses_p = True
    train_support = "phi"
    test_policy = "softmax"
    Options = POXMOptions
    lr_group = "is"
    needs_reward_model = True
    graph_safe = True

    def test_support(self, mc: POXMOptions) -> str:
        return mc.support

    def ids(self, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        return phi(batch.cand, ctx.p)                                       # (B, p): Phi^p(x) only

    def loss(self, logits: torch.Tensor, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        if ctx.reward is None:
            raise PoxmInputError("dr_poxm: needs the fitted reward model (HeadContext.reward)")
        pos = selector_pos(batch.cand_pos, ctx.p)
        w = masked_weights(pl_logpi(logits, pos), batch.q)                  # (G, B, ell)
        dm_term = pl_expect(logits, ctx.reward(phi(batch.cand, ctx.p)), pos)
        rhat_logged = ctx.reward(batch.actions).to(logits.dtype)
        return -dr_value_torch(w, batch.rewards, dm_term, rhat_logged)
