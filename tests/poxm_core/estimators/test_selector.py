"""The action selector Phi^p (poxm_core/estimators/selector.py): hand-checked ids and positions."""
import numpy as np
import pytest
import torch

from poxm_core.common.errors import PoxmInputError
from poxm_core.estimators import phi, selector_pos


def test_phi_is_the_first_p_candidates_in_rho_order():
    cand = np.array([[7, 3, 9, 1], [2, 8, 5, 4]])
    assert phi(cand, 2).tolist() == [[7, 3], [2, 8]]
    assert torch.equal(phi(torch.as_tensor(cand), 3), torch.tensor([[7, 3, 9], [2, 8, 5]]))


def test_selector_pos_keeps_ranks_inside_phi_only():
    cand_pos = np.array([[0, 3, 1], [4, 2, 0]])
    assert selector_pos(cand_pos, 2).tolist() == [[0, -1, 1], [-1, -1, 0]]
    assert selector_pos(torch.as_tensor(cand_pos), 3).tolist() == [[0, -1, 1], [-1, 2, 0]]


@pytest.mark.parametrize("p", [0, -1, True, 2.0])
def test_bad_p_is_one_line(p):
    with pytest.raises(PoxmInputError, match="positive int"):
        phi(np.zeros((2, 4), np.int64), p)


def test_p_beyond_the_candidates_is_refused():
    with pytest.raises(PoxmInputError, match="p=5"):
        phi(np.zeros((2, 4), np.int64), 5)
