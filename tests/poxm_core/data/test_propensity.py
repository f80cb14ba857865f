"""Jain et al. propensities: a hand-computed value and napkinxc as an independent implementation."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from poxm_core.data import inverse_propensities, label_propensities


def test_hand_computed():
    # N = 10 instances; label 0 on all 10, label 1 on 1, label 2 on none; A = 0.55, B = 1.5.
    rows = list(range(10)) + [3]
    cols = [0] * 10 + [1]
    Y = sp.csr_matrix((np.ones(11), (rows, cols)), shape=(10, 3))
    # C = (ln 10 - 1) * 2.5^0.55 = 1.3025851 * 1.6552630 = 2.1561209
    # 1/p_0 = 1 + C * 11.5^-0.55 = 1 + 2.1561209 * 0.2609854 = 1.5627160
    # 1/p_1 = 1 + C *  2.5^-0.55 = 1 + (ln 10 - 1)            = 2.3025851
    # 1/p_2 = 1 + C *  1.5^-0.55 = 1 + 2.1561209 * 0.8001102 = 2.7251343
    p = label_propensities(Y, 0.55, 1.5)
    np.testing.assert_allclose(1 / p, [1.5627160, 2.3025851, 2.7251343], rtol=1e-7)
    assert p.dtype == np.float64 and p.shape == (3,)
    np.testing.assert_allclose(inverse_propensities(Y, 0.55, 1.5), 1 / p)


def test_matches_napkinxc():
    napkinxc_metrics = pytest.importorskip("napkinxc.metrics")
    Y = sp.random(500, 80, density=0.05, format="csr", random_state=1)
    Y.data[:] = 1.0
    for A, B in ((0.55, 1.5), (0.5, 0.4), (0.6, 2.6), (1.3, 0.05)):
        ref = napkinxc_metrics.Jain_et_al_inverse_propensity(Y, A, B)
        np.testing.assert_allclose(1 / label_propensities(Y, A, B), ref, rtol=1e-12)


def test_more_frequent_labels_have_higher_propensity():
    Y = sp.csr_matrix(np.tril(np.ones((20, 20))))  # label l on 20 - l instances
    p = label_propensities(Y, 0.55, 1.5)
    assert np.all(np.diff(p) < 0) and np.all((p > 0) & (p <= 1))


def test_duplicates_and_explicit_zeros_do_not_count():
    Y = sp.csr_matrix((np.array([1.0, 1.0, 0.0]), np.array([0, 0, 1]), np.array([0, 2, 3, 3])), shape=(3, 2))
    ref = sp.csr_matrix(np.array([[1.0, 0], [0, 0], [0, 0]]))
    np.testing.assert_allclose(label_propensities(Y), label_propensities(ref))


@pytest.mark.parametrize("args, exc, frag", [
    ((np.ones((5, 2)), 0.55, 1.5), TypeError, "Y_train: expected a scipy.sparse matrix"),
    ((sp.csr_matrix((5, 2)), 0.0, 1.5), ValueError, "A: expected a finite number > 0"),
    ((sp.csr_matrix((5, 2)), 0.55, math.nan), ValueError, "B: expected a finite number > 0"),
    ((sp.csr_matrix((5, 2)), "x", 1.5), TypeError, "A: expected a number"),
    ((sp.csr_matrix((2, 2)), 0.55, 1.5), ValueError, "at least 3 training instances"),
])
def test_bad_arguments(args, exc, frag):
    with pytest.raises(exc) as e:
        label_propensities(*args)
    assert frag in str(e.value)
