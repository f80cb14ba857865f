"""The action selector Phi^p (paper §4, docs/protocol.md): the top-p labels of rho(. | x).

Candidates are stored in rho order (ties by label id), so Phi^p(x) is the first p columns of the
candidate matrix, and a logged action's rank among the candidates (cand_pos) tells whether it is in
Phi^p. Every place that needs Phi^p uses these functions.
"""
from __future__ import annotations

import numpy as np
import torch

from poxm_core.common.errors import PoxmInputError

__all__ = ["phi", "phi_scores", "selector_pos"]


def _check_p(p) -> None:
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
        raise PoxmInputError(f"p: expected a positive int (size of the action selector Phi^p), got {p!r}")


def phi(cand, p: int):
    """Label ids of Phi^p(x) (n, p): the first p candidates in rho order (NumPy or torch)."""
    _check_p(p)
    if cand.ndim != 2 or cand.shape[1] < p:
        raise PoxmInputError(f"cand: expected (n, >= p={p}) candidates in rho order, got shape {tuple(cand.shape)}")
    return cand[:, :p]


def selector_pos(cand_pos, p: int):
    """Column of y_j in Phi^p(x) = the top-p candidates of rho, or -1: pos = cand_pos if < p else -1."""
    _check_p(p)
    if isinstance(cand_pos, torch.Tensor):
        return torch.where(cand_pos < p, cand_pos, torch.full_like(cand_pos, -1))
    cand_pos = np.asarray(cand_pos)
    return np.where(cand_pos < p, cand_pos, -1).astype(np.int64)


def phi_scores(scores_phi, p: int):
    if scores_phi.ndim != 2 or scores_phi.shape[1] < p:
        raise PoxmInputError(f"scores_phi: expected (n, >= p={p}) logits of the candidates in rho order, "
                             f"got shape {tuple(scores_phi.shape)}")
    return scores_phi[:, :p]
