"""An estimator that needs more than the importance weights is one module: it declares the extra arrays
it reads (`needs`) and makes its own weights (`weights_on(log)`); the trainer's validation rows gather
those arrays by name, so registering it is one line (docs/estimators.md, "Estimators that need more than
the weights").

The estimator of this module, `ClusterMIPS`, is a marginalised IPS (Saito & Joachims 2022) over action
clusters read from a per-action array: an action's cluster is the largest coordinate of its embedding
(`action_embedding`, (L, d)), and at slate position j

    w_ij = pi(c_ij | x_i, y_i,<j) / rho(c_ij | x_i, y_i,<j),   c_ij = cluster of the logged y_ij,

with pi's conditional over Phi^p(x) (the table `pi_selector`) and rho's over C(x) less the logged
prefix: rho(c | x, y_<j) = sum_{a in C(x) \\ y_<j, c(a) = c} rho(a | x) / (1 - sum_{k<j} rho(y_k | x)).
Singleton clusters give sIS's weights; a single cluster gives weight 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch

from poxm_core.common.errors import PoxmInputError
from poxm_core.estimators import ESTIMATORS, IS, SIS, ValidationLog, get_estimator, pl_conditional_table_torch
from poxm_core.estimators.registry import register_estimator
from poxm_core.estimators.validation import needed_arrays, validation_estimates
from trial_fixtures import tiny_config, tiny_prepared


@dataclass(frozen=True)
class ClusterMIPS(IS):
    """Marginalised IPS over the clusters of a per-action embedding (module doc); IS's arithmetic."""
    name: ClassVar[str] = "mips_demo"
    label: ClassVar[str] = "MIPS-demo"
    support: ClassVar[str] = "selector"
    needs: ClassVar[tuple[str, ...]] = ("action_embedding", "actions", "cand_pos", "candidates",
                                        "rho_candidates", "pi_selector")
    seen: ClassVar[list] = []        # what weights_on was given (the tests read it)

    def weights_on(self, log: ValidationLog) -> np.ndarray:
        a = log.arrays
        self.seen.append(dict(a))
        cluster = np.argmax(a["action_embedding"], axis=1)                 # (L,)
        pi, rho, cp = a["pi_selector"], a["rho_candidates"], a["cand_pos"]  # (n, ell, p), (n, K), (n, ell)
        n, ell = cp.shape
        same = cluster[a["candidates"]][:, None, :] == cluster[a["actions"]][:, :, None]   # (n, ell, K)
        taken = np.zeros(same.shape, dtype=bool)                            # the logged prefix's columns
        for j in range(1, ell):
            taken[:, j] = taken[:, j - 1]
            taken[np.arange(n), j, cp[:, j - 1]] = True
        pi_c = np.sum(pi * same[:, :, :pi.shape[2]], axis=2)
        used = np.cumsum(np.take_along_axis(rho, cp, axis=1), axis=1) - np.take_along_axis(rho, cp, axis=1)
        rho_c = np.sum(rho[:, None, :] * (same & ~taken), axis=2) / (1.0 - used)
        return pi_c / rho_c


# ------------------------------------------------------------------------------------ a tiny log by hand

def _hand_log() -> ValidationLog:
    """n = 2, ell = 2, K = 3, p = 2, L = 4 actions in clusters (0, 0, 1, 1) (one-hot embeddings).
    Row 0: C = (0, 2, 1), rho (.5, .3, .2), slate (0, 1); row 1: C = (3, 1, 0), rho (.6, .25, .15), slate (1, 3)."""
    emb = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    cand = np.array([[0, 2, 1], [3, 1, 0]])
    rho = np.array([[0.5, 0.3, 0.2], [0.6, 0.25, 0.15]])
    actions = np.array([[0, 1], [1, 3]])
    cand_pos = np.array([[0, 2], [1, 0]])
    q = np.array([[0.5, 0.2 / 0.5], [0.25, 0.6 / 0.75]])
    r = np.array([[1.0, 0.0], [1.0, 1.0]])
    # pi on Phi^2 = the first two candidates, at each position (the prefix's column removed)
    pi = np.array([[[0.6, 0.4], [0.0, 1.0]],
                   [[0.3, 0.7], [1.0, 0.0]]])
    with np.errstate(divide="ignore"):
        logpi_sel = np.log(np.array([[0.6, 0.0], [0.7, 1.0]]))   # pi of the logged action (0: outside Phi^2)
    arrays = {"action_embedding": emb, "actions": actions, "cand_pos": cand_pos, "candidates": cand,
              "rho_candidates": rho, "pi_selector": pi}
    return ValidationLog({"selector": logpi_sel}, q, r, arrays=arrays)


def test_cluster_mips_against_hand_values():
    # w00: cluster 0 = {0, 1}: pi .6 (action 1 is outside Phi^2), rho .5 + .2           -> 6/7
    # w01: action 1 (cluster 0): pi 0 (action 0 taken), rho .2 / (1 - .5)               -> 0
    # w10: action 1 (cluster 0 = columns 1, 2): pi .7, rho .25 + .15                      -> 7/4
    # w11: action 3 (cluster 1 = column 0): pi 1, rho .6 / (1 - .25)                      -> 5/4
    log = _hand_log()
    w = ClusterMIPS().weights_on(log)
    np.testing.assert_allclose(w, [[6 / 7, 0.0], [7 / 4, 5 / 4]], rtol=1e-14)
    est = ClusterMIPS().estimate_on(log)
    # t_0 = 6/7, t_1 = 7/4 + 5/4 = 3; value 27/14; stderr = std([6/7, 3], ddof=1) / sqrt(2) = (3 - 6/7) / 2
    assert est.value == pytest.approx(27 / 14, rel=1e-14)
    assert est.stderr == pytest.approx(15 / 14, rel=1e-14)
    # sIS on the same log (its own weights pi/q: 1.2, 0, 2.8, 1.25), through the same hook
    assert SIS().estimate_on(log).value == pytest.approx((1.2 + 2.8 + 1.25) / 2, rel=1e-14)


def test_a_log_without_the_arrays_is_refused_or_skipped():
    log = _hand_log()
    bare = ValidationLog(log.logpi, log.q, log.r)
    with pytest.raises(PoxmInputError, match="lacks the arrays"):
        ClusterMIPS().estimate_on(bare)
    register_estimator(ClusterMIPS)
    try:
        assert "MIPS-demo" not in validation_estimates(log.logpi, log.q, log.r)              # skipped
        got = validation_estimates(log.logpi, log.q, log.r, arrays=dict(log.arrays))
        assert got["MIPS-demo"].value == pytest.approx(27 / 14, rel=1e-14)
        assert got["sIS"].value == pytest.approx(5.25 / 2, rel=1e-14)
    finally:
        ESTIMATORS.pop("mips_demo", None)


def test_needs_must_be_names():
    @dataclass(frozen=True)
    class Bad(IS):
        name: ClassVar[str] = "bad_needs"
        label: ClassVar[str] = "Bad"
        needs: ClassVar = "action_embedding"          # a string, not a tuple of names
    with pytest.raises(TypeError, match="needs must be a tuple"):
        register_estimator(Bad)
    assert "bad_needs" not in ESTIMATORS


def test_conditional_table_against_hand_values():
    # scores log(1, 2, 3, -inf): position 0 -> (1, 2, 3, 0)/6; the logged column 2 leaves -> (1, 2, 0, 0)/3;
    # a logged action outside A (pos -1) removes nothing -> the same at position 2
    s = torch.log(torch.tensor([[1.0, 2.0, 3.0, 0.0]], dtype=torch.float64))
    t = pl_conditional_table_torch(s, torch.tensor([[2, -1, 0]]))
    np.testing.assert_allclose(t.numpy(), [[[1 / 6, 2 / 6, 3 / 6, 0], [1 / 3, 2 / 3, 0, 0], [1 / 3, 2 / 3, 0, 0]]],
                               rtol=1e-15)
    # everything of A logged: nothing left, a row of 0
    t = pl_conditional_table_torch(torch.zeros((1, 2), dtype=torch.float64), torch.tensor([[0, 1, -1]]))
    np.testing.assert_array_equal(t.numpy()[0, 2], [0.0, 0.0])


# ------------------------------------------------------------------------------------ on a prepared log

PREP = tiny_prepared()


@pytest.mark.parametrize("kind", ["phi", "candidates", "all", "greedy", "rho"])
def test_the_table_agrees_with_logpi_and_singletons_give_sis(kind):
    """pi_selector's entry at the logged column is exp(logpi_sis); with one action per cluster MIPS's
    weights are sIS's, with one cluster for every action they are 1 (Phi^4 is never emptied by 3 picks)."""
    from poxm_core.policy.heads import HeadParams
    from poxm_core.training.evaluation import PolicyView, val_arrays

    gen = torch.Generator().manual_seed(0)
    L, d = PREP.W.shape
    P = HeadParams(torch.randn(L, d, generator=gen), torch.randn(L, generator=gen))
    view = PolicyView(kind, 4 if kind == "phi" else None, None if kind == "rho" else P)
    log = PREP.log_val
    cand, rho = PREP.policy_train.cand, PREP.policy_train.rho
    for p in (1, 2, 4):      # p < ell: Phi^p can be used up by the prefix (a row of 0, log pi = -inf)
        arr = val_arrays(view, PREP.Z_train, cand, rho, log, p, None, torch.device("cpu"), tables=True)
        table = arr["pi_selector"]
        assert table.shape == (log.n, log.slate_size, p)
        inside = log.cand_pos < p
        at = np.take_along_axis(table, np.minimum(log.cand_pos, p - 1)[:, :, None], axis=2)[:, :, 0]
        np.testing.assert_allclose(np.where(inside, at, 0.0), np.exp(arr["logpi_sis"]), rtol=1e-12, atol=1e-300)
        # each position's conditional is a distribution on what is left of Phi^p, or 0 when nothing is
        taken = np.cumsum(inside, axis=1) - inside
        np.testing.assert_allclose(table.sum(axis=2), np.where(taken < p, 1.0, 0.0), rtol=1e-12)
    assert "pi_selector" not in val_arrays(view, PREP.Z_train, cand, rho, log, p, None, torch.device("cpu"))
    arrays = {"actions": log.actions, "cand_pos": log.cand_pos, "candidates": cand[log.instance],
              "rho_candidates": rho[log.instance], "pi_selector": table}
    vlog = ValidationLog({"selector": arr["logpi_sis"]}, log.q, log.rewards.astype(float),
                         arrays={**arrays, "action_embedding": np.eye(L)})
    np.testing.assert_allclose(ClusterMIPS().weights_on(vlog), vlog.importance_weights("selector"), rtol=1e-10)
    one = ValidationLog(vlog.logpi, vlog.q, vlog.r, arrays={**arrays, "action_embedding": np.ones((L, 1))})
    # rho sums to 1 over C(x) only to float32 rounding (the fixture's policy), hence the tolerance
    assert np.abs(rho.sum(axis=1) - 1).max() < 1e-6
    np.testing.assert_allclose(ClusterMIPS().weights_on(one), 1.0, rtol=1e-6)


def test_one_module_reached_by_name_in_the_trial_rows_and_selection(tmp_path):
    """(a) ClusterMIPS lives in this module only and is registered by one line; (c) a trial's
    validation rows carry it for every head, computed from the arrays it declared (the logging
    model's W as its per-action array, each head's own table on Phi^p), and selection picks by it."""
    from orchestration.selection import select, val_criteria
    from poxm_core.training import run_trial, trial_specs

    assert ClusterMIPS.__module__ == __name__
    lib = Path(__file__).resolve().parents[3]
    for pkg in ("poxm_core", "orchestration"):
        for f in (lib / pkg).rglob("*.py"):
            text = f.read_text()
            assert "mips_demo" not in text and "ClusterMIPS" not in text, f
    assert "action_embedding" not in needed_arrays()   # nobody needs W: the trainer does not pass it

    register_estimator(ClusterMIPS)                    # the one line
    try:
        assert get_estimator("mips_demo") == ClusterMIPS()
        assert "action_embedding" in needed_arrays()
        wanted = needed_arrays()
        ClusterMIPS.seen.clear()
        methods = {"logging": {}, "dm": {"lr": 0.01}, "poxm": {"p": [2, 4], "lam": [0.5], "lr": 0.01}}
        cfg = tiny_config(methods, epochs=1)
        spec = trial_specs(cfg, "seed")[0]
        df = run_trial(cfg, spec, PREP, tmp_path, progress=False)
    finally:
        ESTIMATORS.pop("mips_demo", None)
    fin = df[df["final"].astype(bool) & (df.split == "val")]
    mips = fin[fin.metric == "MIPS-demo"]
    assert len(mips) == len(spec.heads) and np.isfinite(mips.value).all()
    assert "MIPS-demo" in val_criteria(df)
    # what it received: the per-action array is the logging model's W, the table is per head (p columns)
    assert ClusterMIPS.seen and all(s["action_embedding"] is PREP.W for s in ClusterMIPS.seen)
    assert {s["pi_selector"].shape[2] for s in ClusterMIPS.seen} >= {2, 4}
    # what some registered estimator declared, and nothing else (the registry's own MIPS/OffCEM need more)
    assert all(set(ClusterMIPS.needs) <= set(s) <= wanted for s in ClusterMIPS.seen)
    # selection by its label picks poxm's p with the larger MIPS-demo value
    sel = select(df, criterion="MIPS-demo")
    chosen = sel[(sel.method == "poxm") & (sel.selection == "mips-demo")]
    pts = mips[mips.method == "poxm"].set_index("p").value
    assert int(chosen.p.iloc[0]) == int(pts.idxmax())
    assert float(chosen.val_criterion.iloc[0]) == pytest.approx(pts.max(), rel=1e-12)
