"""A logging-policy variant's rho on the candidates C(x) of one split (what `policy.build_variant` makes,
what the simulator draws slates from and what `prepared.Prepared` carries to every trial)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["VariantPolicy"]


@dataclass(frozen=True)
class VariantPolicy:
    """Logging policy rho on C(x) for one split, candidates in rho order (descending, ties by label id).

    Phi^p(x) = cand[:, :p]. rho[i, k] = rho(cand[i, k] | x_i); rows sum to 1.
    """
    cand: np.ndarray   # (n, K) int64 label ids, sorted by rho descending
    rho: np.ndarray    # (n, K) float64

    def __post_init__(self) -> None:
        if self.cand.shape != self.rho.shape or self.cand.ndim != 2:
            raise ValueError(f"cand {self.cand.shape} and rho {self.rho.shape} must be equal (n, K) shapes")
