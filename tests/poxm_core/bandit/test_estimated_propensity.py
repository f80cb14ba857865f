"""Estimated logging propensities (poxm_core/bandit/estimated_propensity.py): the slate propensities of
a known rho are the simulator's; the model recovers a rho it can represent; cross-fitting keeps a row's
own slate out of its propensity; a prepared variant gets every training-split propensity replaced."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from poxm_core.bandit.estimated_propensity import (crossfit_log_rho, fit_propensity_model, slate_propensities,
                                                   with_estimated_propensities)
from poxm_core.bandit.known_answer import make_world, sample_contexts, simulate_log
from poxm_core.common.errors import PoxmInputError
from tests.trial_fixtures import tiny_prepared


def _noiseless(T: float, n: int, seed: int = 0):
    """A known-answer log whose rho = softmax(z / T) over C(x), z the true logits (no logging noise)."""
    world = make_world(L=30, K=12, ell=4, noise=0.0, label_shift=0.0, temperature=T, seed=seed)
    ctx = sample_contexts(world, n, seed + 1)
    log = simulate_log(world, ctx, seed + 2)
    return np.take_along_axis(world.true_logits(ctx.X), ctx.cand, 1), ctx, log


def test_slate_propensities_are_the_simulators():
    scores, ctx, log = _noiseless(1.0, 500)
    q, rho_y = slate_propensities(ctx.log_rho, log.cand_pos)
    np.testing.assert_allclose(q, log.q, rtol=1e-12)
    np.testing.assert_allclose(rho_y, log.rho, rtol=1e-12)
    # by hand: rho (.5, .3, .2), slate (2, 0): q = .2, .5 / .8
    q, _ = slate_propensities(np.log([[0.5, 0.3, 0.2]]), np.array([[2, 0]]))
    np.testing.assert_allclose(q, [[0.2, 0.5 / 0.8]], rtol=1e-14)


@pytest.mark.parametrize("T", [0.5, 2.0])
def test_the_model_recovers_a_rho_it_can_represent(T):
    scores, ctx, log = _noiseless(T, 4000)
    m = fit_propensity_model(scores, log.cand_pos)
    assert m.a == pytest.approx(1 / T, rel=0.08)
    assert np.abs(m.c).max() < 0.25
    err = np.abs(np.exp(m.log_rho(scores)) - np.exp(ctx.log_rho)).sum(1).mean()     # mean total variation x 2
    assert err < 0.05


def test_rank_only_model_without_scores():
    # rho with the same shape in every context: softmax(-0.7 k) over 8 ranks; only rank biases to learn
    K, n, ell = 8, 6000, 3
    log_rho = np.tile(-0.7 * np.arange(K), (n, 1))
    log_rho -= np.log(np.exp(log_rho).sum(1, keepdims=True))
    g = np.random.default_rng(0)
    pos = np.argsort(-(log_rho + g.gumbel(size=log_rho.shape)), axis=1)[:, :ell]
    m = fit_propensity_model(None, pos, K=K)
    np.testing.assert_allclose(m.log_rho(None, 1)[0], log_rho[0], atol=0.1)


def test_crossfit_keeps_a_rows_own_slate_out():
    scores, _, log = _noiseless(1.0, 300)
    a, _ = crossfit_log_rho(scores, log.cand_pos, folds=3, seed=4)
    other = log.cand_pos.copy()
    other[0] = np.roll(other[0], 1)           # row 0's slate changed: only the other folds' models move
    b, _ = crossfit_log_rho(scores, other, folds=3, seed=4)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a, b)
    with pytest.raises(PoxmInputError, match="folds"):
        crossfit_log_rho(scores, log.cand_pos, folds=1)


def test_a_prepared_variant_gets_every_training_propensity_replaced():
    prep = tiny_prepared()
    est = with_estimated_propensities(prep, folds=3)
    assert est.meta["propensities"]["kind"] == "estimated"
    np.testing.assert_allclose(est.policy_train.rho.sum(1), 1.0, rtol=1e-12)
    assert not np.allclose(est.policy_train.rho, prep.policy_train.rho)
    for name in ("log_train", "log_val"):
        old, new = getattr(prep, name), getattr(est, name)
        np.testing.assert_array_equal(new.actions, old.actions)
        q, rho_y = slate_propensities(np.log(est.policy_train.rho[new.instance]), new.cand_pos)
        np.testing.assert_allclose(new.q, q, rtol=1e-10)
        np.testing.assert_allclose(new.rho, rho_y, rtol=1e-10)
    assert est.policy_test is prep.policy_test          # the test split's rho is ground truth, kept
    with pytest.raises(PoxmInputError, match="logged dataset"):
        with_estimated_propensities(dataclasses.replace(prep, Y_test=None))


def test_the_likelihood_is_the_plackett_luce_one():
    """The fit's objective against the project's PL conditionals (an independent implementation), and its
    gradient against finite differences."""
    from poxm_core.bandit.estimated_propensity import _pl_nll
    from poxm_core.estimators import pl_log_conditionals

    g = np.random.default_rng(1)
    s = g.normal(scale=3.0, size=(50, 9))
    pos = np.argsort(g.random((50, 9)), 1)[:, :4]
    drawn = np.zeros((50, 9), dtype=bool)
    np.put_along_axis(drawn, pos, True, axis=1)
    nll, grad = _pl_nll(s, pos, drawn)
    assert nll == pytest.approx(-pl_log_conditionals(s, pos).sum() / 50, rel=1e-12)
    for i, k in ((0, 0), (3, 5), (7, 8)):
        d = np.zeros_like(s)
        d[i, k] = 1e-6
        fd = (_pl_nll(s + d, pos, drawn)[0] - _pl_nll(s - d, pos, drawn)[0]) / 2e-6
        assert grad[i, k] == pytest.approx(fd, rel=1e-5, abs=1e-8)     # fd: ~1e-9 of round-off


def test_the_dataset_option_reaches_every_importance_weight_of_a_trial(tmp_path):
    """`logging_propensities: estimated`: the trial trains and estimates with the fitted rho and q; the
    recorded default leaves the prepared inputs alone."""
    from poxm_core.bandit.estimated_propensity import dataset_propensities
    from poxm_core.config.schema import load_config
    from poxm_core.training import run_trial, trial_specs

    prep = tiny_prepared()

    def cfg(option):
        ds = {"name": "tiny", "variants": [{"name": "A", "alpha": 0.5}], **option}
        return load_config(data={"name": "tiny-sweep", "seeds": [0], "device": "cpu", "datasets": [ds],
                                 "methods": {"logging": {}, "poxm": {"p": [4], "lam": [0.5], "lr": 0.01}},
                                 "training": {"epochs": 1, "batch_size": 16, "mc_slates": 8, "eval_max_support": 10}})

    recorded, estimated = cfg({}), cfg({"logging_propensities": "estimated"})
    assert dataset_propensities(recorded, "tiny", prep) is prep
    est = dataset_propensities(estimated, "tiny", prep)
    assert dataset_propensities(estimated, "tiny", est) is est          # idempotent
    rows = {}
    for name, c in (("recorded", recorded), ("estimated", estimated)):
        df = run_trial(c, trial_specs(c, "seed")[0], prep, tmp_path / name, progress=False)
        fin = df[df["final"].astype(bool) & (df.split == "val") & (df.metric == "IS")]
        rows[name] = fin.set_index("method").value
    # the logging head is the trial's own rho (recorded, or fitted): its weights are 1 either way
    mean_r = prep.log_val.rewards.sum(1).mean()
    assert rows["recorded"]["logging"] == pytest.approx(mean_r, rel=1e-6)
    assert rows["estimated"]["logging"] == pytest.approx(mean_r, rel=1e-6)
    # POXM's loss and its validation weights read q: both moved
    assert rows["estimated"]["poxm"] != pytest.approx(rows["recorded"]["poxm"], rel=1e-3)
