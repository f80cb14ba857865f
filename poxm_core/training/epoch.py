"""One training epoch of a group of heads on the same seeded batches (docs/training.md).

The fit log is shuffled by a generator seeded from (seed, epoch) and cut into mini-batches; each batch
is given to every trainable head (its own policy and optimisers). Per batch: one joint forward of the
heads' network stacks, each head's loss on its own block of features, one backward of their sum (the
blocks are disjoint: each head gets its own gradient), then each head's row-sparse output step and
one step per stack.

The batches come from `TrainData` (device-resident, batches.py). The losses are summed on the device
and read once at the end of the epoch (no host synchronisation per batch for them); a non-finite loss
is reported then, naming the head.

CUDA graphs (`_GraphedSteps`): on a GPU a step is hundreds of small kernels, and launching them from
Python, not the GPU, set the pace (docs/performance.md: 344 kernels and ~9 ms of host time
per batch for 2 ms of GPU work). Where every trained head is graph-safe (its method declares
`graph_safe`; no dense optimiser of a policy's own; no labels or reward model read) and the deterministic
mode is off, the epoch's full batches run as replays of ONE captured step: the batch is gathered on
the device from the epoch's order by a batch counter that the graph advances itself, the sparse input
padded to a fixed number of entries (weight 0: adds exactly 0), the output layers and the stack in
static mode (`RowScorer(static=True)`, `RowAdam.step_static`, `NetworkStack.step_static`: no host
synchronisation, bias corrections from device step counters). The same arithmetic as the eager loop;
only the float summation order of atomic adds differs (as between two CUDA runs anyway). The last,
shorter batch runs eagerly. POXM_CUDA_GRAPHS=0 turns it off; a failed capture falls back to the static
steps without a graph (with a warning).
"""
from __future__ import annotations

import logging
import os
import warnings

import numpy as np
import torch

from poxm_core.config import SweepConfig
from poxm_core.methods import Batch, HeadContext
from poxm_core.methods.base import reward_shift
from poxm_core.prepared import Prepared
from poxm_core.training.batched import BatchedHeads, assign
from poxm_core.training.batches import TrainData
from poxm_core.policy.heads import RowScorer
from poxm_core.seeds import stable_seed
from poxm_core.training.spec import TrialSpec
from poxm_core.training.trial_setup import TrialHead

__all__ = ["train_epoch", "train_data_for", "wants_batched"]

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
    start = 0
    engine = _engine(cfg, data, trainable, device)
    seq = trainable if engine is None else [h for h in trainable if all(h is not e for e in engine.heads)]
    if engine is not None and not engine.bound():   # a head's tensors were replaced (not by a load: that copies)
        engine.bind()
        for k in [k for k in data.graphs if k[:2] == ("graph", True)]:
            del data.graphs[k]                           # a captured step read the old tensors
    if trainable and n >= B and _graphable(trainable, labels or needs_reward, device, engine, seq):
        key = ("graph", engine is not None) + tuple(h.key for h in trainable)
        runner = data.graphs.get(key)
        if runner is None:
            runner = data.graphs[key] = _GraphedSteps(data, trainable if engine is None else engine.heads, stacks,
                                                      ctxs, B, engine)
        start = runner.run_epoch(rows, bags, total)
    for a in range(start, n if trainable else 0, B):
        b = min(n, a + B)
        batch = data.batch(rows, perm, a, b, bags, labels)
        rhat = _reward_fn(reward, batch) if needs_reward else None
        stacked = {id(st): st(batch.z, batch.bag) for st in stacks}
        scorers, losses = [], []
        if engine is not None:
            losses.append(engine.loss(batch, stacked, ctxs, rhat))
        for h in seq:
            ctx = ctxs[h.key]
            if h.method.needs_reward_model:
                ctx.reward = rhat
            pol = h.policy
            feats = pol.from_stacked(stacked[id(pol.stack[0])]) if hasattr(pol, "from_stacked") else \
                pol.features(batch.z, batch.bag)
            scorer = RowScorer(pol.out, feats)
            scorers.append(scorer)
            losses.append(h.method.loss(scorer, batch, ctx).view(1))
        stacked_losses = torch.cat(losses)
        total += stacked_losses.detach().double() * (b - a)
        stacked_losses.sum().backward()
        if engine is not None:
            engine.step()
        for h, scorer in zip(seq, scorers):
            h.policy.step(scorer)
        for st in stacks:
            st.step()
    values = total.tolist()
    order = trainable if engine is None else engine.heads + seq
    for h, v in zip(order, values):
        if v != v or v in (float("inf"), float("-inf")):
            raise FloatingPointError(f"{h.key}: non-finite training loss at epoch {epoch} (lower its lr?)")
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
        info = data.__dict__.setdefault("engine_heads", {"batched": [], "sequential": []})
        info["batched"] += [h.key for h in chosen if h.key not in info["batched"]]
        info["sequential"] += [h.key for h in rest if h.key not in info["sequential"]]
    return data.graphs[key]


def _graphable(trainable: list[TrialHead], reads_more: bool, device: torch.device, engine=None, seq=()) -> bool:
    if device.type != "cuda" or os.environ.get("POXM_CUDA_GRAPHS", "1") == "0" or reads_more:
        return False
    if torch.are_deterministic_algorithms_enabled():
        return False
    unsafe = sorted({h.method.name for h in trainable if not h.method.graph_safe})
    for name in unsafe:
        if name not in _SAID_NOT_GRAPHED:
            _SAID_NOT_GRAPHED.add(name)
            _log.warning("method '%s' does not declare graph_safe: trials training it run their steps "
                         "without a CUDA graph (slower on a GPU)", name)
    if engine is not None:     # the batched step: every head in it, none that reads labels or a reward model
        return not seq and all(k in ("phi", "logged", "full") for k in engine.kinds)
    return not unsafe and all(h.policy.dense_opt is None
                              and (hasattr(h.policy, "from_stacked") or not h.policy.reads_sparse) for h in trainable)


class _GraphedSteps:
    """The full batches of each epoch as replays of one CUDA graph of a training step (module doc)."""

    WARMUP = 2     # eager steps (on a side stream) before the capture, as torch.cuda.graph asks

    def __init__(self, data: TrainData, trainable: list[TrialHead], stacks: list, ctxs: dict, B: int,
                 engine=None) -> None:
        dev = data.device
        self.data, self.heads, self.stacks, self.ctxs, self.B = data, trainable, stacks, ctxs, B
        self.engine = engine       # a BatchedHeads (training/batched.py): its static step instead of head by head
        self.sparse = bool(stacks)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.broken = False
        self.cap = 0
        self.i = torch.zeros((), dtype=torch.int64, device=dev)              # the batch counter
        self.total = torch.zeros(len(trainable), dtype=torch.float64, device=dev)
        self.arB = torch.arange(B, device=dev)
        self.rows_ep = torch.empty(data.n, dtype=torch.int64, device=dev)
        self.ind_ep = self.w_ep = self.ptr_ep = self.arC = None

    def _buffers(self, bags) -> None:
        """Copy the epoch's order and sparse input into the static buffers; (re)size the padding."""
        if not self.sparse:
            return
        full = self.data.n // self.B
        ptr = bags.ptr
        need = int((ptr[self.B:(full * self.B) + 1:self.B] - ptr[0:full * self.B:self.B]).max())
        total = int(ptr[-1])
        dev = self.data.device
        if self.ind_ep is None or self.ind_ep.numel() != total:
            self.ind_ep = torch.empty(total, dtype=bags.indices.dtype, device=dev)
            self.w_ep = torch.empty(total, dtype=bags.weights.dtype, device=dev)
            self.ptr_ep = torch.empty(self.data.n + 1, dtype=torch.int64, device=dev)
            self.graph = None
        if need > self.cap:
            self.cap = int(np.ceil(need * 1.05 / 1024) * 1024)
            self.arC = torch.arange(self.cap, device=dev)
            self.graph = None
        self.ind_ep.copy_(bags.indices)
        self.w_ep.copy_(bags.weights)
        self.ptr_ep[:-1].copy_(bags.offsets)
        self.ptr_ep[-1] = total

    def _step(self) -> None:
        """One full batch (number self.i), forward, backward, every optimiser; then self.i += 1."""
        d, B = self.data, self.B
        a = self.i * B
        r = self.rows_ep.index_select(0, a + self.arB)
        inst = d.instance.index_select(0, r)
        bag = None
        if self.sparse:
            lo = self.ptr_ep.index_select(0, a.view(1))
            hi = self.ptr_ep.index_select(0, (a + B).view(1))
            pos = lo + self.arC
            real = pos < hi
            pos = pos.clamp(max=self.ind_ep.numel() - 1)
            idx = torch.where(real, self.ind_ep.index_select(0, pos), torch.zeros((), dtype=self.ind_ep.dtype,
                                                                                  device=d.device))
            w = torch.where(real, self.w_ep.index_select(0, pos), torch.zeros((), dtype=self.w_ep.dtype, device=d.device))
            off = self.ptr_ep.index_select(0, a + self.arB) - lo
            bag = (idx, off, w, torch.searchsorted(off, self.arC, right=True) - 1)
        batch = Batch(z=d.Z.index_select(0, inst), actions=d.actions.index_select(0, r),
                      cand_pos=d.cand_pos.index_select(0, r), q=d.q.index_select(0, r),
                      rewards=d.rewards.index_select(0, r), cand=d.cand.index_select(0, inst),
                      inv_prop_actions=d.inv_prop_actions.index_select(0, r), n_labels=d.prepared.n_labels,
                      labels=None, bag=bag[:3] if bag is not None else None)
        stacked = {id(st): st(batch.z, bag, static=True) for st in self.stacks}
        if self.engine is not None:
            stacked_losses = self.engine.loss(batch, stacked, self.ctxs, None, static=True)
            self.total.add_(stacked_losses.detach().double() * B)
            stacked_losses.sum().backward()
            self.engine.step_static()
            for st in self.stacks:
                st.step_static()
            self.i.add_(1)
            return
        scorers, losses, shared = [], [], {}
        for h in self.heads:
            pol = h.policy
            feats = pol.from_stacked(stacked[id(pol.stack[0])]) if hasattr(pol, "from_stacked") else \
                pol.features(batch.z, None)
            scorer = RowScorer(pol.out, feats, static=True, shared=shared)
            scorers.append(scorer)
            losses.append(h.method.loss(scorer, batch, self.ctxs[h.key]))
        stacked_losses = torch.stack(losses)
        self.total.add_(stacked_losses.detach().double() * B)
        stacked_losses.sum().backward()
        for h, scorer in zip(self.heads, scorers):
            h.policy.out_opt.step_static(h.policy.out, scorer)
        for st in self.stacks:
            st.step_static()
        self.i.add_(1)

    def run_epoch(self, rows: torch.Tensor, bags, total: torch.Tensor) -> int:
        """Train the epoch's full batches; adds their losses to `total`; returns where the eager loop goes on."""
        full = self.data.n // self.B
        if self.rows_ep.numel() != rows.numel():      # the log's size changed (benchmarks cut it): recapture
            self.rows_ep = torch.empty_like(rows)
            self.graph = None
        self.rows_ep.copy_(rows)
        self._buffers(bags)
        self.i.zero_()
        self.total.zero_()
        for h in self.heads:
            h.policy.out_opt.sync_counter()
        if self.engine is not None:
            self.engine.sync_counter()
        for st in self.stacks:
            st.sync_counter()
        done = 0
        if self.data.device.type == "cuda" and self.graph is None and not self.broken:
            s = torch.cuda.Stream(device=self.data.device)
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(min(self.WARMUP, full)):
                    self._step()
                    done += 1
            torch.cuda.current_stream().wait_stream(s)
            if done < full:
                try:
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        self._step()
                    self.graph = g
                except Exception as exc:   # noqa: BLE001  (fall back to the same steps without a graph)
                    self.broken = True
                    warnings.warn(f"CUDA graph capture failed ({type(exc).__name__}: {exc}); training "
                                  "without a graph", RuntimeWarning, stacklevel=2)
        for _ in range(done, full):
            if self.graph is not None:
                self.graph.replay()
            else:
                self._step()
        for h in self.heads:
            h.policy.out_opt.step_count += full
        for st in self.stacks:
            st.step_count += full
        total += self.total
        return full * self.B
