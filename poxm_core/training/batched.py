"""The heads of a trial trained as ONE batched step (`training.batched_heads`; docs/training.md).

Run one after another, H heads cost H scorings (unique, gather, product), H losses and H optimiser
steps per batch: thousands of small operations, and on a GPU thousands of kernel launches. The heads
share the batch (one shuffle per epoch, seeded by (seed, epoch)), and their parameters are disjoint,
so the same step can be written over a head dimension:

- Output layers: the heads' W, b and Adam moments are stacked into (H, L, h) / (H, L) tensors; each
  head's `HeadParams` and `RowAdam` fields become views of its slice (evaluation and checkpoints read
  them as before). A label y of head k is row k L + y of the flattened (H L, h) table.
- Scoring: every head of a sparse kind asks for its own ids (POXM, wPOXM, DR-POXM: Phi^p(x) = the
  first p candidates; DM: the logged actions; BanditNet and PM-BanditNet with the sampled softmax: the
  logged actions and the step's k negatives, drawn from each head's own generator as its plain step
  draws them), offset by k L; ONE unique over all of them gives the rows every head touches (per head
  exactly the rows its own step would touch: the sets are disjoint by the offset), one gather, one
  batched product per group of heads with the same ids (the negatives, shared by the batch's
  instances: one (B, h) x (h, k) product a head instead of B k gathered rows). Heads whose
  loss needs every label (BanditNet and PM-BanditNet with the full softmax, the skyline on frozen
  features) get (G, B, L) logits from one batched matmul of their block.
- Losses: one evaluation per group of heads of the same kind and p (lambda, the weight scale of wPOXM
  and the learning rate are per-head vectors); the step minimises the SUM of the heads' losses, whose
  gradient with respect to each head's parameters is that head's own gradient.
- Optimiser: one row-Adam step over the union of the touched rows (each row with its head's rate and
  bias correction) and one dense Adam step over the full-softmax block: elementwise, so H independent
  Adams, the "lazy" row Adam of `policy.heads.RowAdam` (untouched rows bit-identical).

So each head sees the same batches in the same order and takes the same steps as in the sequential
loop; only the float summation order of a few reductions differs (tests/test_batched_heads.py checks
the parameters against the sequential engine's after several steps, every supported method).

Supported: methods poxm, wpoxm, dr_poxm, dm, banditnet / pm_banditnet (full or sampled softmax),
skyline; policies 'network' (heads of one `NetworkStack`) and 'linear'. Other heads (the end-to-end
skyline with its own dense optimiser, plugin methods) train in the same batches through the
sequential path; `assign` says which is which. In the CUDA-graph loop the sampled softmax's negatives
are drawn for the whole epoch at its start (`begin_epoch`): the same numbers as step by step.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from poxm_core.estimators import pl_expectations_torch, pl_log_conditionals_torch, selector_pos
from poxm_core.methods import Batch, HeadContext
from poxm_core.methods.banditnet import BanditNet, sampled_scores
from poxm_core.methods.base import masked_weights
from poxm_core.model.core import dense_targets
from poxm_core.methods.dm import DirectMethod
from poxm_core.methods.dr_poxm import DRPOXM
from poxm_core.methods.pm_banditnet import PMBanditNet
from poxm_core.methods.poxm import POXM
from poxm_core.methods.skyline import Skyline
from poxm_core.methods.wpoxm import WPOXM
from poxm_core.optim.adam import adam_update_, row_adam_update_
from poxm_core.accel.static import static_unique
from poxm_core.accel.triton_adam import fused_slot_rows_adam
from poxm_core.policy.network import LinearPolicy, NetworkPolicy

__all__ = ["BatchedHeads", "assign", "KINDS"]

# exact method classes (a subclass may change the loss) -> the kind of batched loss
KINDS = {POXM: "phi", WPOXM: "phi", DRPOXM: "dr", DirectMethod: "logged", BanditNet: "full", PMBanditNet: "full",
         Skyline: "skyline"}
_ORDER = {"phi": 0, "dr": 1, "logged": 2, "sampled": 3, "full": 4, "skyline": 5}
_SPARSE = ("phi", "dr", "logged", "sampled")
_CAPTURABLE = ("phi", "dr", "logged", "sampled", "full", "skyline")
_CPU_ROWS = 4096     # rows per chunk of the row-Adam step on a CPU


def _kind(h) -> str | None:
    kind = KINDS.get(type(h.method))
    if kind is None or h.policy is None or h.policy.dense_opt is not None:
        return None
    if type(h.policy) not in (NetworkPolicy, LinearPolicy):
        return None
    if kind == "full" and getattr(h.mc, "softmax", "full") == "sampled":
        return "sampled"
    return kind


def _n_neg(h, kind) -> int | None:
    """Negatives a step of a sampled-softmax head draws (heads of one group must draw as many)."""
    return int(h.mc.n_negatives) if kind == "sampled" else None


def _source(h):
    """What a head's features are read from: its network stack, or the frozen features (linear)."""
    return ("stack", id(h.policy.stack[0])) if isinstance(h.policy, NetworkPolicy) else ("z",)


def assign(trainable: list) -> tuple[list, list]:
    """(batched heads, sequential heads): the supported heads of the most common feature source are batched
    (they must share one feature tensor and one width), with the same Adam settings; the rest run one by one."""
    ok = [h for h in trainable if _kind(h) is not None]
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


class BatchedHeads:
    """One batched training step of several heads (module doc). `loss(batch, stacked, rhat)` returns the
    heads' losses (H,) in `self.heads` order, keeping what `step()` needs after the backward."""

    def __init__(self, heads: list) -> None:
        if not heads:
            raise ValueError("BatchedHeads: no heads")
        keyed = sorted(enumerate(heads), key=lambda t: (_ORDER[_kind(t[1])], t[1].spec.p or 0,
                                                         _n_neg(t[1], _kind(t[1])) or 0, t[0]))
        self.heads = [h for _, h in keyed]
        self.kinds = [_kind(h) for h in self.heads]
        self.H = len(self.heads)
        W0 = self.heads[0].policy.out.W
        self.L, self.h = int(W0.shape[0]), int(W0.shape[1])
        self.device = W0.device
        self.Hs = sum(k in _SPARSE for k in self.kinds)          # heads [0, Hs) sparse, [Hs, H) full
        # groups: contiguous runs of heads with the same kind and p (and number of sampled negatives):
        # one loss evaluation each
        self.groups: list[tuple[str, int | None, int, int]] = []
        for k, (h, kind) in enumerate(zip(self.heads, self.kinds)):
            if self.groups and self.groups[-1][:2] == (kind, h.spec.p) and \
                    _n_neg(self.heads[self.groups[-1][2]], kind) == _n_neg(h, kind):
                g = self.groups[-1]
                self.groups[-1] = (g[0], g[1], g[2], k + 1)
            else:
                self.groups.append((kind, h.spec.p, k, k + 1))
        src = _source(self.heads[0])
        self.stack = self.heads[0].policy.stack[0] if src[0] == "stack" else None
        if self.stack is not None:
            self.stack_idx = torch.tensor([h.policy.index for h in self.heads], dtype=torch.int64, device=self.device)
        opt = self.heads[0].policy.out_opt
        self.betas, self.eps, self.wd = opt.betas, opt.eps, opt.weight_decay
        dev = self.device
        # per-group constants on the device (made once: nothing is copied from the host inside a step)
        self._offs = {a: (torch.arange(a, b, device=dev) * self.L).view(-1, 1, 1) for _, _, a, b in self.groups}
        self._is_w = {a: torch.tensor([isinstance(h.method, WPOXM) for h in self.heads[a:b]], device=dev).view(-1, 1, 1)
                      for kind, _, a, b in self.groups if kind == "phi"
                      and any(isinstance(h.method, WPOXM) for h in self.heads[a:b])}
        self._shifts: dict = {}
        self._negs: dict[int, torch.Tensor] = {}
        self._neg_ep: dict[int, torch.Tensor] = {}     # static loop: the epoch's negatives (steps, G, k)
        self._counter: torch.Tensor | None = None
        self.t: torch.Tensor | None = None
        self.bind()

    def capturable(self) -> bool:
        """Every kind of loss here has a sync-free form (CUDA-graph loop): the skyline's labels as a padded
        table of ids, DR-POXM's rhat computed in the step, the sampled softmax's negatives drawn for the
        whole epoch beforehand (`begin_epoch`), the rest as in the eager step."""
        return all(k in _CAPTURABLE for k in self.kinds)

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
        """The heads' losses (H,). static: the rows from `static_unique` (fixed shape, no host
        synchronisation: the CUDA-graph loop), to be followed by `step_static`."""
        feats = self.features(batch, stacked)
        B = batch.size
        out: list[torch.Tensor] = []
        # sparse heads: one unique over every head's ids, offset by k L
        logits_of: dict[int, torch.Tensor] = {}
        self._rows = self._leaf_W = self._leaf_b = None
        if self.Hs:
            gids, shapes = [], []
            for kind, p, a, b in self.groups:
                if kind not in _SPARSE:
                    continue
                ids = batch.actions if kind in ("logged", "sampled") else batch.cand[:, :p]
                gids.append((ids.unsqueeze(0) + self._offs[a]).reshape(-1))
                shapes.append((a, b, ids.shape[1], kind))
                if kind == "sampled":     # the negatives: (G, k) rows, shared by the batch's instances
                    neg = self._epoch_negatives(a) if static else self._draw_negatives(a, b, ctxs, ids.device)
                    gids.append((neg + self._offs[a].view(-1, 1)).reshape(-1))
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
            for a, b, m, kind in shapes:
                G = b - a
                n = G * B * m
                iv = inv[start:start + n]
                start += n
                Wg = self._leaf_W.index_select(0, iv).view(G * B, m, self.h)
                z = feats[a:b].reshape(G * B, self.h)
                # B*m dot products of length h: a batched matvec on the GPU; on a CPU, where bmm runs
                # G*B tiny products, the elementwise product and sum (measured 1.5-9x faster)
                dots = (Wg * z.unsqueeze(1)).sum(2) if z.device.type == "cpu" else torch.bmm(Wg, z.unsqueeze(2)).squeeze(2)
                logits_of[a] = (dots + self._leaf_b.index_select(0, iv).view(G * B, m)).view(G, B, m)
                if kind == "sampled":
                    # the negatives' logits: one (B, h) x (h, k) product a head, not B k gathered rows
                    k = self._negs[a].shape[1]
                    ivn = inv[start:start + G * k]
                    start += G * k
                    Wn = self._leaf_W.index_select(0, ivn).view(G, k, self.h)
                    neg = torch.bmm(feats[a:b], Wn.transpose(1, 2)) + self._leaf_b.index_select(0, ivn).view(G, 1, k)
                    logits_of[a] = torch.cat([logits_of[a], neg], dim=2)
        # full heads: (G, B, L) logits of their block
        self._full_W = self._full_b = None
        if self.Hs < self.H:
            self._full_W = self.W[self.Hs:].detach().requires_grad_(True)
            self._full_b = self.b[self.Hs:].detach().requires_grad_(True)
            for kind, _p, a, b in self.groups:
                if kind in _SPARSE:
                    continue
                Wb = self._full_W[a - self.Hs:b - self.Hs]
                logits_of[a] = torch.bmm(feats[a:b], Wb.transpose(1, 2)) + self._full_b[a - self.Hs:b - self.Hs].unsqueeze(1)
        for kind, p, a, b in self.groups:
            out.append(self._group_loss(kind, p, a, b, logits_of[a], batch, ctxs, rhat))
        return torch.cat(out)

    def _draw_negatives(self, a: int, b: int, ctxs, device) -> torch.Tensor:
        """(G, k) labels drawn uniformly with replacement for each head of the group, from the head's own
        generator, exactly the draws of its plain step (methods/banditnet.py); kept for the loss."""
        self._negs[a] = neg = self._draw(a, b, ctxs).to(device)
        return neg

    def _draw(self, a: int, b: int, ctxs, *steps: int) -> torch.Tensor:
        """(*steps, G, k) uniform labels: each head of the group's draws from its own generator."""
        k = _n_neg(self.heads[a], "sampled")
        return torch.stack([torch.randint(self.L, (*steps, k), generator=ctxs[h.key].gen) for h in self.heads[a:b]],
                           dim=len(steps))

    def begin_epoch(self, full: int, counter: torch.Tensor, ctxs: dict[str, HeadContext]) -> bool:
        """The static loop's epoch of `full` batches: every sampled-softmax head's negatives for all of them
        drawn now from its generator (torch's CPU generator gives (n, k) draws at once exactly as n draws of
        k, so the numbers and the generator's state after the epoch are the plain step's; a test checks
        it), kept on the device; step i reads row `counter` (the loop's batch counter). True when a
        buffer was (re)allocated: a captured graph must be captured again."""
        changed = False
        self._counter = counter
        for kind, _p, a, b in self.groups:
            if kind != "sampled":
                continue
            tab = self._draw(a, b, ctxs, full)
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

    def _shift(self, a: int, b: int, ctxs, dtype) -> torch.Tensor:
        vals = tuple(ctxs[h.key].shift for h in self.heads[a:b])
        key = (a, vals, dtype)
        if key not in self._shifts:
            self._shifts[key] = torch.tensor(vals, dtype=dtype, device=self.device).view(-1, 1, 1)
        return self._shifts[key]

    def _group_loss(self, kind, p, a, b, s, batch: Batch, ctxs, rhat) -> torch.Tensor:
        G, B, m = s.shape
        ell = batch.actions.shape[1]
        q, r = batch.q, batch.rewards
        if kind == "logged":
            return F.binary_cross_entropy_with_logits(s, r.expand(G, B, ell), reduction="none").mean(dim=(1, 2))
        if kind == "skyline":
            target = dense_targets(batch.labels, s.device, batch.n_labels)
            return F.binary_cross_entropy_with_logits(s, target.expand(G, B, m), reduction="none").sum(dim=(1, 2)) / B
        if kind == "full":
            pos = batch.actions
        elif kind == "sampled":
            s = sampled_scores(s[:, :, :ell], s[:, :, ell:], batch.actions, self._negs[a], self.L)
            m = s.shape[2]
            pos = torch.arange(ell, device=s.device).expand(B, ell)
        else:
            pos = selector_pos(batch.cand_pos, p)
        flat = s.reshape(G * B, m)
        pos_g = pos.repeat(G, 1)
        logpi = pl_log_conditionals_torch(flat, pos_g, check=False)
        w = masked_weights(logpi, q.repeat(G, 1)).view(G, B, ell)
        if kind == "dr":
            phi_ids = batch.cand[:, :p]
            vals = rhat(phi_ids).to(s.dtype)
            dm_term = pl_expectations_torch(flat, vals.repeat(G, 1), pos_g, check=False).view(G, B, ell)
            rhat_logged = rhat(batch.actions).to(s.dtype)
            return -((dm_term + w * (r - rhat_logged)).sum(dim=(1, 2)) / B)
        if a in self._is_w:
            w = w * torch.where(self._is_w[a], batch.inv_prop_actions.unsqueeze(0), torch.ones((), dtype=w.dtype, device=w.device))
        elif kind in ("full", "sampled") and p is not None:      # PM-BanditNet: positions outside Phi^p dropped
            w = w * (batch.cand_pos < p).to(r.dtype)
        return -((w * (r - self._shift(a, b, ctxs, r.dtype))).sum(dim=(1, 2)) / B)

    # ---- optimiser -----------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self) -> None:
        """One Adam step of every head's output layer: the touched rows of the sparse heads, every row of
        the full heads (RowAdam's arithmetic, each head with its own rate and step count)."""
        b1, b2 = self.betas
        steps, sq = [], []
        for h, lr in zip(self.heads, self.lr):
            opt = h.policy.out_opt
            opt.step_count += 1
            t = opt.step_count
            steps.append(lr / (1 - b1 ** t))
            sq.append((1 - b2 ** t) ** 0.5)
        dt = self.W.dtype
        step_t = torch.tensor(steps, dtype=dt, device=self.device)
        sq_t = torch.tensor(sq, dtype=dt, device=self.device)
        if self._rows is not None:
            rows = self._rows
            hk = torch.div(rows, self.L, rounding_mode="floor")
            ss, sc = step_t.index_select(0, hk), sq_t.index_select(0, hk)
            for full, mom, vel, g, shape in self._row_blocks():
                # on a CPU in chunks of rows that stay in cache through Adam's passes (the same elementwise
                # arithmetic; the whole union of rows at once streamed each pass from memory)
                n = _CPU_ROWS if rows.device.type == "cpu" else rows.numel()
                for c in range(0, rows.numel(), max(1, n)):
                    row_adam_update_(full, g[c:c + n], mom, vel, rows[c:c + n], step=ss[c:c + n].view(shape),
                                     sqrt_c2=sc[c:c + n].view(shape), betas=self.betas, eps=self.eps,
                                     weight_decay=self.wd)
        if self._full_W is not None:
            self._step_full(step_t, sq_t)
        self._rows = self._leaf_W = self._leaf_b = self._full_W = self._full_b = None

    def _row_blocks(self):
        """The row-update blocks (output weights as rows, biases) with their moments and gradients."""
        return _with_grads(((self.W.view(-1, self.h), self.mW.view(-1, self.h), self.vW.view(-1, self.h), self._leaf_W),
                            (self.b.view(-1), self.mb.view(-1), self.vb.view(-1), self._leaf_b)))

    def _step_full(self, step_t: torch.Tensor, sq_t: torch.Tensor) -> None:
        """Dense Adam over the full-softmax heads' block (heads Hs: on), shared by `step` and `step_static`."""
        Hs = self.Hs
        for full, mom, vel, g, shape in _with_grads(((self.W[Hs:], self.mW[Hs:], self.vW[Hs:], self._full_W),
                                                     (self.b[Hs:], self.mb[Hs:], self.vb[Hs:], self._full_b))):
            adam_update_(full, g, mom, vel, step=step_t[Hs:].view(shape), sqrt_c2=sq_t[Hs:].view(shape),
                         betas=self.betas, eps=self.eps, weight_decay=self.wd)

    @torch.no_grad()
    def step_static(self) -> None:
        """`step` after a static `loss`: bias corrections from the device step counters `self.t` (see
        `sync_counter`), rows written back by slot (`static_unique`'s padding slots rewrite slot 0's row
        with its own new value); no host synchronisation. The caller advances the heads' step_count."""
        b1, b2 = self.betas
        self.t.add_(1.0)
        dt = self.W.dtype
        step_t = (self.lr_t / (1.0 - torch.pow(b1, self.t))).to(dt)
        sq_t = (1.0 - torch.pow(b2, self.t)).sqrt().to(dt)
        if self._rows is not None:
            rows, src = self._rows, self._src
            hk = torch.div(rows, self.L, rounding_mode="floor")
            ss, sc = step_t.index_select(0, hk), sq_t.index_select(0, hk)
            for full, mom, vel, g, shape in self._row_blocks():
                if not (g.is_contiguous() and fused_slot_rows_adam(full, mom, vel, g, rows, src, ss, sc, self.betas,
                                                                   self.eps, self.wd)):
                    row_adam_update_(full, g, mom, vel, rows, src=src, step=ss.view(shape), sqrt_c2=sc.view(shape),
                                     betas=self.betas, eps=self.eps, weight_decay=self.wd)
        if self._full_W is not None:
            self._step_full(step_t, sq_t)
        self._rows = self._leaf_W = self._leaf_b = self._full_W = self._full_b = self._src = None

    def sync_counter(self) -> None:
        """Set the device step counters `t` (H,) float64 to the heads' host step counts."""
        counts = torch.tensor([float(h.policy.out_opt.step_count) for h in self.heads], dtype=torch.float64)
        if self.t is None:
            self.t = torch.zeros(self.H, dtype=torch.float64, device=self.device)
        self.t.copy_(counts)


def _with_grads(blocks):
    """(param, first moment, second moment, leaf) -> (param, moments, the leaf's gradient or zeros when
    none flowed, the shape that broadcasts a per-row coefficient over the param's trailing dims)."""
    for full, mom, vel, leaf in blocks:
        g = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
        yield full, mom, vel, g, (-1,) + (1,) * (full.dim() - 1)
