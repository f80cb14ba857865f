"""One training epoch of a group of heads on the same seeded batches (docs/training.md).

The fit log is shuffled by a generator seeded from (seed, epoch) and cut into mini-batches; each batch
is given to every trainable head (its own policy and optimisers) by one training step
(`training.step.TrainStep`): one joint forward of the heads' network stacks, each head's loss on its
own block of features, one backward of their sum (the blocks are disjoint: each head gets its own
gradient), then each head's row-sparse output step and one step per stack.

The batches come from `TrainData` (device-resident, batches.py). The losses are summed on the device
and read once at the end of the epoch (no host synchronisation per batch for them); a non-finite loss
is reported then, naming the head.

CUDA graphs (`accel.graph.GraphedSteps`): on a GPU a step is hundreds of small kernels, and launching
them from Python, not the GPU, set the pace (docs/performance.md: several times the GPU's own work
in host time per batch). With the deterministic mode off, the epoch's full batches run as
replays of ONE captured training step, the same `TrainStep` in its sync-free form (static=True), when
either every trained head is graph-safe (its method declares `graph_safe`; no dense optimiser of a
policy's own; no labels or reward model read), or the heads are batched (`BatchedHeads`: the skyline's
labels come from a padded table, DR-POXM's rhat is computed inside the step) and the heads outside the
engine share no stack with it: those train in an eager pass of their own over the same batches. The
last, shorter batch runs eagerly.
POXM_CUDA_GRAPHS=0 turns it off; a failed capture falls back to the static steps without a graph
(with a warning). The capture holds `capture_guard.CAPTURE_GUARD`: the overlapped validation of the
previous epoch (overlap.py) makes no device call while it is open.
"""
from __future__ import annotations

import logging

import torch

from poxm_core.accel.graph import GraphedSteps, graphs_enabled
from poxm_core.config.schema import SweepConfig
from poxm_core.common.errors import DivergedError
from poxm_core.methods import HeadContext
from poxm_core.methods.base import reward_shift
from poxm_core.policy.network import LinearPolicy, NetworkPolicy
from poxm_core.prepare.prepared import Prepared
from poxm_core.training.batched import BatchedHeads, assign
from poxm_core.training.batches import TrainData
from poxm_core.training.capture_guard import CAPTURE_GUARD
from poxm_core.common.seeds import stable_seed
from poxm_core.training.spec import TrialSpec
from poxm_core.training.step import TrainStep
from poxm_core.training.trial_setup import TrialHead

__all__ = ["train_epoch", "train_data_for", "wants_batched", "engine_heads"]

_log = logging.getLogger(__name__)

_SAID_NOT_GRAPHED: set[str] = set()     # methods already named in the log as not graph-safe


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
    ctxs = _contexts(cfg, spec, prepared, trainable, epoch)
    labels = any(h.method.needs_labels() for h in trainable)
    needs_reward = any(h.method.needs_reward_model for h in trainable)
    # float64 sums on the device, as the host loop summed Python floats (values are float32 losses)
    total = torch.zeros(len(trainable), dtype=torch.float64, device=device)
    rows, bags = data.epoch(perm_t) if trainable else (None, None)
    B = cfg.training.batch_size
    start = 0
    engine = _engine(cfg, data, trainable, device)
    seq = trainable if engine is None else [h for h in trainable if all(h is not e for e in engine.heads)]
    _rebind(engine, data)
    graphed = bool(trainable) and n >= B and _graphable(trainable, labels or needs_reward, device, engine, seq,
                                                        reward, data)
    # captured: the engine's heads and the others, unless those share no stack with the engine: then they
    # train in an eager pass of their own (e_seq)
    split = graphed and engine is not None and bool(seq) and _separable(engine, seq)
    g_seq, e_seq = ([], seq) if split else (seq, [])
    grouped = (engine.heads if engine is not None else []) + g_seq
    g_stacks, e_stacks = _stacks_of(grouped), _stacks_of(e_seq)
    # what the batches below `start` must carry: only what the heads of the separate pass read
    e_labels = any(h.method.needs_labels() for h in e_seq)
    e_reward = any(h.method.needs_reward_model for h in e_seq)
    side = None
    if split and device.type == "cuda":     # the separate pass beside the replays (_side_stream says why)
        side, main = _side_stream(data, device), torch.cuda.current_stream(device)
        side.wait_stream(main)
    if graphed:
        runner = _graph_runner(data, trainable, grouped, g_seq, g_stacks, engine, ctxs, B, reward)
        start = runner.run_epoch(rows, bags, total[:len(grouped)], ctxs)
    # the rest eagerly: the graphed group's last, shorter batch; heads outside it (their own parameters
    # and stacks, so training them in a pass of their own is the same arithmetic) on every batch
    step = TrainStep(g_seq, g_stacks, engine, ctxs)
    rest = e_step = TrainStep(e_seq, e_stacks, None, ctxs) if e_seq else None
    k = len(step.order)
    if side is not None:
        _side_pass(side, main, rest, data, (rows, perm, bags), e_labels, reward if e_reward else None, total[k:], B)
        rest = None
    for a in range(start if rest is None else 0, n if trainable else 0, B):
        b = min(n, a + B)
        batch = data.batch(rows, perm, a, b, bags, labels if a >= start else e_labels)
        rhat = _reward_fn(reward, batch) if needs_reward and (a >= start or e_reward) else None
        if a >= start:
            total[:k] += step(batch, rhat).double() * (b - a)
        if rest is not None:
            total[k:] += rest(batch, rhat).double() * (b - a)
    if side is not None:
        main.wait_stream(side)
    return _mean_losses(step.order + (e_step.order if e_step is not None else []), total, n, epoch, trainable)


def _contexts(cfg: SweepConfig, spec: TrialSpec, prepared: Prepared, trainable: list[TrialHead],
              epoch: int) -> dict[str, HeadContext]:
    """Each training head's context for this epoch: its p, lambda, Monte-Carlo size, negatives' stream."""
    return {h.key: HeadContext(h.spec.p, h.spec.lam, h.mc,
                               torch.Generator().manual_seed(stable_seed(spec.seed, h.key, "negatives", epoch)),
                               prepared.n_labels, shift=reward_shift(h.spec.lam, cfg.training.translation))
            for h in trainable}


def _rebind(engine, data: TrainData) -> None:
    """Bind the engine again when a head's tensors were replaced (not by a load: that copies), and drop the
    captured steps that read the old tensors."""
    if engine is not None and not engine.bound():
        engine.bind()
        for k in [k for k in data.graphs if k[:2] == ("graph", True)]:
            del data.graphs[k]


def _side_stream(data: TrainData, device: torch.device):
    """The CUDA stream the separate eager pass runs on, made once per trial's data. The separate pass is
    host-bound (eager launches, a sync inside EmbeddingBag's backward) while the graph's replays keep the
    GPU busy: on a stream of its own it runs beside them instead of after them. It shares no tensor that
    either side writes (its own heads and stacks; `total` in disjoint slices) and reads only what is ready
    now (the epoch's order, sparse input and `total`), so it waits for this point, not for the replays
    queued next; the main stream waits for it before the losses are read."""
    side = data.graphs.get("side_stream")
    if side is None:
        side = data.graphs["side_stream"] = torch.cuda.Stream(device=device)
    return side


def _side_pass(side, main, rest: TrainStep, data: TrainData, order: tuple, labels: bool,
               reward: TrialHead | None, total: torch.Tensor, B: int) -> None:
    """The separate eager pass over every batch, on the side stream, its loss sums into `total` (its slice)."""
    rows, perm, bags = order
    if reward is not None:     # the reward model it reads is the DM head's, which may train in the graph
        side.wait_stream(main)
    n = len(perm)
    with torch.cuda.stream(side):
        for a in range(0, n, B):
            b = min(n, a + B)
            batch = data.batch(rows, perm, a, b, bags, labels)
            total += rest(batch, _reward_fn(reward, batch) if reward is not None else None).double() * (b - a)


def _graph_runner(data: TrainData, trainable, grouped, g_seq, g_stacks, engine, ctxs, B: int,
                  reward: TrialHead | None) -> GraphedSteps:
    """The captured steps of this set of heads, made (and captured) once and replayed every epoch after."""
    key = ("graph", engine is not None) + tuple(h.key for h in trainable)
    runner = data.graphs.get(key)
    if runner is None:
        runner = data.graphs[key] = GraphedSteps(
            data, TrainStep(g_seq, g_stacks, engine, ctxs, static=True), B,
            rhat_of=(lambda batch: _reward_fn(reward, batch))
            if any(h.method.needs_reward_model for h in grouped) else None,
            labels=any(h.method.needs_labels() for h in grouped),
            rhat_reads_sparse=reward is not None and reward.policy is not None and reward.policy.reads_sparse,
            guard=CAPTURE_GUARD.capture)
    return runner


def _mean_losses(order: list[TrialHead], total: torch.Tensor, n: int, epoch: int,
                 trainable: list[TrialHead]) -> dict[str, float]:
    """{head key: mean loss over the epoch's n rows}, in `trainable`'s order; a non-finite sum stops the trial."""
    values = total.tolist()
    for h, v in zip(order, values):
        if v != v or v in (float("inf"), float("-inf")):
            raise DivergedError(f"{h.key}: non-finite training loss in epoch {epoch} (lower its lr?)")
    by_key = {h.key: v / n for h, v in zip(order, values)}
    return {h.key: by_key[h.key] for h in trainable}


def wants_batched(cfg: SweepConfig, device: torch.device) -> bool:
    """training.batched_heads resolved for `device`: 'auto' = on for CUDA, off for CPU."""
    mode = cfg.training.batched_heads
    return device.type == "cuda" if mode == "auto" else bool(mode)


def _engine(cfg: SweepConfig, data: TrainData, trainable: list[TrialHead], device: torch.device):
    """The trial's `BatchedHeads` for this group of heads (built once, kept in `data`), or None."""
    if not trainable or not wants_batched(cfg, device):
        return None
    key = ("batched",) + tuple(h.key for h in trainable)
    if key not in data.graphs:
        chosen, rest = assign(trainable)
        data.graphs[key] = BatchedHeads(chosen) if chosen else None
        _log.info("batched heads: %s; one by one: %s", ", ".join(h.key for h in chosen) or "none",
                  ", ".join(h.key for h in rest) or "none")
    return data.graphs[key]


def engine_heads(data) -> dict[str, list[str]]:
    """The heads the batched engine trained and those that went one by one, read from the engines the
    epochs built and kept in `data.graphs` (key ('batched', *the group's head keys): its BatchedHeads, or
    None when no head of the group could join)."""
    batched, seen = [], []
    for key, engine in data.graphs.items():
        if isinstance(key, tuple) and key[:1] == ("batched",):
            seen += [k for k in key[1:] if k not in seen]
            batched += [h.key for h in (engine.heads if engine is not None else []) if h.key not in batched]
    return {"batched": batched, "sequential": [k for k in seen if k not in batched]}


def _stacks_of(heads: list[TrialHead]) -> list:
    """The distinct shared network stacks of `heads`, in order."""
    return list({id(st): st for st in (h.policy.shared_stack for h in heads) if st is not None}.values())


def _separable(engine: BatchedHeads, seq: list[TrialHead]) -> bool:
    """The heads outside the engine share no network stack with it (e.g. the end-to-end skyline's own
    layers): they can then train in an eager pass of their own over the same batches."""
    ours = {id(st) for st in _stacks_of(engine.heads)}
    return all(h.policy.shared_stack is None or id(h.policy.shared_stack) not in ours for h in seq)


def _graphable(trainable: list[TrialHead], reads_more: bool, device: torch.device, engine=None, seq=(),
               reward: TrialHead | None = None, data: TrainData | None = None) -> bool:
    if not graphs_enabled(device):
        return False
    if engine is not None:     # the batched step: every head in it, or the others in a pass of their own
        if not engine.capturable() or (seq and not _separable(engine, seq)):
            return False
        # a reward model read inside the graph must compute its features sync-free (a stack's or z)
        if any(h.method.needs_reward_model for h in engine.heads) and (
                reward is None or type(reward.policy) not in (NetworkPolicy, LinearPolicy)):
            return False
        return (not any(h.method.needs_labels() for h in engine.heads)
                or (data is not None and data.labels_padded() is not None))
    # one by one, a head's scorer gathers rows (no every-label logits in the static form) and its draws
    # come from its CPU generator step by step: those heads train eagerly
    if reads_more or any(h.method.draws(h.mc) or h.method.scores_every_label(h.mc) for h in trainable):
        return False
    unsafe = sorted({h.method.name for h in trainable if not h.method.graph_safe})
    for name in unsafe:
        if name not in _SAID_NOT_GRAPHED:
            _SAID_NOT_GRAPHED.add(name)
            _log.warning("method '%s' does not declare graph_safe: trials training it run their steps "
                         "without a CUDA graph (slower on a GPU)", name)
    return not unsafe and all(h.policy.dense_opt is None
                              and (h.policy.shared_stack is not None or not h.policy.reads_sparse) for h in trainable)
