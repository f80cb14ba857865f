"""SNIS lower bound: the self-normalised estimate less a width that grows as the weights concentrate.

    V_LB = sum_j [ V_j - z * sigma / sqrt(ESS_j) ],   ESS_j = (sum_i w_ij)^2 / sum_i w_ij^2

V_j is SNIS's per-position ratio (estimators/snis.py), z = Phi^-1(1 - alpha) (one-sided), sigma = 1/2
the largest standard deviation of a reward in [0, 1], and ESS_j Kong's (1992) effective sample size of
position j, with which Var(V_j) ~ Var_pi(r_j) / ESS_j (Owen 2013, ch. 9). A position with no weight
counts V_j = 0 and the full width z sigma.

Why: SNIS divides by sum_i w_ij, so a policy that moves its mass onto actions the log never shows keeps
a high ratio over the few logged actions it still weights; its delta-method stderr cannot warn, since
those few are often all rewarded (zero spread). The width here depends on the weights only, so such a
policy is ranked by what the log can vouch for: pessimistic selection in the spirit of Kuzborskij,
Vernade, Gyorgy & Szepesvari (2021), "Confident off-policy evaluation and selection through
self-normalized importance weighting", with their bound replaced by the normal/ESS approximation.
It is a selection criterion, deliberately biased low, not an estimate of the value.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from poxm_core.estimators.base import normal_quantile
from poxm_core.estimators.snis import SNIS

__all__ = ["SNISLowerBound", "snis_lb_width"]

SIGMA = 0.5     # the largest standard deviation of a reward in [0, 1]


def snis_lb_width(w: np.ndarray, alpha: float) -> float:
    """sum_j z sigma / sqrt(ESS_j) over the ell positions (the full z sigma where a position has no weight)."""
    z = normal_quantile(1.0 - alpha)
    sw, s2 = w.sum(axis=0), (w * w).sum(axis=0)
    ess = np.where(s2 > 0, sw * sw / np.where(s2 > 0, s2, 1.0), 0.0)
    return float(np.sum(np.where(ess > 0, z * SIGMA / np.sqrt(np.maximum(ess, 1e-300)), z * SIGMA)))


@dataclass(frozen=True)
class SNISLowerBound(SNIS):
    """SNIS less z sigma / sqrt(ESS_j) per position (alpha = 0.05: the one-sided 95 % normal bound)."""
    name: ClassVar[str] = "snis_lb"
    label: ClassVar[str] = "SNIS-LB"

    def per_sample(self, w: np.ndarray, r: np.ndarray) -> np.ndarray:
        # SNIS's influence terms shifted by the (constant) width: the mean is the bound, the spread SNIS's
        return super().per_sample(w, r) - snis_lb_width(w, self.alpha)

    def point(self, w: np.ndarray, r: np.ndarray) -> float:
        return super().point(w, r) - snis_lb_width(w, self.alpha)

    def torch_value(self, w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        z = normal_quantile(1.0 - self.alpha)
        sw, s2 = w.sum(dim=0), (w * w).sum(dim=0)
        has = s2 > 0
        ess = torch.where(has, sw * sw / torch.where(has, s2, torch.ones_like(s2)), torch.zeros_like(s2))
        width = torch.where(ess > 0, z * SIGMA / torch.sqrt(torch.clamp(ess, min=1e-300)),
                            torch.full_like(ess, z * SIGMA)).sum()
        return super().torch_value(w, r) - width
