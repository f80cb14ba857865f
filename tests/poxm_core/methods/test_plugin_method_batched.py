"""A method defined outside the library (here, in this test module) trains in the batched engine with
no registration beyond its own module: the engine asks the method for its ids and calls its loss over
a head axis, so nothing in poxm_core/training names it."""
from __future__ import annotations

import pytest
import torch

from poxm_core.estimators import phi, selector_pos
from poxm_core.methods import METHODS, Batch, HeadContext, Method, register_method
from poxm_core.config.schema import MethodConfig
from tests.poxm_core.training.test_batched_heads import GRID, _compare, _train, engine_heads


class RewardWeightedPhi(Method):
    """Reward-weighted log-likelihood over Phi^p(x): loss = -(1/B) sum_ij r_ij log softmax_Phi(s)[y_ij],
    positions outside Phi^p dropped. Not a built-in; written once, over the head axis."""
    name = "test_rwl"
    uses_p = True
    uses_lam = True           # lam is read as a per-head weight of the loss (a (G, 1, 1) vector in a group)
    train_support = "phi"
    test_policy = "softmax"
    graph_safe = True

    def ids(self, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        return phi(batch.cand, ctx.p)

    def loss(self, logits: torch.Tensor, batch: Batch, ctx: HeadContext) -> torch.Tensor:
        pos = selector_pos(batch.cand_pos, ctx.p)                                   # (B, ell), -1 outside
        logp = torch.log_softmax(logits, dim=-1)                                    # (G, B, p)
        picked = logp.gather(-1, pos.clamp(min=0).expand(*logits.shape[:-2], *pos.shape))
        terms = torch.where(pos >= 0, picked * batch.rewards, torch.zeros_like(picked))
        return -((1.0 - ctx.shift) * terms).sum(dim=(-2, -1)) / batch.size     # 1 - shift = lam


@pytest.fixture
def plugin():
    register_method(RewardWeightedPhi())       # the one line a plugin module runs
    yield
    METHODS.pop("test_rwl", None)


def test_plugin_method_trains_batched_and_equals_its_sequential_run(plugin):
    methods = {"logging": {}, "dm": GRID["dm"], "test_rwl": {"p": [4, 8], "lam": [0.5, 1.0], "lr": 0.05}}
    seq, lseq, _ = _train(methods, False, epochs=1, f64=True)
    bat, lbat, data = _train(methods, True, epochs=1, f64=True)
    batched = engine_heads(data)["batched"]
    assert sum(k.startswith("test_rwl/") for k in batched) == 4 and not engine_heads(data)["sequential"]
    _compare(seq, bat, rtol=1e-10, atol=1e-12)
    for x, y in zip(lseq, lbat):
        for k in x:
            assert x[k] == pytest.approx(y[k], rel=1e-10, abs=1e-12)
    # the heads learned something (equal parameters that never moved could not fail the comparison)
    moved = [k for k in seq if k.startswith("test_rwl/") and float((seq[k][0] - bat[k][0]).abs().max()) < 1e-9
             and float(seq[k][2].abs().max()) > 0]
    assert len(moved) == 4


def test_a_group_loss_is_each_heads_own_loss():
    """loss over G heads = the G single-head losses, and the value is the hand-computed one."""
    m = RewardWeightedPhi()
    B, ell, K, p = 2, 2, 5, 3
    cand = torch.tensor([[4, 1, 3, 0, 2], [2, 0, 1, 4, 3]])
    cand_pos = torch.tensor([[0, 2], [1, 4]])          # instance 1's second pick is outside Phi^3
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    batch = Batch(z=torch.zeros(B, 1), actions=cand.gather(1, cand_pos), cand_pos=cand_pos,
                  q=torch.full((B, ell), 0.5), rewards=rewards, cand=cand, inv_prop_actions=torch.ones(B, ell),
                  n_labels=K)
    logits = torch.tensor([[[0.0, 1.0, 2.0], [1.0, 0.0, -1.0]],
                           [[0.5, 0.5, 0.5], [2.0, 0.0, 0.0]]], dtype=torch.float64)      # (G=2, B, p)
    shift = torch.tensor([0.5, 0.0], dtype=torch.float64).view(-1, 1, 1)
    ctx = HeadContext(p, None, MethodConfig(), None, K, shift=shift)
    both = m.loss(logits, batch, ctx)
    one = [m.loss(logits[g:g + 1], batch, HeadContext(p, None, MethodConfig(), None, K, shift=float(shift[g])))
           for g in range(2)]
    torch.testing.assert_close(both, torch.cat(one))
    # by hand: instance 0 rewards position 0 (candidate rank 0); instance 1 rewards rank 1 (rank 4: dropped)
    import math
    lse = lambda xs: math.log(sum(math.exp(x) for x in xs))   # noqa: E731
    h0 = -0.5 * ((0.0 - lse([0.0, 1.0, 2.0])) + (0.0 - lse([1.0, 0.0, -1.0]))) / 2
    h1 = -1.0 * ((0.5 - lse([0.5] * 3)) + (0.0 - lse([2.0, 0.0, 0.0]))) / 2
    torch.testing.assert_close(both, torch.tensor([h0, h1], dtype=torch.float64))
