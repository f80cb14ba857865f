"""MIPS and OffCEM on real logs (poxm_core/bandit/logged_ope.py, `cluster_row_weights`): the cluster weight
by hand, singletons = the action weights, and the estimators' rows in `evaluate_against_truth` and in
`poxm ope`'s frame on the OBD sample (items grouped by k-means of their features)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from poxm_core.bandit.logged_ope import (cluster_row_weights, crossfit_reward, evaluate_against_truth,
                                         position_marginals, row_weights)
from poxm_core.common.errors import PoxmInputError
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


def test_cluster_row_weights_by_hand():
    log = _log([0, 1, 2], [0, 0, 1], [1, 0, 1], [0.5, 0.25, 0.5])
    pi = np.array([[0.2, 0.5], [0.3, 0.25], [0.5, 0.25]])
    rho = np.array([[0.5, 0.2], [0.25, 0.3], [0.25, 0.5]])
    cluster = np.array([0, 0, 1])
    # row 0: e = {0, 1} at k=0: pi .5; rho_i(e) = .5 * (.75) / .5 = .75 -> 2/3
    # row 1: same cluster: pi .5; rho_i(e) = .25 * .75 / .25 = .75 -> 2/3
    # row 2: e = {2} at k=1: pi .25; rho_i(e) = .5 * .5 / .5 = .5 -> 1/2 (= its action weight)
    np.testing.assert_allclose(cluster_row_weights(log, pi, rho, cluster), [2 / 3, 2 / 3, 0.5], rtol=1e-14)
    np.testing.assert_allclose(cluster_row_weights(log, pi, rho, np.arange(3)), row_weights(log, pi), rtol=1e-14)
    with pytest.raises(PoxmInputError, match="one id per action"):
        cluster_row_weights(log, pi, rho, np.array([0, 1]))


def test_evaluate_against_truth_gives_mips_and_offcem_with_clusters_only():
    ev = _log([0, 1, 0, 1], [0, 0, 0, 0], [1, 0, 0, 1], [0.5] * 4, n_actions=2, slate_size=1)
    tg = _log([0, 0, 0, 1], [0, 0, 0, 0], [1, 1, 0, 0], [0.8, 0.8, 0.8, 0.2], n_actions=2, slate_size=1)
    plain = {r.estimator for r in evaluate_against_truth(ev, tg, p_list=(1,), n_boot=2)}
    assert not plain & {"MIPS", "OffCEM"}
    res = {r.estimator: r for r in evaluate_against_truth(ev, tg, p_list=(1,), n_boot=2, clusters=np.array([0, 0]))}
    # one cluster holds every action: pi(e) = rho(e) = 1, w = 1: MIPS is the log's mean reward
    assert res["MIPS"].value == pytest.approx(0.5)
    # OffCEM: mean_i [dm_i + 1 * (r_i - rhat_i)] with DR's cross-fitted reward model terms
    dm, rl = crossfit_reward(ev, position_marginals(tg), seed=0)
    assert res["OffCEM"].value == pytest.approx(np.mean(dm + ev.reward - rl), rel=1e-12)
    sing = {r.estimator: r for r in evaluate_against_truth(ev, tg, p_list=(1,), n_boot=2, clusters=np.array([0, 1]))}
    assert sing["MIPS"].value == pytest.approx(sing["IS"].value, rel=1e-12)
    assert sing["OffCEM"].value == pytest.approx(sing["DR"].value, rel=1e-12)


@pytest.mark.slow          # ~35 s on 2 busy cores: reads both OBD logs, a reward model per direction
@needs_obd
def test_obd_frame_has_cluster_rows():
    from orchestration.report.ope_truth import item_clusters, obd_ope_frame

    df = obd_ope_frame(OBD, ("men",), p_list=(10,), n_boot=2, clusters=8)
    for target in ("bts", "random"):
        got = set(df[df.target == target].estimator)
        assert {"MIPS", "OffCEM", "IS", "DR"} <= got
    rnd = read_obd(OBD, "random", "men")
    cl = item_clusters(rnd, 8, 0)
    assert cl.shape == (rnd.n_actions,) and set(cl) == set(range(8))
    # from the uniform log, the cluster weight of a row is pi(e | k) / (|e| / A)
    rho = position_marginals(rnd)
    w = cluster_row_weights(rnd, position_marginals(read_obd(OBD, "bts", "men")), rho, cl)
    assert np.all(w >= 0) and abs(w.mean() - 1) < 0.1
