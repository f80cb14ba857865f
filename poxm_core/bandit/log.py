"""The bandit log: a typed container that validates itself when built (an invalid one cannot exist).

Per logged instance i (rows of the training split, by `instance` index) and position j < ell:
  actions[i, j]   label id y_ij (int64), drawn from rho without replacement
  cand_pos[i, j]  its rank in the variant's candidate order (0 = highest rho); y in Phi^p iff cand_pos < p
  q[i, j]         conditional propensity q_ij = rho(y_ij|x) / (1 - sum_{k<j} rho(y_ik|x))
  rho[i, j]       marginal rho(y_ij | x)
  rewards[i, j]   r_ij = 1{y_ij in Y*_i} (float32 0/1)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BanditLog:
    instance: np.ndarray   # (n,) int64 row ids into the training split
    actions: np.ndarray    # (n, ell) int64
    cand_pos: np.ndarray   # (n, ell) int64 in [0, K)
    q: np.ndarray          # (n, ell) float64 in (0, 1]
    rho: np.ndarray        # (n, ell) float64 in (0, 1]
    rewards: np.ndarray    # (n, ell) float32 in {0, 1}

    def __post_init__(self) -> None:
        n = self.instance.shape[0]
        if self.instance.ndim != 1:
            raise ValueError(f"instance: expected shape (n,), got {self.instance.shape}")
        for name in ("actions", "cand_pos", "q", "rho", "rewards"):
            a = getattr(self, name)
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{name}: expected a numpy array, got {type(a).__name__}")
            if a.ndim != 2 or a.shape[0] != n:
                raise ValueError(f"{name}: expected shape ({n}, ell), got {a.shape}")
            if a.shape[1] != self.actions.shape[1]:
                raise ValueError(f"{name}: slate length {a.shape[1]} != {self.actions.shape[1]}")
        if n and not (np.all(self.q > 0) and np.all(self.q <= 1 + 1e-9)):
            raise ValueError(f"q: conditional propensities must lie in (0, 1], got range [{self.q.min()}, {self.q.max()}]")
        if n and not (np.all(self.rho > 0) and np.all(self.rho <= 1 + 1e-9)):
            raise ValueError("rho: marginals must lie in (0, 1]")
        if n and not np.all(self.rho <= self.q + 1e-9):
            raise ValueError("rho: a marginal exceeds its conditional propensity (q_j >= rho_j must hold)")
        if n and not np.all(np.isin(self.rewards, (0.0, 1.0))):
            raise ValueError("rewards: expected 0/1 values")
        if n and (self.cand_pos.min() < 0):
            raise ValueError("cand_pos: negative rank (action outside C(x))")
        if n and self.actions.shape[1] > 1:
            s = np.sort(self.actions, axis=1)
            if np.any(s[:, 1:] == s[:, :-1]):
                raise ValueError("actions: a slate repeats a label (slates are drawn without replacement)")

    @property
    def n(self) -> int:
        return int(self.instance.shape[0])

    @property
    def slate_size(self) -> int:
        return int(self.actions.shape[1])

    def subset(self, rows: np.ndarray) -> "BanditLog":
        return BanditLog(self.instance[rows], self.actions[rows], self.cand_pos[rows], self.q[rows],
                         self.rho[rows], self.rewards[rows])

    def validate_against(self, candidates: np.ndarray) -> None:
        """Check every action lies in C(x) at its recorded rank. `candidates` (n_train, K) in rho order."""
        K = candidates.shape[1]
        if self.n and self.cand_pos.max() >= K:
            raise ValueError(f"cand_pos: rank {self.cand_pos.max()} outside C(x) of size {K}")
        got = np.take_along_axis(candidates[self.instance], self.cand_pos, axis=1)
        if not np.array_equal(got, self.actions):
            raise ValueError("actions: an action is not the candidate at its recorded rank (outside C(x)?)")

    def to_npz_dict(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in ("instance", "actions", "cand_pos", "q", "rho", "rewards")}

    @classmethod
    def from_npz(cls, z) -> "BanditLog":
        return cls(**{k: np.asarray(z[k]) for k in ("instance", "actions", "cand_pos", "q", "rho", "rewards")})
