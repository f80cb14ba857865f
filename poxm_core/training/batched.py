"""The heads of a trial trained as ONE batched step (`training.batched_heads`; docs/training.md).

Run one after another, H heads cost H scorings (unique, gather, product), H losses and H optimiser
steps per batch: thousands of small operations, and on a GPU thousands of kernel launches. The heads
share the batch (one shuffle per epoch, seeded by (seed, epoch)), and their parameters are disjoint,
so the same step can be written over a head dimension:

- Output layers: the heads' W, b and Adam moments are stacked into (H, L, h) / (H, L) tensors; each
  head's `HeadParams` and `RowAdam` fields become views of its slice (evaluation and checkpoints read
  them as before). A label y of head k is row k L + y of the flattened (H L, h) table.
- Groups: heads whose method says they ask for the same ids (`Method.group_key`: the same method, p
  and options) form a group; they differ only in lambda (a (G, 1, 1) shift vector) and learning rate.
- Scoring: every group of a sparse method asks its method for its ids (`Method.ids`: POXM's Phi^p(x),
  DM's logged actions, ...) and the step's draws (`Method.draws`: the sampled softmax's negatives,
  drawn from each head's own generator as its plain step draws them), offset by k L; ONE unique over
  all of them gives the rows every head touches (per head exactly the rows its own step would touch:
  the sets are disjoint by the offset), one gather, one batched product per group (the draws, shared
  by the batch's instances: one (B, h) x (h, k) product a head instead of B k gathered rows). Groups
  whose method reads every label (`Method.scores_every_label`) get (G, B, L) logits from one batched
  matmul of their block.
- Losses: the method's own `loss(logits, batch, ctx)` once per group, (G,) (methods/base.py: every
  loss is written over a head axis); the step minimises the SUM of the heads' losses, whose gradient
  with respect to each head's parameters is that head's own gradient.
- Optimiser: one row-Adam step over the union of the touched rows (each row with its head's rate and
  bias correction) and one dense Adam step over the full-softmax block: elementwise, so H independent
  Adams, the "lazy" row Adam of `policy.heads.RowAdam` (untouched rows bit-identical).

So each head sees the same batches in the same order and takes the same steps as in the sequential
loop; only the float summation order of a few reductions differs (tests/poxm_core/training/test_batched_heads.py checks
the parameters against the sequential engine's after several steps, every supported method).

Every trained method is supported, a plugin's included, on policies 'network' (heads of one
`NetworkStack`) and 'linear'. Other heads (a policy with its own dense optimiser, such as the
end-to-end skyline, or a plugin policy) train in the same batches through the sequential path;
`assign` says which is which. In the CUDA-graph loop the sampled softmax's negatives
are drawn for the whole epoch at its start (`begin_epoch`): the same numbers as step by step.
"""
from __future__ import annotations

import torch

from poxm_core.methods import Batch, HeadContext
from poxm_core.optim.adam import adam_update_, row_adam_update_
from poxm_core.accel.static import static_unique
from poxm_core.accel.triton_adam import fused_slot_rows_adam
from poxm_core.policy.network import LinearPolicy, NetworkPolicy

__all__ = ["BatchedHeads", "assign"]

_CPU_ROWS = 4096     # rows per chunk of the row-Adam step on a CPU


def _batchable(h) -> bool:
    """A trained head whose output layer is a plain row-Adam head on shared features."""
    return (h.method.trains and h.policy is not None and h.policy.dense_opt is None
            and type(h.policy) in (NetworkPolicy, LinearPolicy))


def _every(h) -> bool:
    return h.method.scores_every_label(h.mc)


def _source(h):
    """What a head's features are read from: its network stack, or the frozen features (linear)."""
    return ("stack", id(h.policy.stack[0])) if isinstance(h.policy, NetworkPolicy) else ("z",)


def assign(trainable: list) -> tuple[list, list]:
    """(batched heads, sequential heads): the batchable heads of the most common feature source are batched
    (they must share one feature tensor and one width), with the same Adam settings; the rest run one by one."""
    ok = [h for h in trainable if _batchable(h)]
    if not ok:
        return [], list(trainable)
    sources: dict = {}
    for h in ok:
        sources.setdefault(_source(h), []).append(h)
    best = max(sources.values(), key=len)
    o = best[0].policy.out_opt
    chosen = [h for h in best if (h.policy.out_opt.betas, h.policy.out_opt.eps, h.policy.out_opt.weight_decay)
              == (o.betas, o.eps, o.weight_decay) and tuple(h.policy.out.W.shape) == tuple(best[0].policy.out.W.shape)]
    ids = {id(h) for h in chosen}
    return chosen, [h for h in trainable if id(h) not in ids]


class _Group:
    """Heads [a, b) of the engine that share one loss evaluation (same `Method.group_key` and options)."""

    def __init__(self, heads: list, a: int, b: int) -> None:
        h = heads[a]
        self.a, self.b, self.G = a, b, b - a
        self.method, self.mc, self.p = h.method, h.mc, h.spec.p
        self.every = _every(h)
        self.k = int(h.method.draws(h.mc))
        self.shift = None        # (G, 1, 1) tensor of the heads' reward translations, made on first use

    def key(self, h) -> tuple:
        return (h.method.group_key(h.mc, h.spec.p), h.mc)

    def context(self, ctxs: dict, heads: list, L: int, dtype, device, rhat, draws) -> HeadContext:
        if self.shift is None or self.shift.dtype != dtype:
            vals = [ctxs[h.key].shift for h in heads[self.a:self.b]]
            self.shift = None if vals[0] is None else torch.tensor(vals, dtype=dtype, device=device).view(-1, 1, 1)
        return HeadContext(p=self.p, lam=None, mc=self.mc, gen=None, n_labels=L, shift=self.shift, reward=rhat,
                           draws=draws)


class BatchedHeads:
    """One batched training step of several heads (module doc). `loss(batch, stacked, rhat)` returns the
    heads' losses (H,) in `self.heads` order, keeping what `step()` needs after the backward."""

    def __init__(self, heads: list) -> None:
        if not heads:
            raise ValueError("BatchedHeads: no heads")
        # sparse methods first (their rows go through one unique), every-label methods last; within each,
        # heads of one group next to each other
        keyed = sorted(enumerate(heads), key=lambda t: (_every(t[1]), t[1].method.name, t[1].spec.p or 0,
                                                         int(t[1].method.draws(t[1].mc)), t[0]))
        self.heads = [h for _, h in keyed]
        self.H = len(self.heads)
        W0 = self.heads[0].policy.out.W
        self.L, self.h = int(W0.shape[0]), int(W0.shape[1])
        self.device = W0.device
        self.Hs = sum(not _every(h) for h in self.heads)          # heads [0, Hs) sparse, [Hs, H) every label
        self.groups: list[_Group] = []
        for k, h in enumerate(self.heads):
            g = self.groups[-1] if self.groups else None
            if g is not None and g.key(self.heads[g.a]) == g.key(h):
                self.groups[-1] = _Group(self.heads, g.a, k + 1)
            else:
                self.groups.append(_Group(self.heads, k, k + 1))
        src = _source(self.heads[0])
        self.stack = self.heads[0].policy.stack[0] if src[0] == "stack" else None
        if self.stack is not None:
            self.stack_idx = torch.tensor([h.policy.index for h in self.heads], dtype=torch.int64, device=self.device)
        opt = self.heads[0].policy.out_opt
        self.betas, self.eps, self.wd = opt.betas, opt.eps, opt.weight_decay
        dev = self.device
        # per-group constants on the device (made once: nothing is copied from the host inside a step)
        self._offs = {g.a: (torch.arange(g.a, g.b, device=dev) * self.L).view(-1, 1, 1) for g in self.groups}
        self._negs: dict[int, torch.Tensor] = {}
        self._neg_ep: dict[int, torch.Tensor] = {}     # static loop: the epoch's negatives (steps, G, k)
        self._counter: torch.Tensor | None = None
        self.t: torch.Tensor | None = None
        self.bind()

    def capturable(self) -> bool:
        """Every head's loss is sync-free (`Method.graph_safe`; the CUDA-graph loop): the engine supplies
        the skyline's labels as a padded table of ids, DR-POXM's rhat computed in the step and the draws
        for the whole epoch beforehand (`begin_epoch`)."""
        return all(h.method.graph_safe for h in self.heads)

    # ---- parameters: one stacked tensor per field, each head's fields views of its slice -------------
    def bound(self) -> bool:
        return all(h.policy.out.W is self._views[k][0] for k, h in enumerate(self.heads))

    @torch.no_grad()
    def bind(self) -> None:
        """Stack the heads' W, b and moments (copies of their current values) and point the heads at views.
        One field at a time, so that the heads' own tensors are freed as it goes (peak: one field twice)."""
        outs = [h.policy.out for h in self.heads]
        opts = [h.policy.out_opt for h in self.heads]
        for name, objs, field in (("W", outs, "W"), ("b", outs, "b"), ("mW", opts, "m_W"), ("vW", opts, "v_W"),
                                  ("mb", opts, "m_b"), ("vb", opts, "v_b")):
            stacked = torch.stack([getattr(o, field) for o in objs])
            setattr(self, name, stacked)
            for k, o in enumerate(objs):
                setattr(o, field, stacked[k])
        self._views = [(o.W,) for o in outs]
        # the heads' step counters: one (H,) tensor on the device, each head's `RowAdam.t` a view of it
        self.t = torch.stack([o.t.to(torch.float64) for o in opts])
        for k, o in enumerate(opts):
            o.t = self.t[k]
        # per-head settings as vectors over the head dimension
        self.lr = [float(a.lr) for a in opts]
        self.lr_t = torch.tensor(self.lr, dtype=torch.float64, device=self.device)

    # ---- forward -------------------------------------------------------------------------------------
    def features(self, batch: Batch, stacked: dict) -> torch.Tensor:
        """(H, B, h) features of every head (gradient to the stack kept)."""
        if self.stack is None:
            return batch.z.unsqueeze(0).expand(self.H, *batch.z.shape)
        S = stacked[id(self.stack)]
        B = S.shape[0]
        return S.view(B, self.stack.H, self.stack.h).index_select(1, self.stack_idx).transpose(0, 1)

    def loss(self, batch: Batch, stacked: dict, ctxs: dict[str, HeadContext], rhat=None,
             static: bool = False) -> torch.Tensor:
        """The heads' losses (H,). static: slot mode, the rows from `static_unique` (fixed shape, no host
        synchronisation: the CUDA-graph loop); `step` then writes them back by slot."""
        feats = self.features(batch, stacked)
        logits_of = self._sparse_logits(batch, feats, ctxs, rhat, static)
        logits_of.update(self._every_label_logits(feats))
        out: list[torch.Tensor] = []
        for g in self.groups:
            ctx = g.context(ctxs, self.heads, self.L, batch.rewards.dtype, self.device, rhat, self._negs.get(g.a))
            out.append(g.method.loss(logits_of[g.a], batch, ctx))
        return torch.cat(out)

    def _sparse_logits(self, batch: Batch, feats: torch.Tensor, ctxs: dict[str, HeadContext], rhat,
                       static: bool) -> dict[int, torch.Tensor]:
        """(G, B, m [+ k]) logits of the sparse heads' ids (and their negative draws), by group start: one
        unique over every head's ids, offset by k L; the rows become the leaves `step` updates."""
        B = batch.size
        logits_of: dict[int, torch.Tensor] = {}
        self._rows = self._leaf_W = self._leaf_b = self._src = None
        if self.Hs:
            gids, shapes = [], []
            for g in self.groups:
                if g.every:
                    continue
                ids = g.method.ids(batch, g.context(ctxs, self.heads, self.L, batch.rewards.dtype, self.device, rhat,
                                                    None))
                gids.append((ids.unsqueeze(0) + self._offs[g.a]).reshape(-1))
                shapes.append((g, ids.shape[1]))
                if g.k:     # the draws: (G, k) rows, shared by the batch's instances
                    neg = self._epoch_negatives(g.a) if static else self._draw_negatives(g, ctxs, ids.device)
                    gids.append((neg + self._offs[g.a].view(-1, 1)).reshape(-1))
            flat = torch.cat(gids)
            if static:
                rows, inv, self._src = static_unique(flat)
            else:
                rows, inv = torch.unique(flat, return_inverse=True)
            Wf, bf = self.W.view(-1, self.h), self.b.view(-1)
            self._rows = rows
            self._leaf_W = Wf.index_select(0, rows).requires_grad_(True)
            self._leaf_b = bf.index_select(0, rows).requires_grad_(True)
            start = 0
            for g, m in shapes:
                a, b, G = g.a, g.b, g.G
                n = G * B * m
                iv = inv[start:start + n]
                start += n
                Wg = self._leaf_W.index_select(0, iv).view(G * B, m, self.h)
                z = feats[a:b].reshape(G * B, self.h)
                # B*m dot products of length h: a batched matvec on the GPU; on a CPU, where bmm runs
                # G*B tiny products, the elementwise product and sum (faster there; docs/performance.md)
                dots = (Wg * z.unsqueeze(1)).sum(2) if z.device.type == "cpu" else torch.bmm(Wg, z.unsqueeze(2)).squeeze(2)
                logits_of[a] = (dots + self._leaf_b.index_select(0, iv).view(G * B, m)).view(G, B, m)
                if g.k:
                    # the draws' logits: one (B, h) x (h, k) product a head, not B k gathered rows
                    ivn = inv[start:start + G * g.k]
                    start += G * g.k
                    Wn = self._leaf_W.index_select(0, ivn).view(G, g.k, self.h)
                    neg = torch.bmm(feats[a:b], Wn.transpose(1, 2)) + self._leaf_b.index_select(0, ivn).view(G, 1, g.k)
                    logits_of[a] = torch.cat([logits_of[a], neg], dim=2)
        return logits_of

    def _every_label_logits(self, feats: torch.Tensor) -> dict[int, torch.Tensor]:
        """(G, B, L) logits of the every-label heads' blocks, by group start; their weights become leaves."""
        logits_of: dict[int, torch.Tensor] = {}
        self._full_W = self._full_b = None
        if self.Hs < self.H:
            self._full_W = self.W[self.Hs:].detach().requires_grad_(True)
            self._full_b = self.b[self.Hs:].detach().requires_grad_(True)
            for g in self.groups:
                if not g.every:
                    continue
                a, b = g.a - self.Hs, g.b - self.Hs
                logits_of[g.a] = torch.bmm(feats[g.a:g.b], self._full_W[a:b].transpose(1, 2)) + self._full_b[a:b].unsqueeze(1)
        return logits_of

    def _draw_negatives(self, g: _Group, ctxs, device) -> torch.Tensor:
        """(G, k) labels drawn uniformly with replacement for each head of the group, from the head's own
        generator, exactly the draws of its plain step (`Method.head_loss`); kept for the loss."""
        self._negs[g.a] = neg = self._draw(g, ctxs).to(device)
        return neg

    def _draw(self, g: _Group, ctxs, *steps: int) -> torch.Tensor:
        """(*steps, G, k) uniform labels: each head of the group's draws from its own generator."""
        return torch.stack([torch.randint(self.L, (*steps, g.k), generator=ctxs[h.key].gen)
                            for h in self.heads[g.a:g.b]], dim=len(steps))

    def begin_epoch(self, full: int, counter: torch.Tensor, ctxs: dict[str, HeadContext]) -> bool:
        """The static loop's epoch of `full` batches: every sampled-softmax head's negatives for all of them
        drawn now from its generator (torch's CPU generator gives (n, k) draws at once exactly as n draws of
        k, so the numbers and the generator's state after the epoch are the plain step's; a test checks
        it), kept on the device; step i reads row `counter` (the loop's batch counter). True when a
        buffer was (re)allocated: a captured graph must be captured again."""
        changed = False
        self._counter = counter
        for g in self.groups:
            if not g.k:
                continue
            a = g.a
            tab = self._draw(g, ctxs, full)
            dt = torch.int32 if self.L < 2 ** 31 else torch.int64     # half the memory: 16 heads x 1,724 steps x 1,024
            buf = self._neg_ep.get(a)
            if buf is None or tuple(buf.shape) != tuple(tab.shape):
                self._neg_ep[a] = buf = torch.empty(tab.shape, dtype=dt, device=self.device)
                changed = True
            buf.copy_(tab)
        return changed

    def _epoch_negatives(self, a: int) -> torch.Tensor:
        """(G, k) negatives of the static step number `self._counter` (see `begin_epoch`)."""
        tab = self._neg_ep[a]
        self._negs[a] = neg = tab.index_select(0, self._counter.view(1)).view(tab.shape[1], tab.shape[2]).long()
        return neg

    # ---- optimiser -----------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self) -> None:
        """One Adam step of every head's output layer: the touched rows of the sparse heads, every row of
        the every-label heads (RowAdam's arithmetic, each head with its own rate and step count). Bias
        corrections from the heads' device step counters (`self.t`, their `RowAdam.t` are views of it);
        rows written back by slot when the loss ran in slot mode (`static_unique`'s padding slots rewrite
        slot 0's row with its own new value): no host synchronisation, so the CUDA-graph runner captures
        this same step."""
        b1, b2 = self.betas
        self.t.add_(1.0)
        dt = self.W.dtype
        step_t = (self.lr_t / (1.0 - torch.pow(b1, self.t))).to(dt)       # lr / c1, in double as on the host
        sq_t = (1.0 - torch.pow(b2, self.t)).sqrt().to(dt)
        if self._rows is not None:
            rows, src = self._rows, self._src
            hk = torch.div(rows, self.L, rounding_mode="floor")
            ss, sc = step_t.index_select(0, hk), sq_t.index_select(0, hk)
            for full, mom, vel, g, shape in self._row_blocks():
                if src is not None and g.is_contiguous() and fused_slot_rows_adam(full, mom, vel, g, rows, src, ss, sc,
                                                                                  self.betas, self.eps, self.wd):
                    continue
                # eager on a CPU: in chunks of rows that stay in cache through Adam's passes (the same
                # elementwise arithmetic; the whole union of rows at once streamed each pass from memory)
                n = _CPU_ROWS if src is None and rows.device.type == "cpu" else rows.numel()
                for c in range(0, rows.numel(), max(1, n)):
                    row_adam_update_(full, g[c:c + n], mom, vel, rows[c:c + n], src=src, step=ss[c:c + n].view(shape),
                                     sqrt_c2=sc[c:c + n].view(shape), betas=self.betas, eps=self.eps,
                                     weight_decay=self.wd)
        if self._full_W is not None:
            self._step_full(step_t, sq_t)
        self._rows = self._leaf_W = self._leaf_b = self._full_W = self._full_b = self._src = None

    def _row_blocks(self):
        """The row-update blocks (output weights as rows, biases) with their moments and gradients."""
        return _with_grads(((self.W.view(-1, self.h), self.mW.view(-1, self.h), self.vW.view(-1, self.h), self._leaf_W),
                            (self.b.view(-1), self.mb.view(-1), self.vb.view(-1), self._leaf_b)))

    def _step_full(self, step_t: torch.Tensor, sq_t: torch.Tensor) -> None:
        """Dense Adam over the every-label heads' block (heads Hs: on)."""
        Hs = self.Hs
        for full, mom, vel, g, shape in _with_grads(((self.W[Hs:], self.mW[Hs:], self.vW[Hs:], self._full_W),
                                                     (self.b[Hs:], self.mb[Hs:], self.vb[Hs:], self._full_b))):
            adam_update_(full, g, mom, vel, step=step_t[Hs:].view(shape), sqrt_c2=sq_t[Hs:].view(shape),
                         betas=self.betas, eps=self.eps, weight_decay=self.wd)


def _with_grads(blocks):
    """(param, first moment, second moment, leaf) -> (param, moments, the leaf's gradient or zeros when
    none flowed, the shape that broadcasts a per-row coefficient over the param's trailing dims)."""
    for full, mom, vel, leaf in blocks:
        g = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
        yield full, mom, vel, g, (-1,) + (1,) * (full.dim() - 1)
