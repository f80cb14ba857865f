"""Doubly robust estimator for slates scored position by position (beyond the paper; docs/estimators.md).

With a reward model rhat(x, y) on the policy's support A and pruned per-position weights:

    V_DR = (1/n) sum_i sum_j [ dm_ij + w_ij (r_ij - rhat_ij) ]
    dm_ij   = E_{y ~ pi_A(.|x_i, y_i,<j)} rhat(x_i, y)     (`plackett_luce.pl_expectations`)
    rhat_ij = rhat(x_i, y_ij)                               (the logged action; any value if w_ij = 0)

It targets the same quantity as pruned IS/sIS with the same A, and is unbiased for it when either
the weights are exact (rho > 0 on A) or rhat is exact.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from poxm_core.estimators.base import BaseEstimator

__all__ = ["DR", "dr_value_torch"]


def dr_value_torch(w: torch.Tensor, r: torch.Tensor, dm_term: torch.Tensor, rhat_logged: torch.Tensor) -> torch.Tensor:
    """(1/n) sum_ij [dm_ij + w_ij (r_ij - rhat_ij)], differentiable; w, dm_term (..., n, ell) (leading
    axes: heads), r, rhat_logged (n, ell). Returns (...,)."""
    return (dm_term + w * (r - rhat_logged)).sum(dim=(-2, -1)) / w.shape[-2]


@dataclass(frozen=True)
class DR(BaseEstimator):
    """t_i = sum_j dm_term_ij + w_ij (r_ij - rhat_logged_ij). Needs `dm_term` and `rhat_logged` (n, ell)."""
    name: ClassVar[str] = "dr"
    label: ClassVar[str] = "DR"
    aux_names: ClassVar[tuple[str, ...]] = ("dm_term", "rhat_logged")

    def per_sample(self, w: np.ndarray, r: np.ndarray, dm_term: np.ndarray, rhat_logged: np.ndarray) -> np.ndarray:
        return np.sum(dm_term + w * (r - rhat_logged), axis=1)

    def torch_value(self, w, r, dm_term, rhat_logged) -> torch.Tensor:
        return dr_value_torch(w, r, dm_term, rhat_logged)
