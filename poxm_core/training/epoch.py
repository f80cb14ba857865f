"""One training epoch of a group of heads on the same seeded batches (docs/training.md).

The fit log is shuffled by a generator seeded from (seed, epoch) and cut into mini-batches; each batch
is given to every trainable head (its own policy and optimisers). Per batch: one joint forward of the
heads' network stacks, each head's loss on its own block of features, one backward of their sum (the
blocks are disjoint: each head gets its own gradient), then each head's row-sparse output step and
one step per stack.

The batches come from `TrainData` (device-resident, batches.py). The losses are summed on the device
and read once at the end of the epoch (no host synchronisation per batch for them); a non-finite loss
is reported then, naming the head.
"""
from __future__ import annotations

import torch

from poxm_core.config import SweepConfig
from poxm_core.methods import HeadContext
from poxm_core.methods.base import reward_shift
from poxm_core.prepared import Prepared
from poxm_core.training.batches import TrainData
from poxm_core.policy.heads import RowScorer
from poxm_core.seeds import stable_seed
from poxm_core.training.spec import TrialSpec
from poxm_core.training.trial_setup import TrialHead

__all__ = ["train_epoch", "train_data_for"]


def _reward_fn(reward: TrialHead, batch):
    """rhat(ids) = sigmoid(reward head logits) for the batch's instances, without gradient."""
    with torch.no_grad():
        h = reward.policy.features(batch.z, batch.bag)

    def rhat(ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            W = reward.params.W.index_select(0, ids.reshape(-1)).view(*ids.shape, -1)
            return torch.sigmoid(torch.bmm(W, h.unsqueeze(2)).squeeze(2) + reward.params.b[ids])
    return rhat


def _reads_sparse(heads: list[TrialHead], reward: TrialHead | None) -> bool:
    trainable = [h for h in heads if h.trains]
    needs_reward = any(h.method.needs_reward_model for h in trainable)
    return any(h.policy.reads_sparse for h in trainable) or (needs_reward and reward.policy.reads_sparse)


def train_data_for(prepared: Prepared, heads: list[TrialHead], device: torch.device) -> TrainData:
    """The device-resident training data of a trial whose heads (the reward model among them) are `heads`."""
    return TrainData(prepared, device, sparse=any(h.trains and h.policy.reads_sparse for h in heads))


def train_epoch(cfg: SweepConfig, spec: TrialSpec, prepared: Prepared, heads: list[TrialHead], epoch: int,
                device: torch.device, reward: TrialHead | None = None,
                data: TrainData | None = None) -> dict[str, float]:
    """One epoch of every head in `heads`; `reward` is the fitted reward model. Returns {head key: mean loss}."""
    trainable = [h for h in heads if h.trains]
    if data is None:
        data = TrainData(prepared, device, sparse=_reads_sparse(heads, reward))
    n = data.n
    g = torch.Generator().manual_seed(stable_seed(spec.seed, "batches", epoch))
    perm_t = torch.randperm(n, generator=g)
    perm = perm_t.numpy()
    ctxs = {h.key: HeadContext(h.spec.p, h.spec.lam, h.mc,
                               torch.Generator().manual_seed(stable_seed(spec.seed, h.key, "negatives", epoch)),
                               prepared.n_labels, shift=reward_shift(h.spec.lam, cfg.training.translation))
            for h in trainable}
    labels = any(h.method.needs_labels() for h in trainable)
    needs_reward = any(h.method.needs_reward_model for h in trainable)
    stacks = list({id(h.policy.stack[0]): h.policy.stack[0] for h in trainable if hasattr(h.policy, "stack")}.values())
    # float64 sums on the device, as the host loop summed Python floats (values are float32 losses)
    total = torch.zeros(len(trainable), dtype=torch.float64, device=device)
    rows, bags = data.epoch(perm_t) if trainable else (None, None)
    B = cfg.training.batch_size
    for a in range(0, n if trainable else 0, B):
        b = min(n, a + B)
        batch = data.batch(rows, perm, a, b, bags, labels)
        rhat = _reward_fn(reward, batch) if needs_reward else None
        stacked = {id(st): st(batch.z, batch.bag) for st in stacks}
        scorers, losses = [], []
        for h in trainable:
            ctx = ctxs[h.key]
            if h.method.needs_reward_model:
                ctx.reward = rhat
            pol = h.policy
            feats = pol.from_stacked(stacked[id(pol.stack[0])]) if hasattr(pol, "from_stacked") else \
                pol.features(batch.z, batch.bag)
            scorer = RowScorer(pol.out, feats)
            scorers.append(scorer)
            losses.append(h.method.loss(scorer, batch, ctx))
        stacked_losses = torch.stack(losses)
        total += stacked_losses.detach().double() * (b - a)
        stacked_losses.sum().backward()
        for h, scorer in zip(trainable, scorers):
            h.policy.step(scorer)
        for st in stacks:
            st.step()
    values = total.tolist()
    for h, v in zip(trainable, values):
        if v != v or v in (float("inf"), float("-inf")):
            raise FloatingPointError(f"{h.key}: non-finite training loss at epoch {epoch} (lower its lr?)")
    return {h.key: v / n for h, v in zip(trainable, values)}
