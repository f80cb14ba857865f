"""Translated IS, the BanditNet / POXM objective (paper Eq. obj_corrected, one constant for all j):

    V_c = (1/n) sum_i sum_j w_ij (r_ij - c)

It is V_IS - c * (1/n) sum_ij w_ij; minimising -V_c is the training loss of BanditNet,
PM-BanditNet, POXM and wPOXM (with their respective weights). The field `shift` is c, the constant
subtracted from every reward. The trainer passes c = 1 - lambda under the paper's loss translation
(translation='loss', the default) and c = lambda under translation='reward' (`methods.base.reward_shift`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from poxm_core.common.errors import PoxmInputError
from poxm_core.estimators.base import BaseEstimator

__all__ = ["Translated", "translated_value_torch"]


def translated_value_torch(w: torch.Tensor, r: torch.Tensor, shift) -> torch.Tensor:
    """(1/n) sum_ij w_ij (r_ij - shift), differentiable; w (..., n, ell), r (n, ell), shift a float or a
    tensor broadcasting over w's leading axes (one value per head: (G, 1, 1)). Returns (...,)."""
    return (w * (r - shift)).sum(dim=(-2, -1)) / w.shape[-2]


@dataclass(frozen=True)
class Translated(BaseEstimator):
    """t_i = sum_j w_ij (r_ij - shift). shift: the constant subtracted from every reward."""
    shift: float = 0.0
    name: ClassVar[str] = "translated"
    label: ClassVar[str] = "translated"
    reported: ClassVar[bool] = False      # the training objective; its value depends on shift

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.shift, bool) or not isinstance(self.shift, (int, float)) or not math.isfinite(self.shift):
            raise PoxmInputError(f"shift: expected a finite float (constant subtracted from the reward), got {self.shift!r}")

    def per_sample(self, w: np.ndarray, r: np.ndarray) -> np.ndarray:
        return np.sum(w * (r - self.shift), axis=1)

    def torch_value(self, w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return translated_value_torch(w, r, self.shift)
