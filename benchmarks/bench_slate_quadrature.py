"""The exact slate metrics' quadrature on POTEC-shaped rows: one chunk at the nodes its hardest row needs (the
earlier code) against the same rows in groups bounded at the nodes each needs (position_probs.node_bounded_groups),
their peak memory, seconds and largest difference.

POTEC's test-time scores put its first round's labels at ordinary logits, the second round's e^-600 below
and later rounds at probability 0 (methods/potec.two_stage_scores): a row then needs about 16 times the 300
quadrature nodes the metrics' chunks are sized for. The rows here are built that way (no trained head: the
cost depends on the shapes), `--peaked` of them, the others ordinary softmax rows; `--relevant` true labels
a row among the `--support` candidates (Corel5k's wide grid: 1,250 test rows, K = 100, 5 labels at most).
The chunk is what metrics/slate.py gives a trial: `--budget` float64 elements (slate.GPU_CHUNK_ELEMS on a
GPU) over a row's elements at 300 nodes.

Needs NumPy and torch only (the device machine has them without the project's other wheels):

  python benchmarks/bench_slate_quadrature.py                    # CUDA if available
  python benchmarks/bench_slate_quadrature.py --device cpu --rows 200 --budget 4000000
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from poxm_core.metrics.position_probs import (elements_per_row, node_bounded_groups, position_sums,  # noqa: E402
                                              position_sums_torch, row_nodes)

GPU_CHUNK_ELEMS = 1 << 25      # metrics/slate.py's (tests/project/test_bench_suite.py checks they agree)


def potec_rows(n: int, m: int, peaked: float, clusters: int, rng) -> np.ndarray:
    """(n, m) probabilities: a `peaked` share shaped as POTEC's two-stage scores over `clusters` clusters
    (a round's labels: one a cluster), the rest ordinary softmax rows."""
    logits = rng.normal(size=(n, m))
    two = rng.random(n) < peaked
    c = clusters
    logits[two, c:2 * c] -= 600.0               # the second round, e^-600 below the first
    logits[two, 2 * c:] = -np.inf               # later rounds: probability 0 (e^-1200 underflows)
    p = np.exp(logits - logits.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True)


def values_of(n: int, m: int, r: int, near: int, rng) -> np.ndarray:
    """(n, m, 2): hits on `r` true labels a row, among the first `near` candidates, and their weights."""
    vals = np.zeros((n, m, 2))
    for i in range(n):
        cols = rng.choice(max(r, min(m, near)), size=r, replace=False)
        vals[i, cols, 0] = 1.0
        vals[i, cols, 1] = 1.0 + rng.random(r)
    return vals


def run(probs, vals, k: int, device, groups) -> tuple[np.ndarray, float, float]:
    """(S, seconds, peak MB on the device, nan on the CPU) over the given row groups."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    t = time.perf_counter()
    S = np.empty((probs.shape[0], k, vals.shape[2]))
    for rows in groups:
        if device.type == "cuda":
            S[rows] = position_sums_torch(torch.as_tensor(probs[rows], device=device),
                                          torch.as_tensor(vals[rows], device=device), k).cpu().numpy()
        else:
            S[rows] = position_sums(probs[rows], vals[rows], k)
    secs = time.perf_counter() - t
    peak = (torch.cuda.max_memory_allocated(device) - base) / 2**20 if device.type == "cuda" else float("nan")
    return S, secs, peak


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rows", type=int, default=1250, help="test rows (Corel5k: 1,250)")
    ap.add_argument("--support", type=int, default=100, help="candidates a row (POTEC's K)")
    ap.add_argument("--relevant", type=int, default=5, help="true labels a row in the support")
    ap.add_argument("--peaked", type=float, default=1.0, help="share of rows shaped as POTEC's (1: a POTEC head)")
    ap.add_argument("--clusters", type=int, default=2, help="POTEC's k (2: its most peaked rows, fewer than 5 "
                                                            "labels in the first round)")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--budget", type=int, default=GPU_CHUNK_ELEMS, help="float64 elements a chunk's arrays hold")
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    rng = np.random.default_rng(0)
    probs = potec_rows(a.rows, a.support, a.peaked, a.clusters, rng)
    vals = values_of(a.rows, a.support, a.relevant, 4 * a.clusters, rng)
    chunk = min(a.rows, max(1, a.budget // elements_per_row(a.support, a.relevant, a.k)))   # slate._chunk_rows
    nodes = row_nodes(probs, a.k)
    fig = {"device": str(device), "rows": a.rows, "support": a.support, "relevant": a.relevant,
           "peaked_share": a.peaked, "clusters": a.clusters, "budget_elems": a.budget, "chunk_rows": chunk,
           "nodes_a_row": {"min": int(nodes.min()), "max": int(nodes.max())}}
    one, grouped = [], []
    for start in range(0, a.rows, chunk):
        rows = np.arange(start, min(a.rows, start + chunk))
        one.append(rows)
        grouped += [rows[g] for g in node_bounded_groups(probs[rows], a.relevant, a.k, a.budget)]
    fig["groups"] = len(grouped)
    S_old, fig["one_chunk_s"], fig["one_chunk_peak_mb"] = run(probs, vals, a.k, device, one)
    S_new, fig["grouped_s"], fig["grouped_peak_mb"] = run(probs, vals, a.k, device, grouped)
    fig["one_chunk_elems"] = max(len(r) * elements_per_row(a.support, a.relevant, a.k, int(nodes[r].max())) for r in one)
    fig["grouped_elems"] = max(len(r) * elements_per_row(a.support, a.relevant, a.k, int(nodes[r].max()))
                               for r in grouped)
    fig["max_abs_difference"] = float(np.abs(S_old - S_new).max())
    print(json.dumps(fig, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
