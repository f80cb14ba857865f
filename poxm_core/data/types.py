"""Typed, frozen containers for extreme multi-label data. CSR end to end."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from poxm_core.common.csr import check_csr as _check_csr


@dataclass(frozen=True)
class XMCSplit:
    """One split: features X (n, D) float32 CSR and true labels Y (n, L) CSR with 1.0 entries."""
    X: sp.csr_matrix
    Y: sp.csr_matrix

    def __post_init__(self) -> None:
        _check_csr("X", self.X)
        _check_csr("Y", self.Y)
        if self.X.shape[0] != self.Y.shape[0]:
            raise ValueError(f"X has {self.X.shape[0]} rows but Y has {self.Y.shape[0]}")
        if self.X.nnz and not np.all(np.isfinite(self.X.data)):
            raise ValueError("X holds NaN or inf values")

    @property
    def n(self) -> int:
        return self.X.shape[0]

    def rows(self, idx: np.ndarray) -> "XMCSplit":
        return XMCSplit(self.X[idx], self.Y[idx])


@dataclass(frozen=True)
class XMCData:
    """A dataset with its own train/test split; D and L are shared by both splits."""
    name: str
    train: XMCSplit
    test: XMCSplit

    def __post_init__(self) -> None:
        if self.train.X.shape[1] != self.test.X.shape[1]:
            raise ValueError(f"{self.name}: train has D={self.train.X.shape[1]}, test D={self.test.X.shape[1]}")
        if self.train.Y.shape[1] != self.test.Y.shape[1]:
            raise ValueError(f"{self.name}: train has L={self.train.Y.shape[1]}, test L={self.test.Y.shape[1]}")

    @property
    def n_features(self) -> int:
        return self.train.X.shape[1]

    @property
    def n_labels(self) -> int:
        return self.train.Y.shape[1]

    def stats(self) -> dict:
        """Table-1 statistics: N_train, N_test, D, L, mean labels per instance, mean instances per label."""
        ytr = self.train.Y
        return {
            "N_train": self.train.n, "N_test": self.test.n, "D": self.n_features, "L": self.n_labels,
            "labels_per_instance": float(ytr.nnz / max(ytr.shape[0], 1)),
            "instances_per_label": float(ytr.nnz / max(int((ytr.getnnz(axis=0) > 0).sum()), 1)),
        }
