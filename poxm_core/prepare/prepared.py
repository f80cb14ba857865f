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

__all__ = ["Prepared", "VariantPolicy", "BanditLog", "EvalLog"]


@dataclass(frozen=True)
class EvalLog:
    """A held-out log of real logged feedback on which a trial's test values are off-policy estimates
    (docs/data.md, "Learning from a log"): `name` is the result rows' split ('test': the held-out rows of
    the log learned from; 'target': another policy's log over the same actions). Its rows are its own
    split: features Z (n, d), X (n, D), the candidates and rho of each row, and `log` (instance = 0..n-1)."""
    name: str
    Z: np.ndarray
    X: sp.csr_matrix
    policy: VariantPolicy
    log: BanditLog


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
    Y_test: sp.csr_matrix | None   # (n_te, L) test labels: only metrics read them (None: logged data)
    Y_train: sp.csr_matrix | None = None  # (n_tr, L) read ONLY by the supervised skyline
    X_train: sp.csr_matrix | None = None  # (n_tr, D) sparse features: the policy network's second input
    X_test: sp.csr_matrix | None = None   # (n_te, D)
    meta: dict = field(default_factory=dict)  # hashes, stats, config of the prepare stage
    # logged data (no labels): the logs whose off-policy estimates replace the test metrics; the first is
    # the held-out test part of the log (Z_test, policy_test), then the target log if any
    eval_logs: tuple[EvalLog, ...] = ()

    @property
    def n_labels(self) -> int:
        return int(self.W.shape[0])

    @property
    def dim(self) -> int:
        return int(self.W.shape[1])
