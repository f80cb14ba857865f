"""Per-position importance weights (docs/estimators.md).

pruned (the paper's Eq. obj_not_corrected, after Achiam et al. 2017):
    w_ij = pi_A(y_ij | x_i, y_i,<j) / q_ij
unpruned (product over the prefix, the exact slate-prefix likelihood ratio):
    w_ij = prod_{k<=j} pi_A(y_ik | x_i, y_i,<k) / q_ik

Both are 0 where log pi = -inf (y_ij outside A); an unpruned weight stays 0 after the first such
position. Computed as exp(log pi - log q) (pruned) or exp(cumsum(log pi) - cumsum(log q)).
"""
from __future__ import annotations

import numpy as np
import torch

from poxm_core.common.errors import PoxmInputError
from poxm_core.estimators.plackett_luce import pl_log_conditionals, pl_log_conditionals_torch
from poxm_core.estimators.selector import phi_scores, selector_pos

__all__ = ["importance_weights", "importance_weights_torch", "sis_weights", "sis_weights_torch", "check_q"]


def check_q(q: np.ndarray, shape: tuple, name: str = "q") -> None:
    """q: conditional logging propensities, shape `shape`, values in (0, 1]."""
    if tuple(q.shape) != tuple(shape):
        raise PoxmInputError(f"{name}: expected shape {tuple(shape)}, got {tuple(q.shape)}")
    if q.size and not (np.all(q > 0) and np.all(q <= 1 + 1e-9)):
        raise PoxmInputError(f"{name}: expected propensities in (0, 1], got range [{np.nanmin(q)}, {np.nanmax(q)}]")


def _check_logpi(logpi: np.ndarray) -> None:
    if logpi.ndim != 2:
        raise PoxmInputError(f"logpi: expected a 2-D (n, ell) array, got shape {logpi.shape}")
    if np.isnan(logpi).any() or (logpi.size and np.max(logpi) > 1e-6):
        raise PoxmInputError("logpi: expected log-probabilities <= 0 (-inf allowed), got NaN or a positive value")


def importance_weights(logpi, q, pruned: bool = True) -> np.ndarray:
    """(n, ell) weights from log pi_A(y_j | x, y_<j) (n, ell) and q_j (n, ell) in (0, 1].

    pruned=True: w_ij = exp(logpi_ij) / q_ij.  pruned=False: w_ij = prod_{k<=j} pi_ik / q_ik.
    """
    logpi = np.asarray(logpi, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    _check_logpi(logpi)
    check_q(q, logpi.shape)
    logw = logpi - np.log(q)
    if not pruned:
        logw = np.cumsum(logw, axis=1)
    return np.exp(logw)


def importance_weights_torch(logpi: torch.Tensor, q: torch.Tensor, pruned: bool = True,
                             check: bool = True) -> torch.Tensor:
    """Torch twin of `importance_weights`, differentiable w.r.t. `logpi` (0 gradient where -inf)."""
    if not isinstance(logpi, torch.Tensor):
        raise PoxmInputError(f"logpi: expected a torch tensor, got {type(logpi).__name__}")
    q = torch.as_tensor(q, dtype=logpi.dtype, device=logpi.device)
    if check:
        _check_logpi(logpi.detach().cpu().double().numpy())
        check_q(q.detach().cpu().double().numpy(), tuple(logpi.shape))
    logw = logpi - torch.log(q)
    if not pruned:
        logw = torch.cumsum(logw, dim=1)
    return torch.exp(logw)


def sis_weights(scores_phi, cand_pos, q, p: int, pruned: bool = True) -> np.ndarray:
    """sIS weights w_ij(Phi^p(x_i)) (docs/estimators.md, paper Eq. obj_not_corrected).

    scores_phi: (n, >= p) logits of the candidates in rho order (column k = candidate of rank k);
    only the first p columns are used. cand_pos: (n, ell) rank of y_ij among the candidates.
    q: (n, ell). Returns (n, ell) weights, 0 where y_ij is outside Phi^p.
    """
    scores_phi = np.asarray(scores_phi)
    pos = selector_pos(cand_pos, p)
    return importance_weights(pl_log_conditionals(phi_scores(scores_phi, p), pos), q, pruned=pruned)


def sis_weights_torch(scores_phi: torch.Tensor, cand_pos: torch.Tensor, q, p: int, pruned: bool = True,
                      check: bool = True) -> torch.Tensor:
    """Torch twin of `sis_weights`, differentiable w.r.t. `scores_phi`."""
    cand_pos = torch.as_tensor(cand_pos, device=scores_phi.device)
    pos = selector_pos(cand_pos, p)
    logpi = pl_log_conditionals_torch(phi_scores(scores_phi, p), pos, check=check)
    return importance_weights_torch(logpi, q, pruned=pruned, check=check)
