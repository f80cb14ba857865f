"""Translated IS, the BanditNet / POXM objective (paper Eq. obj_corrected, one lambda for all j):

    V_lambda = (1/n) sum_i sum_j w_ij (r_ij - lambda)

It is V_IS - lambda * (1/n) sum_ij w_ij; minimising -V_lambda is the training loss of BanditNet,
PM-BanditNet, POXM and wPOXM (with their respective weights).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from poxm_core.errors import PoxmInputError
from poxm_core.estimators.base import BaseEstimator

__all__ = ["Translated", "translated_value_torch"]


def translated_value_torch(w: torch.Tensor, r: torch.Tensor, lam: float) -> torch.Tensor:
    """(1/n) sum_ij w_ij (r_ij - lam), differentiable; w, r (n, ell)."""
    return (w * (r - lam)).sum() / w.shape[0]


@dataclass(frozen=True)
class Translated(BaseEstimator):
    """t_i = sum_j w_ij (r_ij - lam). lam: the translation lambda (paper grid 0.7 .. 1.0)."""
    lam: float = 0.0
    name: ClassVar[str] = "translated"
    label: ClassVar[str] = "translated"
    reported: ClassVar[bool] = False      # the training objective; its value depends on lam

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.lam, bool) or not isinstance(self.lam, (int, float)) or not math.isfinite(self.lam):
            raise PoxmInputError(f"lam: expected a finite float (reward translation lambda), got {self.lam!r}")

    def per_sample(self, w: np.ndarray, r: np.ndarray) -> np.ndarray:
        return np.sum(w * (r - self.lam), axis=1)

    def torch_value(self, w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return translated_value_torch(w, r, self.lam)
