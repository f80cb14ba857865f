"""The Direct Method's `loss_on` option (the ablation of its loss on the logged actions only): the loss over
the candidates or every label with the clicks as partial labels, against a hand computation; its prior
bias; its config key; and the batched engine, which trains it as the sequential one does."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from poxm_core.common.errors import PoxmInputError
from poxm_core.config.schema import MethodConfig, resolved_dict
from poxm_core.methods import Batch, HeadContext, get_method
from poxm_core.methods.dm import DirectMethodOptions, clicked_targets

L, K = 6, 4
ACTIONS = [[1, 3], [0, 5]]
REWARDS = [[1.0, 0.0], [1.0, 1.0]]
CAND = [[3, 1, 2, 4], [5, 0, 2, 1]]


def _batch() -> Batch:
    return Batch(z=torch.zeros(2, 3), actions=torch.tensor(ACTIONS), cand_pos=torch.tensor([[0, 1], [1, 0]]),
                 q=torch.full((2, 2), 0.5, dtype=torch.float64), rewards=torch.tensor(REWARDS, dtype=torch.float64),
                 cand=torch.tensor(CAND),
                 inv_prop_actions=torch.ones(2, 2), n_labels=L)


def _hand_bce(scores: dict[tuple[int, int], float], clicked: set[tuple[int, int]]) -> float:
    """Mean over the given (instance, label) pairs of -[c log s(x) + (1 - c) log(1 - s(x))], s the sigmoid."""
    tot = 0.0
    for (i, y), s in scores.items():
        p = 1.0 / (1.0 + math.exp(-s))
        tot += -math.log(p) if (i, y) in clicked else -math.log(1.0 - p)
    return tot / len(scores)


CLICKED = {(0, 1), (1, 0), (1, 5)}          # logged and rewarded; (0, 3) was logged and not rewarded


@pytest.mark.parametrize("on", ["logged", "candidates", "all"])
def test_loss_against_a_hand_computation(on):
    m = get_method("dm")
    mc = DirectMethodOptions(loss_on=on)
    S = torch.tensor(np.random.default_rng(3).normal(size=(2, L)), dtype=torch.float64, requires_grad=True)
    ctx = HeadContext(None, None, mc, None, L)
    ids = m.ids(_batch(), ctx)
    logits = S if ids is None else S.gather(1, ids)
    loss = m.loss(logits.unsqueeze(0), _batch(), ctx)
    pairs = {"logged": [(i, y) for i in range(2) for y in ACTIONS[i]],
             "candidates": [(i, y) for i in range(2) for y in CAND[i]],
             "all": [(i, y) for i in range(2) for y in range(L)]}[on]
    want = _hand_bce({(i, y): S[i, y].item() for i, y in pairs}, CLICKED)
    assert loss.shape == (1,) and loss.item() == pytest.approx(want, rel=1e-12)
    assert m.scores_every_label(mc) == (on == "all")
    loss.sum().backward()                                        # the rows the loss reads, and only those
    touched = {(i, y) for i in range(2) for y in range(L) if S.grad[i, y] != 0}
    assert touched == set(pairs)


def test_clicked_targets_read_the_log_only():
    b = _batch()
    assert clicked_targets(b.cand, b).tolist() == [[0, 1, 0, 0], [1, 1, 0, 0]]
    every = clicked_targets(None, b)
    assert every.shape == (2, L) and {(i, y) for i, y in zip(*np.nonzero(every.numpy()))} == CLICKED


def test_the_prior_bias_is_the_rate_of_positives_the_loss_sees():
    log = SimpleNamespace(rewards=np.array(REWARDS * 5, np.float32))        # 10 instances, 15 clicks
    prep = SimpleNamespace(log_train=log, policy_train=SimpleNamespace(cand=np.zeros((10, K), np.int64)), n_labels=L)
    m = get_method("dm")
    for on, rate in (("logged", 15 / 20), ("candidates", 15 / 40), ("all", 15 / 60)):
        b = m.initial_bias(prep, DirectMethodOptions(loss_on=on))
        assert b.shape == (L,) and np.allclose(b, math.log(rate / (1 - rate)))
    assert np.array_equal(m.initial_bias(prep), m.initial_bias(prep, MethodConfig()))   # the default: logged


def test_the_option_is_a_checked_key_dumped_only_when_set():
    m = get_method("dm")
    assert m.options(MethodConfig.model_validate({"loss_on": "all"})).loss_on == "all"
    with pytest.raises(PoxmInputError, match=r"^methods\.dm\.loss_on: Input should be 'logged', 'candidates' or 'all'"):
        m.options(MethodConfig.model_validate({"loss_on": "unlogged"}))
    from tests.trial_fixtures import tiny_config
    plain, ablated = tiny_config({"dm": {}}), tiny_config({"dm": {"loss_on": "candidates"}})
    assert "loss_on" not in resolved_dict(plain)["methods"]["dm"]               # published run ids unchanged
    assert resolved_dict(ablated)["methods"]["dm"]["loss_on"] == "candidates"


@pytest.mark.parametrize("on", ["candidates", "all"])
def test_batched_engine_trains_it_as_the_sequential_one(on):
    from tests.poxm_core.training.test_batched_heads import _compare, _train

    methods = {"logging": {}, "dm": {"lr": 0.01, "loss_on": on}}
    seq, _, _ = _train(methods, False, epochs=1, f64=True)
    bat, _, _ = _train(methods, True, epochs=1, f64=True)
    _compare(seq, bat, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("on", ["logged", "all"])
def test_a_fresh_dm_head_starts_at_its_losses_prior(on):
    from poxm_core.training.command import pick_trial
    from poxm_core.training.trial_setup import build_heads
    from tests.trial_fixtures import tiny_config, tiny_prepared

    prep = tiny_prepared(n_tr=60, L=20, K=8)
    cfg = tiny_config({"logging": {}, "dm": {"lr": 0.01, "loss_on": on}})
    heads, _ = build_heads(cfg, pick_trial(cfg), prep, torch.device("cpu"))
    dm = next(h for h in heads if h.spec.method == "dm")
    clicks, n = float(prep.log_train.rewards.sum()), prep.log_train.rewards.shape[0]
    rate = clicks / (n * (prep.log_train.rewards.shape[1] if on == "logged" else prep.n_labels))
    assert torch.allclose(dm.policy.out.b, torch.full((prep.n_labels,), math.log(rate / (1 - rate))), atol=1e-5)
