"""Supervised skyline (docs/methods.md): the head trained one-vs-all with FULL labels on every fit instance.

    loss = (1/B) sum_i sum_{y in [L]} BCE(s(x_i, y), 1{y in Y*_i})

(the logging model's objective, summed over labels as in `model/logging_model.py`, on all fit
instances instead of the alpha sample). Logits over all L per batch: memory O(B L), bounded by the
batch. It is the only method that reads training labels (Prepared.Y_train). Test time: greedy top-k
over C(x) by score, like DM.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from poxm_core.common.errors import PoxmInputError
from poxm_core.methods.base import Batch, HeadContext, Method
from poxm_core.model.core import dense_targets


class Skyline(Method):
    name = "skyline"
    train_support = "full labels"
    test_policy = "greedy"
    lr_group = "supervised"
    graph_safe = True

    def needs_labels(self) -> bool:
        return True

    def initial_bias(self, prepared, mc=None) -> np.ndarray:
        """Each label's prior log-odds on the fit instances (the logging model's init, with full labels)."""
        Y = prepared.Y_train[prepared.log_train.instance]
        prior = (np.asarray(Y.getnnz(axis=0), dtype=np.float64) + 0.5) / (Y.shape[0] + 1.0)
        return (np.log(prior) - np.log1p(-prior)).astype(np.float32)

    def scores_every_label(self, mc) -> bool:
        return True

    def ids(self, batch: Batch, ctx: HeadContext) -> None:
        return None                                                     # logits over all L

    def loss(self, logits: torch.Tensor, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        if batch.labels is None:
            raise PoxmInputError("skyline: the prepared data has no training labels (Prepared.Y_train is None)")
        target = dense_targets(batch.labels, logits.device, batch.n_labels)       # (B, L)
        bce = F.binary_cross_entropy_with_logits(logits, target.expand_as(logits), reduction="none")
        return bce.sum(dim=(-2, -1)) / batch.size


class SkylineEndToEnd(Skyline):
    """The paper's skyline: the methods' architecture with every learned layer trained from a fresh init
    (the encoder too where `training.network_inputs` reads it; policy/network.py `EndToEndPolicy`) on
    every fit instance with full labels; `skyline` above is the same loss on the frozen inputs."""
    name = "skyline_e2e"
    policy = "end2end"
