"""A trial's peak GPU memory, estimated from its shapes before it runs (docs/orchestration.md, packing).

What a trial needs on the card, in bytes (float32 = 4, int64 = 8, w = a head's row width: `hidden` for a
network head, else d; B the batch; the CUDA context is `CONTEXT_BYTES`, added by the packing):

  data     what the trial moves to the card once: Z, candidates and their rho of the training rows,
           Z of the test rows, the sparse input of both (12 per entry) when a head reads it, the fit log,
           the epoch's sparse input twice more (its batch order, the CUDA graph's buffers), the sampled
           softmax's negatives of an epoch (int32)
  params   each trained head's output layer with its Adam moments, 12 L (w + 1); each network head's
           block of the shared stack, V (D, h), U (d, h) under sparse+encoder and c, with moments and
           gradient, 16 h (D [+ d] + 1); the end-to-end skyline's own layers, 16 a parameter
  step     one training step's working arrays (the batched engine, training/batched.py):
           - a sparse head gathers B m + k rows (m label ids an instance, k draws a step; POTEC and the
             supervised and candidate losses read all K candidates, not p): the leaf rows, the gathered
             block, its gradient, index_select's full-size gradient block and the accumulated one,
             5 x 4 w a row, 96 more for the slots (sort, inverse, source, step sizes); 48 a logit
           - an every-label head: its (L, w + 1) gradient, the sliced block's, Adam's three temporaries,
             24 L (w + 1), and 48 B L for its logits and the Plackett-Luce arrays
           - a network head: 4 h (2 E + 4 B) for the stack's input gradient (E padded entries a batch,
             two (E, H h) arrays) and its forward copies
           - POTEC's loss: 16 B ell K a head and one (B, K, K) structure; DR-POXM's reads of the reward
             model, 4 B (m + ell) w
           counted TWICE: a captured CUDA graph keeps its step's memory in a pool of its own, and the
           eager steps (the last batch, heads outside the graph) allocate beside it
  overlap  the previous epoch's validation beside training (overlap.py): each trained head's copy of its
           output layer and validation features, and per evaluation thread one head's working set on the
           validation rows
  final    the final report: per evaluation thread (eval_threads.eval_threads_for: POXM_EVAL_THREADS, else
           the CPU count, at most 4 on a GPU; at most one a head) the largest working set of a head:
           its features of both splits, then the largest of its table (n K f gathered rows, f its
           feature width; n L logits for an all-label policy; both
           at most CHUNK_GPU elements), POTEC's pairwise (n, K, K) arrays, and its exact slate metrics'
           quadrature or their Monte-Carlo draws (3 float64 arrays of GPU_MC_CHUNK_ELEMS). The
           quadrature (metrics/slate.py) cuts rows into chunks of GPU_CHUNK_ELEMS float64 at 300 nodes
           a row (the torch version's arrays counted; a row's relevant columns are its true labels in
           the support, at most `labels_max`, else the support); rows that need more nodes (POTEC's
           two-stage scores put a second-round label e^-600 below the first: over 600 panels of 8
           nodes, 16 times the 300) are computed in smaller groups within the same bound
           (position_probs.node_bounded_groups), so a chunk's arrays keep their 300-node size, or one
           row's at the most nodes a row can take (`peaked_nodes`) where that is larger
  cublas   cuBLAS's workspaces, 32 MiB each on Hopper from the caching allocator, one per thread and
           stream: the training thread's three (its stream, the capture's, the separate pass's) and two a
           evaluation thread (the default stream, the overlapped validation's)

    estimate = data + params + cublas + step + max(step + overlap, final)

The step's row term is what grows with the heads (the 186 heads of the wide grid: 455,040 rows a step
at batch 64, against 6,400 for one POXM head of p = 100), the evaluation's with the threads. The
estimate is a bound within a small factor of `torch.cuda.max_memory_allocated` (which sees one step, not
the graph's pool beside it; threads seldom all hold their largest arrays at once). The quadrature's
nodes a row were measured on Corel5k's wide grid at 200-440 after 11 of 20 epochs, 4,968 for POTEC's
k = 2 heads: before its rows were grouped by the nodes they need, one POTEC head's chunk took 5 GB.
Each trial records the estimate beside the peak measured in its first epoch and over the whole trial
(summary.json "memory"); `start_trial` frees what an earlier trial of the same process left, so that
the peak recorded is the trial's own.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["CHUNK_GPU", "CONTEXT_BYTES", "CUBLAS_WORKSPACE", "HeadShape", "PeakMemory", "TrialShape",
           "estimate_parts", "estimate_peak_bytes", "head_shapes", "shape_from_stats", "start_trial", "stats_of"]

CHUNK_GPU = 1 << 26            # evaluation.py's _CHUNK_ELEMS_GPU: elements a working array holds at most
CONTEXT_BYTES = 600 << 20      # a CUDA context with torch's kernels loaded (not in max_memory_allocated)
CUBLAS_WORKSPACE = 32 << 20    # cuBLAS's workspace of a (thread, stream) on Hopper, from the caching allocator
QUAD_NODES = 300               # nodes a row the slate metrics' chunking assumes (position_probs.elements_per_row)


@dataclass(frozen=True)
class HeadShape:
    """One head: `width` of its output layer's rows; `scores` label ids a step reads per instance (L for
    an every-label head) and `draws` labels drawn per step; `network`: it reads the sparse input through
    a block of the stack; `support`: columns of its stochastic test-time table (0: a deterministic
    policy); `all_labels`: that table comes from logits over all L; `feat`: width of the features its
    evaluation reads (0: width); `pairs`: its test-time scores compare candidates pairwise (POTEC);
    `own`: parameters of dense layers of its own; `reward`: it reads the reward model in the step;
    `trained` False for the logging policy (evaluated only)."""
    width: int
    scores: int
    every_label: bool = False
    network: bool = False
    draws: int = 0
    support: int = 0
    all_labels: bool = False
    feat: int = 0
    pairs: bool = False
    own: int = 0
    reward: bool = False
    trained: bool = True


@dataclass(frozen=True)
class TrialShape:
    n_train: int
    n_test: int
    n_fit: int           # logged training rows
    n_val: int           # logged validation rows
    L: int
    dim: int             # the frozen encoder's width d
    D: int               # the sparse input's width
    nnz: float           # sparse entries per instance
    K: int               # candidates per instance
    slate: int
    batch: int
    hidden: int
    heads: tuple[HeadShape, ...]
    eval_threads: int = 1
    encoder: bool = False    # the network reads z too (training.network_inputs=sparse+encoder)
    mc_slates: int = 32
    kmax: int = 5            # the largest cut-off of the slate metrics
    labels_max: int = 0      # the most true labels of an instance (0: unknown, the support bounds it)


def _data(s: TrialShape) -> float:
    sparse = any(h.network or h.own for h in s.heads if h.trained)
    entries = 12 * s.nnz + 8 if sparse else 0.0
    steps = math.ceil(s.n_fit / max(s.batch, 1))
    return (s.n_train * (4 * s.dim + 12 * s.K + 8 + entries) + s.n_test * (4 * s.dim + 8 + entries)
            + s.n_fit * (8 + 28 * s.slate) + 8 * s.n_val + (2 * s.n_fit * (12 * s.nnz + 16) if sparse else 0.0)
            + sum(4 * h.draws * steps for h in s.heads if h.trained))


def _params(s: TrialShape) -> float:
    tr = [h for h in s.heads if h.trained]
    stack = 16 * s.hidden * (s.D + (s.dim if s.encoder else 0) + 1)
    return sum(12 * s.L * (h.width + 1) + (stack if h.network else 0) + 16 * h.own for h in tr)


def _entries(s: TrialShape) -> int:
    """Sparse entries of a batch as the CUDA graph pads them (accel/graph.py: 5 % over the largest
    batch's, in blocks of 1,024; the largest batch taken as 1.2 x the mean)."""
    return int(math.ceil(1.2 * s.batch * s.nnz / 1024)) * 1024


def _step(s: TrialShape) -> float:
    """One training step's working arrays (module doc)."""
    B, total = s.batch, 0.0
    for h in (h for h in s.heads if h.trained):
        if h.every_label:
            total += 24 * s.L * (h.width + 1) + 48 * B * s.L
        else:
            total += (B * h.scores + h.draws) * (20 * h.width + 96) + 48 * B * (h.scores + h.draws)
        if h.network:
            total += 4 * s.hidden * (2 * _entries(s) + 4 * B)
        if h.pairs:
            total += 16 * B * s.slate * s.K
        if h.reward:
            total += 4 * B * (h.scores + s.slate) * s.hidden
    if any(h.pairs for h in s.heads if h.trained):
        total += 8 * B * s.K * s.K
    return total


def peaked_nodes(kmax: int) -> int:
    """The most quadrature nodes a chunk of the exact slate metrics takes: a row's range in log t is at
    most log log(kmax / TAIL) + 745 + 17.3 (position_probs.py: 766 panels of 8 at kmax = 5). POTEC's rows
    come close: its two-stage scores put a second-round label e^-600 below the first (621 panels and
    more), and a chunk's hardest row sets the count of all its rows."""
    from poxm_core.metrics.position_probs import ORDER, PANEL_WIDTH, TAIL

    return ORDER * math.ceil((math.log(math.log(kmax / TAIL)) + 745 + 17.3) / PANEL_WIDTH)


def _metrics(s: TrialShape, m: int, nodes: int) -> float:
    """The slate metrics' device arrays of a stochastic table of m columns (metrics/slate.py): its chunk of
    rows at QUAD_NODES nodes a row, or one row at `nodes` (the most a row of the table may need) where
    that is more (rows needing more nodes run in smaller groups within the chunk's bound)."""
    from poxm_core.metrics.position_probs import elements_per_row
    from poxm_core.metrics.gumbel_noise import _NOISE_BLOCK
    from poxm_core.metrics.slate import EXACT_BUDGET, GPU_CHUNK_ELEMS, GPU_MC_CHUNK_ELEMS

    n, k = max(s.n_test, s.n_val), s.kmax
    if m <= 0 or n <= 0:
        return 0.0
    if max(s.n_test, 1) * m <= EXACT_BUDGET:
        r = min(m, s.labels_max) if s.labels_max > 0 else m      # a row's true labels in the support
        rows = min(n, max(1, GPU_CHUNK_ELEMS // elements_per_row(m, r, k, QUAD_NODES)))
        return 8.0 * max(rows * QUAD_NODES, nodes) * (2 * r * k + 8 * r + 3 * k)
    rows = min(n, max(1, GPU_MC_CHUNK_ELEMS // (s.mc_slates * m) // _NOISE_BLOCK) * _NOISE_BLOCK)
    return 24.0 * rows * s.mc_slates * m


def _table(s: TrialShape, h: HeadShape, n: int) -> float:
    """A head's test-time scores of n rows in the evaluation's chunks (evaluation.py)."""
    f = h.feat or h.width
    if h.all_labels:
        return 16.0 * min(n * s.L, CHUNK_GPU)
    gathered = 6.0 * min(n * s.K * f, CHUNK_GPU)
    pairs = 6.0 * min(n, max(1, CHUNK_GPU // max(s.K * f, 1))) * s.K * s.K if h.pairs else 0.0
    return max(gathered, pairs)


def _final_thread(s: TrialShape, h: HeadShape, nodes: int) -> float:
    f = h.feat or h.width
    n = max(s.n_test, s.n_val)
    return 8.0 * (s.n_val + s.n_test) * f + max(_table(s, h, n), _metrics(s, h.support, nodes))


def _final(s: TrialShape) -> float:
    """The final report's threads: one with the largest head at the nodes its rows may take (POTEC's,
    `peaked_nodes`: it matters only where one such row is more than a chunk), the others at the nodes
    the metrics' chunks are sized for."""
    if not s.heads:
        return 0.0
    own = max(_final_thread(s, h, peaked_nodes(s.kmax) if h.pairs else QUAD_NODES) for h in s.heads)
    return own + (_threads(s) - 1) * max(_final_thread(s, h, QUAD_NODES) for h in s.heads)


def _overlap(s: TrialShape) -> float:
    tr = [h for h in s.heads if h.trained]
    if not tr:
        return 0.0
    frozen = sum(4 * s.L * (h.width + 1) + 4 * s.n_val * (h.feat or h.width) for h in tr)
    per = max(8.0 * s.n_val * (h.feat or h.width) + _table(s, h, s.n_val) for h in tr)
    return frozen + max(1, min(s.eval_threads, len(tr))) * per


def _threads(s: TrialShape) -> int:
    return max(1, min(s.eval_threads, len(s.heads)))


def estimate_parts(s: TrialShape) -> dict[str, int]:
    """The estimate's terms in bytes (module doc): data, params, cublas, step (one), overlap, final."""
    return {"data": int(_data(s)), "params": int(_params(s)), "cublas": (3 + 2 * _threads(s)) * CUBLAS_WORKSPACE,
            "step": int(_step(s)), "overlap": int(_overlap(s)), "final": int(_final(s))}


def estimate_peak_bytes(s: TrialShape) -> int:
    """What the trial needs on the card at its peak (module doc), in bytes."""
    p = estimate_parts(s)
    return p["data"] + p["params"] + p["cublas"] + p["step"] + max(p["step"] + p["overlap"], p["final"])


def _ids_per_instance(m, mc, p: int | None, slate: int, K: int) -> int:
    """Label ids a method's loss reads per instance (`Method.ids`), from what it trains on."""
    support = m.train_support
    if support == "phi":
        return int(p)
    if support == "logged":           # DM: the logged actions, or every candidate under loss_on=candidates
        return K if getattr(mc, "loss_on", "logged") == "candidates" else slate
    if support == "all":              # the sampled softmax: the logged actions (its draws apart)
        return slate
    return max(K, int(p or 0))        # the candidates (POTEC's clusters of them, supervised_logs), or unknown


def _head_shape(cfg, h, L: int, dim: int, K: int, D: int):
    from poxm_core.methods.registry import get_method
    from poxm_core.training.trial_setup import _method_config

    m, tr = get_method(h.method), cfg.training
    slate = int(cfg.model.slate_size)
    if not m.trains:      # the logging policy: evaluated only, a stochastic table over C(x)
        return HeadShape(0, 0, support=K if m.test_policy == "rho" else 0, trained=False)
    mc = _method_config(cfg, h.method)
    policy = m.policy or tr.policy
    width = dim if policy == "linear" else tr.hidden
    every = bool(m.scores_every_label(mc))
    kind = m.test_support(mc) if m.test_policy == "softmax" else None
    support = {None: 0, "phi": int(h.p or K), "candidates": K, "all": min(int(tr.eval_max_support), L)}.get(kind, K)
    pairs = hasattr(m, "candidate_scores") or hasattr(type(m), "candidate_scores")
    reward_width = dim if tr.policy == "linear" else tr.hidden
    encoder = tr.network_inputs == "sparse+encoder"
    own = D * width + (D * dim + dim * width if encoder else 0) if policy == "end2end" else 0
    return HeadShape(width, L if every else _ids_per_instance(m, mc, h.p, slate, K), every, policy == "network",
                     draws=int(m.draws(mc)), support=support, all_labels=kind == "all",
                     feat=width + reward_width if pairs else 0, pairs=pairs, own=own,
                     reward=bool(m.needs_reward_model) and not pairs)


def head_shapes(cfg, spec, L: int, dim: int, K: int | None = None, D: int = 0) -> tuple[HeadShape, ...]:
    """The heads of trial `spec` under `cfg` (the methods' registry says what each reads and how it is
    evaluated), the hidden reward model included when the trial has no DM head (trial_setup.py)."""
    from poxm_core.methods import REWARD_METHOD
    from poxm_core.training.spec import HeadSpec

    K = int(K or cfg.model.n_candidates)
    heads = list(spec.heads)
    if not any(h.method == REWARD_METHOD for h in heads):
        heads.append(HeadSpec(REWARD_METHOD))
    return tuple(_head_shape(cfg, h, L, dim, K, D) for h in heads)


def shape_from_stats(cfg, spec, stats: dict, eval_threads: int = 1) -> TrialShape:
    """A trial's shape from its prepared variant's statistics: N_train, N_test, L, D, dim, K, n_fit, n_val
    and nnz_per_row (the prepare stage's manifests; `stats_of` reads the same off a loaded `Prepared`).
    A missing nnz_per_row counts min(D, 100) entries."""
    from poxm_core.common.results import KS

    L, dim, K, D = int(stats["L"]), int(stats["dim"]), int(stats["K"]), int(stats.get("D") or 0)
    slate = int(cfg.model.slate_size)
    return TrialShape(
        n_train=int(stats["N_train"]), n_test=int(stats["N_test"]), n_fit=int(stats["n_fit"]),
        n_val=int(stats["n_val"]), L=L, dim=dim, D=D, nnz=float(stats.get("nnz_per_row") or min(D, 100)), K=K,
        slate=slate, batch=int(cfg.training.batch_size), hidden=int(cfg.training.hidden),
        heads=head_shapes(cfg, spec, L, dim, K, D), eval_threads=eval_threads,
        encoder=cfg.training.network_inputs == "sparse+encoder", mc_slates=int(cfg.training.mc_slates),
        kmax=max(max(KS), slate), labels_max=int(stats.get("labels_max") or 0))


def stats_of(prepared) -> dict:
    """`shape_from_stats`'s statistics read off a loaded `Prepared` (what the manifests record)."""
    X = prepared.X_train
    n = int(prepared.Z_train.shape[0])
    return {"N_train": n, "N_test": int(prepared.Z_test.shape[0]), "L": prepared.n_labels, "dim": prepared.dim,
            "D": 0 if X is None else int(X.shape[1]), "nnz_per_row": 0.0 if X is None else X.nnz / max(n, 1),
            "K": int(prepared.policy_train.cand.shape[1]), "n_fit": int(prepared.log_train.n),
            "n_val": int(prepared.log_val.n), "labels_max": _labels_max(prepared.Y_test, prepared.Y_train)}


def _labels_max(*Ys) -> int:
    """The most labels of one row over the label matrices given (CSR; None skipped), 0 if none."""
    import numpy as np
    return max([int(np.diff(Y.indptr).max()) for Y in Ys if Y is not None and Y.shape[0]] or [0])


_RESIDENT: dict[int, int] = {}     # device index -> bytes still allocated when `start_trial` ran


def start_trial() -> int:
    """Where a trial starts in a process that ran others (a pack, Tune's reused trial processes): what
    the previous trial left in reference cycles collected, the caching allocator's free blocks and the
    cuBLAS workspaces (one per thread and stream, held by the allocator: evaluation threads on new
    streams add more each trial) released, the peak statistics restarted. Returns the bytes still
    allocated then (what an earlier trial keeps, not this one's): `PeakMemory` leaves them out of the
    trial's peak and records them apart. 0 without a CUDA context."""
    import gc
    import sys

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return 0
    dev = torch.cuda.current_device()
    torch.cuda.synchronize(dev)
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)
    _RESIDENT[dev] = int(torch.cuda.memory_allocated(dev))
    return _RESIDENT[dev]


class PeakMemory:
    """A trial's GPU memory: the estimate and the measured peak of its first epoch and of the whole trial
    (`torch.cuda.max_memory_allocated`, counted from the trial's start, less what an earlier trial of the
    process still held when `start_trial` ran: recorded as resident_at_start_mb); `facts()` for
    summary.json. On a CPU only the estimate."""

    def __init__(self, device, estimate_bytes: int) -> None:
        import torch
        self.cuda = device.type == "cuda"
        self.device, self.estimate, self.first, self.resident = device, int(estimate_bytes), None, 0
        if self.cuda:
            idx = device.index if device.index is not None else torch.cuda.current_device()
            self.resident = _RESIDENT.pop(idx, 0)
            torch.cuda.reset_peak_memory_stats(device)

    def _peak(self) -> int:
        import torch
        return max(0, int(torch.cuda.max_memory_allocated(self.device)) - self.resident)

    def epoch_done(self) -> None:
        if self.cuda and self.first is None:
            self.first = self._peak()

    def facts(self) -> dict:
        mb = 1 << 20
        out = {"estimate_mb": round(self.estimate / mb, 1)}
        if self.cuda:
            peak = self._peak()
            out.update(peak_first_epoch_mb=round((self.first or peak) / mb, 1), peak_mb=round(peak / mb, 1),
                       estimate_over_peak=round(self.estimate / max(peak, 1), 3))
            if self.resident:
                out["resident_at_start_mb"] = round(self.resident / mb, 1)
        return out
