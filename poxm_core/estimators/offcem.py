"""OffCEM (Saito, Ren & Joachims, ICML 2023): the cluster weight plus a reward model's residual, per
position (docs/estimators.md).

    V_OffCEM = (1/n) sum_i sum_j [ w_ij(e) (r_ij - fhat(x_i, y_ij)) + E_{y ~ pi_A(.|x_i, y_i,<j)} fhat(x_i, y) ]

w_ij(e) the pruned cluster weights of MIPS (`mips.cluster_weights`, A = Phi^p(x)), fhat the Direct
Method's reward model (the trial's reward head, as for DR). The arithmetic is DR's with cluster
weights in place of the action's; the expectation is over A, the support of the cluster weights:
dm_ij = sum_{k < p} pi_table[i, j, k] fhat(x_i, candidate k). Unbiased for the value MIPS and sIS
target when the residual r - fhat depends on the action only through its cluster (fhat captures the
within-cluster effects), whatever those effects are; with fhat = 0 it is MIPS.

Reads from a validation log MIPS's arrays and `rhat_candidates` (n, K): fhat on the candidates in rho
order, given by the trainer where a reward model is fitted (like DR, OffCEM is reported only there).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from poxm_core.estimators.base import Estimate, ValidationLog
from poxm_core.estimators.dr import DR
from poxm_core.estimators.mips import CLUSTER_NEEDS, cluster_weights_on

__all__ = ["OffCEM", "offcem_terms", "offcem_terms_torch"]


def offcem_terms(pi_table, rhat_cand, cand_pos) -> tuple[np.ndarray, np.ndarray]:
    """(dm_term, rhat_logged), each (n, ell): E_{pi_A(.|x_i, y_i,<j)} fhat on the first p candidates and
    fhat at the logged action."""
    pi_table = np.asarray(pi_table, dtype=np.float64)
    rhat_cand = np.asarray(rhat_cand, dtype=np.float64)
    p = pi_table.shape[2]
    dm = np.einsum("ijk,ik->ij", pi_table, rhat_cand[:, :p])
    return dm, np.take_along_axis(rhat_cand, np.asarray(cand_pos, dtype=np.int64), 1)


def offcem_terms_torch(pi_table: torch.Tensor, rhat_cand: torch.Tensor, cand_pos: torch.Tensor):
    """Torch twin of `offcem_terms` (differentiable w.r.t. `pi_table`)."""
    p = pi_table.shape[2]
    rhat_cand = rhat_cand.to(pi_table.dtype)
    return torch.einsum("ijk,ik->ij", pi_table, rhat_cand[:, :p]), rhat_cand.gather(1, cand_pos.long())


@dataclass(frozen=True)
class OffCEM(DR):
    """DR's per-instance term t_i = sum_j dm_ij + w_ij (r_ij - rhat_ij), with MIPS's cluster weights and
    dm over the cluster weights' support (module doc). `per_sample`, `torch_value`: DR's."""
    name: ClassVar[str] = "offcem"
    label: ClassVar[str] = "OffCEM"
    support: ClassVar[str] = "selector"
    needs: ClassVar[tuple[str, ...]] = CLUSTER_NEEDS + ("rhat_candidates",)
    aux_from_arrays: ClassVar[bool] = True     # dm_term, rhat_logged made here from `needs`, not log.aux

    def weights_on(self, log: ValidationLog) -> np.ndarray:
        return cluster_weights_on(log)

    def estimate_on(self, log: ValidationLog) -> Estimate:
        self._check_needs(log)
        a = log.arrays
        dm, rl = offcem_terms(a["pi_selector"], a["rhat_candidates"], a["cand_pos"])
        return self.estimate(self.weights_on(log), log.r, dm_term=dm, rhat_logged=rl)
