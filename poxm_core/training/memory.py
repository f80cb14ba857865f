"""A trial's peak GPU memory, estimated from its shapes before it runs (docs/orchestration.md, packing).

What a trial holds on the card, in bytes (float32 = 4, int64 = 8; `torch.cuda.max_memory_allocated`
counts these, not the CUDA context, which `CONTEXT_BYTES` stands for):

  data      Z of every instance (4 d), the sparse input when a network head reads it (12 per entry:
            int64 index, float32 value), candidates and their rho (12 K), the two logs (24 per slot:
            action and candidate position int64, reward and propensity)
                = (n_train + n_test) (4 d + 12 nnz + 12 K) + 24 slate (n_fit + n_val)
  heads     each trained head's output layer (L, w + 1) with its Adam moments and gradient (16 bytes
            a parameter), w = hidden for a network head, else d; the batched engine's stacked copy
            (4 more)                                                  = sum 20 L (w + 1)
  stacks    each network head's block of the shared stack: V (D, hidden) and U (d, hidden), with Adam
            and gradient                                              = sum 16 hidden (D + d)
  step      one mini-batch: per head its scored labels (p, or the slate without p, + drawn negatives,
            or L for an every-label head) times (w gathered weights + 4 working arrays), twice (the captured graph's pool and
            the eager last batch)                                     = 2 * 4 B sum s (w + 4)
  eval      the evaluation's working chunks: per head up to CHUNK_GPU elements (rows x L for an
            every-label head, rows x K x w otherwise), three arrays of them, one per evaluation thread
            at once                                                   = threads * 3 * 4 min(n_eval r, CHUNK_GPU)

The estimate is a bound of the allocations' peak within a small factor, not exact: it decides how many
trials share a card (orchestration/stages/packing.py adds the context and a margin); each trial records
it beside the peak measured in its first epoch and over the whole trial (summary.json "memory").
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CHUNK_GPU", "CONTEXT_BYTES", "HeadShape", "TrialShape", "estimate_peak_bytes", "head_shapes",
           "shape_from_stats"]

CHUNK_GPU = 1 << 26            # evaluation.py's _CHUNK_ELEMS_GPU: elements a working array holds at most
CONTEXT_BYTES = 600 << 20      # a CUDA context with torch's kernels loaded (not in max_memory_allocated)


@dataclass(frozen=True)
class HeadShape:
    """One trained head: `width` of its output layer's rows, `scores` labels a step reads per instance
    (L for an every-label head), `network`: it reads the sparse input through a block of the stack."""
    width: int
    scores: int
    every_label: bool = False
    network: bool = False


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


def _data(s: TrialShape) -> float:
    sparse = 12 * s.nnz if any(h.network for h in s.heads) else 0.0
    return (s.n_train + s.n_test) * (4 * s.dim + sparse + 12 * s.K) + 24 * s.slate * (s.n_fit + s.n_val)


def _eval_chunk(s: TrialShape, h: HeadShape) -> float:
    per_row = s.L if h.every_label else s.K * h.width
    return min(max(s.n_val, s.n_test) * per_row, CHUNK_GPU)


def estimate_peak_bytes(s: TrialShape) -> int:
    """The trial's allocations at their peak (module doc), in bytes."""
    heads = sum(20 * s.L * (h.width + 1) for h in s.heads)
    stacks = sum(16 * s.hidden * (s.D + s.dim) for h in s.heads if h.network)
    step = 2 * 4 * s.batch * sum(h.scores * ((0 if h.every_label else h.width) + 4) for h in s.heads)
    chunk = max((_eval_chunk(s, h) for h in s.heads), default=0.0)
    threads = max(1, min(s.eval_threads, len(s.heads)))
    return int(_data(s) + heads + stacks + step + threads * 3 * 4 * chunk)


def head_shapes(cfg, spec, L: int, dim: int) -> tuple[HeadShape, ...]:
    """The trained heads of trial `spec` under `cfg` (the methods' registry says what each reads)."""
    from poxm_core.methods.registry import get_method
    from poxm_core.training.trial_setup import _method_config

    out = []
    for h in spec.heads:
        m = get_method(h.method)
        if not m.trains:
            continue
        mc = _method_config(cfg, h.method)
        network = (m.policy or cfg.training.policy) == "network"
        every = bool(m.scores_every_label(mc))
        width = cfg.training.hidden if network else dim
        # a head without p reads the logged slate's actions
        scores = L if every else int(h.p or cfg.model.slate_size) + int(m.draws(mc))
        out.append(HeadShape(width, scores, every, network))
    return tuple(out)


def shape_from_stats(cfg, spec, stats: dict, eval_threads: int = 1) -> TrialShape:
    """A trial's shape from its prepared variant's statistics: N_train, N_test, L, D, dim, K, n_fit, n_val
    and nnz_per_row (the prepare stage's manifests; `Prepared` gives the same through
    trainer.memory_facts). A missing nnz_per_row counts min(D, 100) entries."""
    L, dim = int(stats["L"]), int(stats["dim"])
    return TrialShape(
        n_train=int(stats["N_train"]), n_test=int(stats["N_test"]), n_fit=int(stats["n_fit"]),
        n_val=int(stats["n_val"]), L=L, dim=dim, D=int(stats.get("D") or 0),
        nnz=float(stats.get("nnz_per_row") or min(int(stats.get("D") or 0), 100)), K=int(stats["K"]),
        slate=int(cfg.model.slate_size), batch=int(cfg.training.batch_size), hidden=int(cfg.training.hidden),
        heads=head_shapes(cfg, spec, L, dim), eval_threads=eval_threads)


def stats_of(prepared) -> dict:
    """`shape_from_stats`'s statistics read off a loaded `Prepared` (what the manifests record)."""
    X = prepared.X_train
    n = int(prepared.Z_train.shape[0])
    return {"N_train": n, "N_test": int(prepared.Z_test.shape[0]), "L": prepared.n_labels, "dim": prepared.dim,
            "D": 0 if X is None else int(X.shape[1]), "nnz_per_row": 0.0 if X is None else X.nnz / max(n, 1),
            "K": int(prepared.policy_train.cand.shape[1]), "n_fit": int(prepared.log_train.n),
            "n_val": int(prepared.log_val.n)}


class PeakMemory:
    """A trial's GPU memory: the estimate and the measured peak of its first epoch and of the whole trial
    (`torch.cuda.max_memory_allocated`, counted from the trial's start); `facts()` for summary.json. On
    a CPU only the estimate."""

    def __init__(self, device, estimate_bytes: int) -> None:
        import torch
        self.cuda = device.type == "cuda"
        self.device, self.estimate, self.first = device, int(estimate_bytes), None
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(device)

    def _peak(self) -> int:
        import torch
        return int(torch.cuda.max_memory_allocated(self.device))

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
        return out
