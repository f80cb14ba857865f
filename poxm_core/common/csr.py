"""CSR validation: the one check that an argument is a scipy.sparse matrix (CSR where the code indexes
indptr/indices directly), with the one-line TypeError every caller raises.

- `check_csr(name, m)`: `m` itself when it is a CSR matrix; else TypeError "NAME: expected a scipy.sparse
  CSR matrix, got TYPE". For code that reads `m.indptr` / `m.indices` (containers, encoder, simulator).
- `check_sparse(name, m, expected)`: any scipy.sparse matrix (the caller converts); else TypeError
  "NAME: expected EXPECTED, got TYPE".
"""
from __future__ import annotations

import scipy.sparse as sp

__all__ = ["check_csr", "check_sparse"]


def check_csr(name: str, m: object) -> sp.csr_matrix:
    if not sp.issparse(m) or m.format != "csr":
        raise TypeError(f"{name}: expected a scipy.sparse CSR matrix, got {type(m).__name__}")
    return m  # type: ignore[return-value]


def check_sparse(name: str, m: object, expected: str = "a scipy.sparse matrix"):
    if not sp.issparse(m):
        raise TypeError(f"{name}: expected {expected}, got {type(m).__name__}")
    return m
