"""IS and sIS (docs/estimators.md; paper Eq. obj_not_corrected): V = (1/n) sum_i sum_j w_ij r_ij.

The arithmetic is the same; what differs is the support A the weights were computed with:
IS uses A = S, the policy's full support (e.g. [L] for BanditNet); sIS uses A = Phi^p(x_i), the
top-p actions of rho (`weights.sis_weights`). The registry keeps both names so results say which.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from poxm_core.estimators.base import BaseEstimator

__all__ = ["IS", "SIS", "is_value_torch"]


def is_value_torch(w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """(1/n) sum_ij w_ij r_ij, differentiable; w, r (n, ell)."""
    return (w * r).sum() / w.shape[0]


@dataclass(frozen=True)
class IS(BaseEstimator):
    """Importance sampling with per-position (pruned or product) weights: t_i = sum_j w_ij r_ij."""
    name: ClassVar[str] = "is"
    label: ClassVar[str] = "IS"

    def per_sample(self, w: np.ndarray, r: np.ndarray) -> np.ndarray:
        return np.sum(w * r, axis=1)

    def torch_value(self, w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return is_value_torch(w, r)


@dataclass(frozen=True)
class SIS(IS):
    """Selective IS: IS arithmetic on weights of pi restricted to Phi^p(x) (`sis_weights`)."""
    name: ClassVar[str] = "sis"
    label: ClassVar[str] = "sIS"
    support: ClassVar[str] = "selector"
