"""Prefix-product (slate-unbiased) IS (docs/estimators.md, beyond the paper):

    V_prefix = (1/n) sum_i sum_j w_ij r_ij,   w_ij = prod_{k<=j} pi_A(y_ik | x_i, y_i,<k) / q_ik

The arithmetic is IS's; what makes it a different estimator is the weights it must be given: the
prefix products, i.e. `importance_weights(logpi, q, pruned=False)` (or `sis_weights(..., pruned=False)`),
not the per-position pruned ratios the other estimators take. `PrefixIS.weights == "prefix"` says so,
so a caller (the trainer) can pick the right weights from the class alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from poxm_core.estimators.ips import IS

__all__ = ["PrefixIS"]


@dataclass(frozen=True)
class PrefixIS(IS):
    """Prefix-product IS: t_i = sum_j w_ij r_ij with w_ij = prod_{k<=j} pi_A(y_ik | x_i, y_i,<k) / q_ik.

    Why it is unbiased for the deployed slate value V(pi_A) = E_x E_{slate ~ pi_A} sum_j mu(x, y_j):
    a slate is drawn from rho by Plackett-Luce without replacement, so the probability of the prefix
    y_1..j is prod_{k<=j} q_k under rho and prod_{k<=j} pi_A(y_k | x, y_<k) under pi_A. Their ratio,
    w_ij, is the likelihood ratio of the prefix; hence E_rho[w_ij r_ij] = E_{y_1..j ~ pi_A} mu(x, y_j)
    whenever rho > 0 wherever pi_A > 0 (rho covers pi's support), and summing over j gives V(pi_A).
    The pruned weights (a single ratio at position j) instead estimate a mixed quantity whose prefix
    comes from rho (docs/estimators.md §4).

    Variance: the weight at position j is a product of j ratios, so its variance grows roughly
    geometrically in j (and with how far pi is from rho); expect a much smaller ESS than pruned IS
    and wide intervals for ell > 1. A position whose ratio is 0 (y outside A) zeroes the rest of
    the slate's weights.
    """
    name: ClassVar[str] = "pis"
    label: ClassVar[str] = "PIS"
    weights: ClassVar[str] = "prefix"     # IS's arithmetic (inherited), on the prefix-product weights
