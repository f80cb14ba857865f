"""Marginalised IS over action clusters (MIPS; Saito & Joachims, ICML 2022), per position (docs/estimators.md).

Each action a has a cluster e(a) (label clusters, or an embedding's categories). At slate position j
the logged action's weight is replaced by the weight of its cluster e_ij = e(y_ij):

    w_ij(e) = pi_A(e_ij | x_i, y_i,<j) / rho(e_ij | x_i, y_i,<j)
    pi_A(e | x, y_<j) = sum_{a in A \\ y_<j, e(a) = e} pi_A(a | x, y_<j)
    rho(e | x, y_<j)  = sum_{a in C(x) \\ y_<j, e(a) = e} rho(a | x) / (1 - sum_{k<j} rho(y_k | x))

pruned like the paper's weights (the prefix comes from the log, no product over positions), and
V_MIPS = (1/n) sum_i sum_j w_ij(e) r_ij (IS's arithmetic). A = Phi^p(x) (the selector support: the
first p candidates, where rho > 0), so MIPS targets what sIS targets; singleton clusters give sIS's
weights exactly. Unbiased for it when the reward depends on the action only through its cluster
(and rho(e) > 0 wherever pi_A(e) > 0); its weights vary less than sIS's, the more actions share a
cluster. The cluster's logging mass is formed without 1 - cumsum cancellation: since
q_ij = rho(y_ij) / (1 - sum_{k<j} rho(y_ik)), rho(e_ij | .) = q_ij * S_ij / rho(y_ij | x_i), with S_ij the
sum of rho over the untaken candidates of e_ij (non-negative terms only).

Inputs, all plain arrays (no (n, L) array): pi_table (n, ell, p) the policy's conditional on the first
p candidates at each position (0 on the logged prefix), rho_cand (n, K), cand_cluster (n, K) the
candidates' cluster ids, cand_pos (n, ell) the logged actions' candidate columns, q (n, ell).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from poxm_core.common.errors import PoxmInputError
from poxm_core.estimators.base import ValidationLog
from poxm_core.estimators.ips import IS

__all__ = ["MIPS", "cluster_weights", "cluster_weights_torch", "cluster_masks", "CLUSTER_NEEDS",
           "ESTIMATOR_CLUSTERS", "estimator_clusters"]

# What the cluster weights read from a validation log (`ValidationLog.arrays`, docs/estimators.md).
CLUSTER_NEEDS = ("action_cluster", "cand_pos", "candidates", "rho_candidates", "pi_selector")
# The default k of the label clusters the trainer gives MIPS and OffCEM (config key selection.clusters;
# k-means of the logging model's label rows, `prepare.clusters.label_clusters`, seed 0;
# training/reporting.py): coarse enough that a context's K = 100 candidates share clusters (the variance
# MIPS removes), fine enough that labels of one cluster are alike (the bias it risks).
ESTIMATOR_CLUSTERS = 32


def estimator_clusters(k: int | None, n_labels: int) -> int:
    """The k MIPS and OffCEM use on a dataset of `n_labels` labels: the configured `selection.clusters`, or
    ESTIMATOR_CLUSTERS capped at L when unset; a configured k above L is a PoxmInputError naming the key."""
    if k is None:
        return min(ESTIMATOR_CLUSTERS, int(n_labels))
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n_labels:
        raise PoxmInputError(f"selection.clusters: k={k!r} label clusters: expected an int in [1, {n_labels}] "
                             f"(the dataset's labels)")
    return int(k)


def cluster_masks(cand_cluster, cand_pos):
    """(same, untaken), each (n, ell, K) bool: candidate k is in the logged action's cluster at j; k is
    not in the logged prefix y_i,<j. NumPy or torch, as given."""
    th = isinstance(cand_cluster, torch.Tensor)
    K = cand_cluster.shape[1]
    if th:
        cp = cand_pos.long()
        logged = cand_cluster.gather(1, cp)
        onehot = (cp.unsqueeze(2) == torch.arange(K, device=cp.device)).long()
        taken = (onehot.cumsum(1) - onehot) > 0
        return cand_cluster.unsqueeze(1) == logged.unsqueeze(2), ~taken
    cp = np.asarray(cand_pos, dtype=np.int64)
    cand_cluster = np.asarray(cand_cluster)
    if cp.size and (cp.min() < 0 or cp.max() >= K):
        raise PoxmInputError(f"cand_pos: expected candidate columns in [0, {K}) (logged actions are candidates), "
                             f"got range [{cp.min()}, {cp.max()}]")
    logged = np.take_along_axis(cand_cluster, cp, 1)
    onehot = (cp[:, :, None] == np.arange(K)).astype(np.int64)
    taken = (np.cumsum(onehot, axis=1) - onehot) > 0
    return cand_cluster[:, None, :] == logged[:, :, None], ~taken


def cluster_weights(pi_table, rho_cand, cand_cluster, cand_pos, q) -> np.ndarray:
    """(n, ell) w_ij(e) = pi_A(e_ij | .) / rho(e_ij | .) (module doc); 0 where pi_A(e_ij | .) = 0."""
    pi_table = np.asarray(pi_table, dtype=np.float64)
    rho_cand = np.asarray(rho_cand, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    n, ell, p = pi_table.shape
    if rho_cand.shape[0] != n or cand_cluster.shape != rho_cand.shape or q.shape != (n, ell) or p > rho_cand.shape[1]:
        raise PoxmInputError(f"cluster weights: expected pi_table (n, ell, p), rho_cand and cand_cluster (n, K >= p), "
                             f"q (n, ell); got {pi_table.shape}, {rho_cand.shape}, {np.shape(cand_cluster)}, {q.shape}")
    same, untaken = cluster_masks(cand_cluster, cand_pos)
    pi_e = np.sum(pi_table * same[:, :, :p], axis=2)
    mass_e = np.sum(rho_cand[:, None, :] * (same & untaken), axis=2)          # S_ij >= rho(y_ij) > 0
    rho_y = np.take_along_axis(rho_cand, np.asarray(cand_pos, dtype=np.int64), 1)
    return pi_e * rho_y / (q * mass_e)


def cluster_weights_torch(pi_table: torch.Tensor, rho_cand: torch.Tensor, cand_cluster: torch.Tensor,
                          cand_pos: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Torch twin of `cluster_weights`, differentiable w.r.t. `pi_table`."""
    p = pi_table.shape[2]
    same, untaken = cluster_masks(cand_cluster, cand_pos)
    rho_cand = rho_cand.to(pi_table.dtype)
    pi_e = (pi_table * same[:, :, :p]).sum(2)
    mass_e = (rho_cand.unsqueeze(1) * (same & untaken)).sum(2)
    rho_y = rho_cand.gather(1, cand_pos.long())
    return pi_e * rho_y / (q.to(pi_table.dtype) * mass_e)


def cluster_weights_on(log: ValidationLog) -> np.ndarray:
    """`cluster_weights` from a validation log's arrays: the candidates' clusters are
    action_cluster[candidates] (action_cluster: (L,) int, indexed by label id)."""
    a = log.arrays
    cluster = np.asarray(a["action_cluster"]).reshape(-1)
    cand = np.asarray(a["candidates"], dtype=np.int64)
    return cluster_weights(a["pi_selector"], a["rho_candidates"], cluster[cand], a["cand_pos"], log.q)


@dataclass(frozen=True)
class MIPS(IS):
    """IS's arithmetic (t_i = sum_j w_ij r_ij) on the cluster weights w_ij(e) of the module doc."""
    name: ClassVar[str] = "mips"
    label: ClassVar[str] = "MIPS"
    support: ClassVar[str] = "selector"
    needs: ClassVar[tuple[str, ...]] = CLUSTER_NEEDS

    def weights_on(self, log: ValidationLog) -> np.ndarray:
        return cluster_weights_on(log)
