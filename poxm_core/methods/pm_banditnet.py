"""PM-BanditNet (docs/methods.md): BanditNet whose positions with y_ij outside Phi^p(x_i) are dropped.

    loss = -(1/B) sum_i sum_j 1{y_ij in Phi^p(x_i)} w_ij([L]) (r_ij - lam)

The weights still use the softmax over all L (full or sampled, as BanditNet); only the positions
are pruned. Test time: as BanditNet (pi over all L, stochastic).
"""
from __future__ import annotations

import torch

from poxm_core.methods.banditnet import BanditNet, full_or_sampled_logpi
from poxm_core.methods.base import Batch, HeadContext, translated_loss


class PMBanditNet(BanditNet):
    name = "pm_banditnet"
    uses_p = True
    graph_safe = True

    def loss(self, logits: torch.Tensor, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        keep = (batch.cand_pos < ctx.p).to(batch.rewards.dtype)
        return translated_loss(full_or_sampled_logpi(logits, batch, ctx), batch.q, batch.rewards, ctx.shift, keep)
