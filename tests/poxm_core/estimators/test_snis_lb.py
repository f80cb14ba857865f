"""SNIS lower bound (estimators/snis_lb.py): a hand-computed value, the torch twin, and its purpose."""
import numpy as np
import pytest
import torch

from poxm_core.estimators import ESTIMATORS, SNIS, SNISLowerBound, validation_estimates


def test_hand_computed_value():
    # position 0: weights 1, 1, 2, rewards 1, 0, 1 -> V_0 = 3/4, ESS_0 = 4^2 / 6 = 8/3
    # position 1: weights 0, 2, 0, rewards 0, 1, 0 -> V_1 = 1,   ESS_1 = 2^2 / 4 = 1
    # bound = 1.75 - z_{0.95} * 0.5 * (sqrt(3/8) + 1), z_{0.95} = 1.6448536...
    w = np.array([[1.0, 0.0], [1.0, 2.0], [2.0, 0.0]])
    r = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    est = SNISLowerBound().estimate(w, r)
    assert est.value == pytest.approx(0.4239416755745966, abs=1e-12)
    assert SNIS().value(w, r) == pytest.approx(1.75, abs=1e-12)
    # the stderr is SNIS's (the width is a constant shift of the influence terms)
    assert est.stderr == pytest.approx(SNIS().estimate(w, r).stderr, rel=1e-12)
    # a position with no weight at all counts 0 and the full width z/2
    w0 = w.copy()
    w0[:, 1] = 0.0
    assert SNISLowerBound().value(w0, r) == pytest.approx(0.75 - 1.6448536269514722 * 0.5 * (np.sqrt(3 / 8) + 1),
                                                          abs=1e-12)


def test_torch_twin_agrees_and_is_differentiable():
    rng = np.random.default_rng(3)
    w = rng.gamma(0.5, 1.0, size=(50, 5))
    w[rng.random(w.shape) < 0.3] = 0.0
    r = (rng.random(w.shape) < 0.3).astype(float)
    wt = torch.tensor(w, requires_grad=True)
    v = SNISLowerBound().torch_value(wt, torch.tensor(r))
    assert float(v) == pytest.approx(SNISLowerBound().value(w, r), abs=1e-10)
    v.backward()
    assert torch.isfinite(wt.grad).all()


def test_it_ranks_a_concentrated_policy_below_a_spread_one_with_the_same_ratio():
    """Two policies with the same SNIS ratio: the one whose weight sits on 3 of 300 logged actions
    (ESS 3) is ranked below the one spread over all of them; SNIS cannot tell them apart."""
    n = 300
    r = np.zeros((n, 1))
    r[::3] = 1.0                                 # one in three logged actions rewarded
    spread = np.ones((n, 1))                      # V = 1/3, ESS = n
    conc = np.zeros((n, 1))
    conc[[0, 1, 2]] = 50.0                        # weights on rows 0 (rewarded), 1, 2: V = 1/3, ESS = 3
    assert SNIS().value(spread, r) == pytest.approx(SNIS().value(conc, r))
    assert SNISLowerBound().value(conc, r) < SNISLowerBound().value(spread, r) - 0.3


def test_registered_and_reported_on_the_validation_log():
    assert ESTIMATORS["snis_lb"] is SNISLowerBound
    rng = np.random.default_rng(0)
    logpi = np.log(rng.uniform(0.05, 0.5, size=(40, 5)))
    q = rng.uniform(0.05, 0.5, size=(40, 5))
    r = (rng.random((40, 5)) < 0.3).astype(float)
    out = validation_estimates({"policy": logpi}, q, r)
    assert out["SNIS-LB"].value < out["SNIS"].value
