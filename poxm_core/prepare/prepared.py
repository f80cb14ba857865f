"""What the prepare stage hands to every trial: the shared core model's outputs for one
(dataset, logging variant, seed). Everything here is computed once and cached (see docs/artifacts.md).

Shapes: n_tr training instances, n_te test instances, d encoder width, L labels, K candidates,
ell slate length. No array here is n x L.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

# the bandit layer's types, re-exported: this module is the stage boundary above bandit/ (bandit
# imports nothing from here)
from poxm_core.bandit.log import BanditLog
from poxm_core.bandit.variant import VariantPolicy

__all__ = ["Prepared", "VariantPolicy", "BanditLog"]


@dataclass(frozen=True)
class Prepared:
    """Inputs of a trial. `log_train`/`log_val` index rows of the training split (`instance`)."""
    dataset: str
    variant: str
    seed: int
    Z_train: np.ndarray            # (n_tr, d) float32 frozen encoder outputs
    Z_test: np.ndarray             # (n_te, d) float32
    W: np.ndarray                  # (L, d) float32 logging model head weights
    b: np.ndarray                  # (L,) float32 logging model head bias
    policy_train: VariantPolicy    # rho on training instances
    policy_test: VariantPolicy     # rho on test instances
    log_train: BanditLog           # logged slates used for gradient steps
    log_val: BanditLog             # held-out logged slates: selection reads only these
    inv_propensity: np.ndarray     # (L,) float64, 1/p_l (Jain et al.)
    Y_test: sp.csr_matrix          # (n_te, L) test labels: only metrics read them
    Y_train: sp.csr_matrix | None = None  # (n_tr, L) read ONLY by the supervised skyline
    X_train: sp.csr_matrix | None = None  # (n_tr, D) sparse features: the policy network's second input
    X_test: sp.csr_matrix | None = None   # (n_te, D)
    meta: dict = field(default_factory=dict)  # hashes, stats, config of the prepare stage

    @property
    def n_labels(self) -> int:
        return int(self.W.shape[0])

    @property
    def dim(self) -> int:
        return int(self.W.shape[1])
