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
from poxm_core.estimators import pl_expectations_torch, pl_log_conditionals_torch, phi, selector_pos
from poxm_core.estimators.registry import get_estimator
from poxm_core.methods.base import Batch, HeadContext, Method, Scorer, masked_weights
from poxm_core.methods.poxm import POXMOptions


class DRPOXM(Method):
    name = "dr_poxm"
    uses_p = True
    train_support = "phi"
    test_policy = "softmax"
    Options = POXMOptions
    lr_group = "is"
    needs_reward_model = True

    def test_support(self, mc: POXMOptions) -> str:
        return mc.support

    def loss(self, score: Scorer, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        if ctx.reward is None:
            raise PoxmInputError("dr_poxm: needs the fitted reward model (HeadContext.reward)")
        phi_ids = phi(batch.cand, ctx.p)
        scores = score(phi_ids)                                             # (B, p): Phi^p(x) only
        pos = selector_pos(batch.cand_pos, ctx.p)
        w = masked_weights(pl_log_conditionals_torch(scores, pos, check=False), batch.q)
        dm_term = pl_expectations_torch(scores, ctx.reward(phi_ids).to(scores.dtype), pos, check=False)
        rhat_logged = ctx.reward(batch.actions).to(scores.dtype)
        return -get_estimator("dr").torch_value(w, batch.rewards, dm_term=dm_term, rhat_logged=rhat_logged)
