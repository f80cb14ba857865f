"""One training step of a group of heads on one batch, written once (docs/training.md).

`TrainStep(heads, stacks, engine, ctxs, static)` is called by the epoch's eager loop
(training/epoch.py) and by the CUDA-graph runner (accel/graph.py), which captures it once and replays it:

    forward   one joint forward per shared network stack; the batched heads' losses (`BatchedHeads`,
              training/batched.py) and each other head's loss on its own `RowScorer`
    backward  of the sum of the losses (the heads' parameters are disjoint: each gets its own gradient)
    optimise  the batched heads' step, each other head's output-layer step (and its own dense layers),
              one step per stack

static=False: the plain forward (`torch.unique`, EmbeddingBag). static=True: slot mode, the same
arithmetic without a host synchronisation or a data-dependent shape (`accel.static`), so that it can be
captured in a CUDA graph; the optimiser steps are the same in both modes (device step counters, rows
written back by slot when there are slots). Then a stack reads the batch's bag with
each entry's bag as 4th tensor (`stack_bag`), the labels (skyline) are a padded tensor of label ids and
rhat (DR-POXM) is computed by the caller from the padded bag (accel/graph.py).
Returns the heads' losses (H,), detached, batched heads first then the others in their order (`order`).
"""
from __future__ import annotations

import torch

from poxm_core.methods import Batch, HeadContext
from poxm_core.policy.heads import RowScorer

__all__ = ["TrainStep"]


class TrainStep:
    def __init__(self, heads: list, stacks: list, engine, ctxs: dict[str, HeadContext], static: bool = False) -> None:
        self.heads = list(heads)          # the heads stepped one by one (not in the engine)
        self.stacks = list(stacks)        # the shared network stacks of every trained head
        self.engine = engine              # a BatchedHeads, or None
        self.ctxs = ctxs
        self.static = static
        self.order = (engine.heads if engine is not None else []) + self.heads

    def __call__(self, batch: Batch, rhat=None, stack_bag=None) -> torch.Tensor:
        static = self.static
        bag = batch.bag if stack_bag is None else stack_bag
        stacked = {id(st): st(batch.z, bag, static=True) if static else st(batch.z, bag) for st in self.stacks}
        losses, scorers = [], []
        if self.engine is not None:
            losses.append(self.engine.loss(batch, stacked, self.ctxs, rhat, static=static))
        shared: dict | None = {} if static else None     # static_unique results shared by heads with the same ids
        for h in self.heads:
            ctx = self.ctxs[h.key]
            if h.method.needs_reward_model:
                ctx.reward = rhat
            feats = h.policy.step_features(batch.z, None if static else batch.bag, stacked)
            scorer = RowScorer(h.policy.out, feats, static=static, shared=shared)
            scorers.append(scorer)
            losses.append(h.method.head_loss(scorer, batch, ctx).view(1))
        out = torch.cat(losses)
        out.sum().backward()
        if self.engine is not None:
            self.engine.step()
        for h, scorer in zip(self.heads, scorers):
            h.policy.step(scorer)
        for st in self.stacks:
            st.step()
        return out.detach()
