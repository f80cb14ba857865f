"""Self-normalised IS per position (docs/estimators.md; Swaminathan & Joachims 2015b), used for selection:

    V_SNIS = sum_j V_j,   V_j = sum_i w_ij r_ij / sum_i w_ij    (V_j := 0 when sum_i w_ij = 0)

Standard error by the delta method: V_j = mean_i(w_ij r_ij) / mean_i(w_ij) linearises to
V_j + (1/n) sum_i w_ij (r_ij - V_j) / wbar_j, so the per-instance influence terms are

    t_i = V + sum_j w_ij (r_ij - V_j) / wbar_j,   wbar_j = (1/n) sum_i w_ij

whose mean is exactly V and whose std / sqrt(n) is the delta-method stderr.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from poxm_core.estimators.base import BaseEstimator

__all__ = ["SNIS", "snis_value_torch"]


def _per_position(w: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sw = w.sum(axis=0)
    has = sw > 0
    vj = np.where(has, (w * r).sum(axis=0) / np.where(has, sw, 1.0), 0.0)
    return vj, sw


def snis_value_torch(w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """sum_j [sum_i w_ij r_ij / sum_i w_ij], differentiable (0 for a position with no weight)."""
    sw = w.sum(dim=0)
    has = sw > 0
    return torch.where(has, (w * r).sum(dim=0) / torch.where(has, sw, torch.ones_like(sw)), torch.zeros_like(sw)).sum()


@dataclass(frozen=True)
class SNIS(BaseEstimator):
    """Self-normalised IS, one ratio per position, summed over positions."""
    name: ClassVar[str] = "snis"
    label: ClassVar[str] = "SNIS"

    def per_sample(self, w: np.ndarray, r: np.ndarray) -> np.ndarray:
        vj, sw = _per_position(w, r)
        n = w.shape[0]
        wbar = sw / n
        infl = np.where(wbar > 0, w * (r - vj) / np.where(wbar > 0, wbar, 1.0), 0.0)
        return vj.sum() + infl.sum(axis=1)

    def point(self, w: np.ndarray, r: np.ndarray) -> float:
        return float(_per_position(w, r)[0].sum())

    def torch_value(self, w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return snis_value_torch(w, r)
