"""wPOXM (paper appendix; docs/methods.md): POXM with each weight divided by the label propensity p_{y_ij}.

    loss = -(1/B) sum_i sum_j (w_ij(Phi^p) / p_{y_ij}) (r_ij - lam)

(p_l of Jain et al., docs/data.md: rare labels count more, the propensity-scored objective.) Test
time: as POXM.
"""
from __future__ import annotations

import torch

from poxm_core.methods.base import Batch
from poxm_core.methods.poxm import POXM


class WPOXM(POXM):
    name = "wpoxm"
    graph_safe = True

    def weight_scale(self, batch: Batch) -> torch.Tensor:
        return batch.inv_prop_actions
