"""OPE against the truth on real logs (poxm_core/bandit/logged_ope.py): every formula against a
hand-computed value on a toy log, then the OBD sample (uniform marginals exactly 1/A, IS by hand)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from poxm_core.bandit.logged_ope import (FOLDS_STREAM, cell_reward_model, crossfit_reward, evaluate_against_truth,
                                         position_marginals, row_weights, selector)
from poxm_core.common.errors import PoxmInputError
from poxm_core.common.seeds import rng
from poxm_core.config.schema import default_data_root
from poxm_core.data.logged import LoggedFeedback
from poxm_core.data.obd import read_obd

OBD = default_data_root() / "obd"
needs_obd = pytest.mark.skipif(not (OBD / "original").is_dir(), reason="OBD sample not in the data root")


def _log(action, position, reward, propensity, n_actions=3, slate_size=2) -> LoggedFeedback:
    n = len(action)
    return LoggedFeedback(source="toy", context=sp.csr_matrix(np.ones((n, 1), np.float32)),
                          action=np.array(action), position=np.array(position), reward=np.array(reward, float),
                          propensity=np.array(propensity, float), n_actions=n_actions, slate_size=slate_size)


def test_position_marginals_are_harmonic_means_normalised_per_position():
    log = _log([0, 0, 1, 2], [0, 0, 0, 1], [0, 0, 0, 0], [0.5, 0.25, 0.5, 0.2])
    # k=0: a0 -> 1 / mean(2, 4) = 1/3, a1 -> 1/2; sum 5/6 -> 0.4, 0.6. k=1: a2 only -> 1.
    np.testing.assert_allclose(position_marginals(log), [[0.4, 0.0], [0.6, 0.0], [0.0, 1.0]])


def test_selector_takes_the_top_p_of_the_logging_policy_ties_by_id():
    rho = np.array([[0.1, 0.5], [0.3, 0.2], [0.3, 0.3]])
    np.testing.assert_array_equal(selector(rho, 2), [[False, True], [True, False], [True, True]])
    np.testing.assert_array_equal(selector(np.full((3, 1), 1 / 3), 2), [[True], [True], [False]])  # uniform: ids
    with pytest.raises(PoxmInputError, match=r"p: expected an int in \[1, 3\]"):
        selector(rho, 4)


def test_row_weights_full_and_renormalised_on_the_selector():
    log = _log([0, 1, 2], [0, 0, 1], [1, 0, 1], [0.5, 0.25, 0.5])
    pi = np.array([[0.2, 0.5], [0.3, 0.25], [0.5, 0.25]])
    np.testing.assert_allclose(row_weights(log, pi), [0.2 / 0.5, 0.3 / 0.25, 0.25 / 0.5])
    phi = np.array([[True, False], [True, True], [False, True]])
    # k=0: pi on {0, 1} renormalised: 0.2/0.5 = 0.4, 0.3/0.5 = 0.6; k=1: on {1, 2}: 0.25/0.5 = 0.5
    np.testing.assert_allclose(row_weights(log, pi, phi), [0.4 / 0.5, 0.6 / 0.25, 0.5 / 0.5])
    with pytest.raises(PoxmInputError, match=r"pi: expected position marginals of shape \(3, 2\)"):
        row_weights(log, pi[:2])


def test_cell_reward_model_shrinks_to_the_position_mean():
    rhat = cell_reward_model(np.array([0, 0, 1]), np.array([0, 0, 0]), np.array([1.0, 0.0, 1.0]), 3, 1, prior_rows=2)
    # rbar = 2/3; a0: (1 + 2*2/3) / (2 + 2) = 7/12; a1: (1 + 4/3) / 3 = 7/9; a2 unseen: 2/3
    np.testing.assert_allclose(rhat[:, 0], [7 / 12, 7 / 9, 2 / 3])


def test_crossfit_reward_uses_the_other_fold_only():
    log = _log([0, 0, 1, 1], [0, 0, 0, 0], [1, 0, 1, 1], [0.5] * 4, n_actions=2, slate_size=1)
    pi = np.array([[0.25], [0.75]])
    dm, rl = crossfit_reward(log, pi, folds=2, seed=0, prior_rows=1)
    fold = rng(0, *FOLDS_STREAM).permutation(4) % 2          # the folds' own stream
    for i in range(4):
        fit = fold != fold[i]
        rhat = cell_reward_model(log.action[fit], log.position[fit], log.reward[fit], 2, 1, prior_rows=1)
        assert rl[i] == pytest.approx(rhat[log.action[i], 0])
        assert dm[i] == pytest.approx(0.25 * rhat[0, 0] + 0.75 * rhat[1, 0])


def test_evaluate_against_truth_by_hand():
    # evaluation log (logged by a uniform policy over 2 actions, 1 slot) and the target's own log
    ev = _log([0, 1, 0, 1], [0, 0, 0, 0], [1, 0, 0, 1], [0.5] * 4, n_actions=2, slate_size=1)
    tg = _log([0, 0, 0, 1], [0, 0, 0, 0], [1, 1, 0, 0], [0.8, 0.8, 0.8, 0.2], n_actions=2, slate_size=1)
    res = {r.estimator: r for r in evaluate_against_truth(ev, tg, p_list=(1,), n_boot=20)}
    # target marginals: a0 -> 1/mean(1/0.8) = 0.8, a1 -> 0.2 (sum 1). w = [1.6, 0.4, 1.6, 0.4]
    w, r = np.array([1.6, 0.4, 1.6, 0.4]), np.array([1, 0, 0, 1.0])
    t = w * r                                                  # [1.6, 0, 0, 0.4]
    v_is, se_is = t.mean(), t.std(ddof=1) / 2                  # 0.5, std of the terms / sqrt(4)
    truth, truth_se = 0.5, np.std([1, 1, 0, 0], ddof=1) / 2
    assert res["IS"].value == pytest.approx(0.5) and res["IS"].stderr == pytest.approx(se_is)
    assert res["IS"].ci_low == pytest.approx(v_is - 1.959964 * se_is, abs=1e-6)
    assert res["IS"].truth == pytest.approx(truth) and res["IS"].truth_stderr == pytest.approx(truth_se)
    assert res["IS"].rel_error == pytest.approx(0.0) and res["IS"].covers
    assert res["PIS"].value == res["IS"].value                 # ell = 1: the prefix product is the ratio
    assert res["SNIS"].value == pytest.approx(2.0 / 4.0)       # sum w r / sum w = 2.0 / 4.0
    # sIS p=1: Phi = {a0} (uniform logging, tie -> smallest id); pi renormalised on it = 1 at a0: w = [2, 0, 2, 0]
    assert res["sIS p=1"].value == pytest.approx((2 * 1 + 0 + 2 * 0 + 0) / 4)
    assert res["sIS p=1"].rel_error == pytest.approx(0.0)
    dm, rl = crossfit_reward(ev, np.array([[0.8], [0.2]]), seed=0)
    assert res["DR"].value == pytest.approx(np.mean(dm + w * (r - rl)))
    assert res["DM"].value == pytest.approx(dm.mean()) and res["DM"].covers is None
    z = (res["SNIS"].value - truth) / math.hypot(res["SNIS"].stderr, truth_se)
    assert res["SNIS"].z == pytest.approx(z)
    assert "SNIS-LB" not in res and not any(k.startswith("translated") for k in res)


def test_logs_of_different_action_sets_are_refused():
    a = _log([0], [0], [0], [0.5], n_actions=2, slate_size=1)
    b = _log([0], [0], [0], [0.5], n_actions=3, slate_size=1)
    with pytest.raises(PoxmInputError, match="expected the action set and slate"):
        evaluate_against_truth(a, b)


@needs_obd
def test_obd_uniform_marginals_and_is_by_hand():
    rnd, bts = read_obd(OBD, "random", "men"), read_obd(OBD, "bts", "men")
    np.testing.assert_allclose(position_marginals(rnd), np.full((34, 3), 1 / 34))
    pi = position_marginals(bts)
    np.testing.assert_allclose(pi.sum(axis=0), 1.0)
    res = {r.estimator: r for r in evaluate_against_truth(rnd, bts, n_boot=2)}
    by_hand = np.mean(pi[rnd.action, rnd.position] * 34 * rnd.reward)
    assert res["IS"].value == pytest.approx(by_hand)
    assert res["IS"].truth == pytest.approx(bts.reward.mean())
