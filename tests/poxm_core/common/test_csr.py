"""poxm_core.common.csr: the one CSR/sparse argument check and its one-line TypeError."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from poxm_core.common.csr import check_csr, check_sparse

REPO = Path(__file__).resolve().parents[3]


def test_check_csr_returns_the_matrix_and_names_the_argument():
    m = sp.csr_matrix(np.eye(3))
    assert check_csr("X", m) is m
    for bad in (np.eye(3), sp.coo_matrix(np.eye(3)), None):
        with pytest.raises(TypeError, match=r"^X: expected a scipy.sparse CSR matrix, got \w+$"):
            check_csr("X", bad)


def test_check_sparse_accepts_any_format():
    m = sp.coo_matrix(np.eye(2))
    assert check_sparse("Y", m) is m
    with pytest.raises(TypeError, match="^Y: expected a scipy sparse label matrix, got list$"):
        check_sparse("Y", [[1]], "a scipy sparse label matrix")


def test_sparse_type_checks_live_in_the_csr_module():
    hits = {str(p.relative_to(REPO)) for pkg in ("poxm_core", "orchestration") for p in (REPO / pkg).rglob("*.py")
            if re.search(r"\bsp\.issparse\(", p.read_text())}
    assert hits == {"poxm_core/common/csr.py"}
