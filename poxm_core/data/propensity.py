"""Label propensities of Jain, Prabhu & Varma (KDD 2016), used by PSR@k / PSP@k and wPOXM (docs/data.md).

    p_l = 1 / (1 + C * exp(-A * ln(N_l + B))),   C = (ln N - 1) * (B + 1)^A

N = number of training instances, N_l = training instances carrying label l. The inverse propensity
1/p_l = 1 + C (N_l + B)^(-A) is what napkinxc's ``Jain_et_al_inverse_propensity`` returns.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from poxm_core.common.csr import check_sparse


def label_propensities(Y_train: sp.csr_matrix, A: float = 0.55, B: float = 1.5) -> np.ndarray:
    """(L,) float64 propensities p_l in (0, 1] from the training labels Y_train (N, L) CSR (non-zero = relevant)."""
    check_sparse("Y_train", Y_train)
    for name, v in (("A", A), ("B", B)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
            raise TypeError(f"{name}: expected a number, got {type(v).__name__}")
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name}: expected a finite number > 0, got {v}")
    n = Y_train.shape[0]
    if n < 3:
        # ln N - 1 <= 0 below N = 3: C would be <= 0 and p_l no longer a propensity.
        raise ValueError(f"Y_train: needs at least 3 training instances (ln N > 1), got {n}")
    Y = Y_train.tocsr()
    if not Y.has_canonical_format:
        Y = Y.copy()
        Y.sum_duplicates()
    counts = np.bincount(Y.indices[Y.data != 0], minlength=Y.shape[1]).astype(np.float64)
    C = (math.log(n) - 1.0) * (B + 1.0) ** A
    return 1.0 / (1.0 + C * np.exp(-A * np.log(counts + B)))


def inverse_propensities(Y_train: sp.csr_matrix, A: float = 0.55, B: float = 1.5) -> np.ndarray:
    """(L,) float64 1 / p_l (>= 1): the weights of PSP@k / PSR@k."""
    return 1.0 / label_propensities(Y_train, A, B)
