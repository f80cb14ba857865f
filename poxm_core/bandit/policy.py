"""Logging-policy variants (alpha, beta, T) on the candidates C(x) (docs/protocol.md; paper appendix, Eq. of
E(x, y) and rho, Table logging_param):

    ln p_hat(y | x) = logsigmoid(s(x, y))
    E(x, y)         = ln p_hat(y | x) + beta * (G_{x,y} - gamma),   G ~ Gumbel(0, 1), gamma = Euler's constant
    rho(y | x)      = exp(E(x, y) / T) / sum_{y' in C(x)} exp(E(x, y') / T),   rho = 0 outside C(x)

The noise G is *frozen per (instance, label)*: it is a counter-based draw, a hash of (noise key, row id,
label id) turned into a uniform and then a Gumbel, so it does not depend on K, on the candidate order or
on how rows are chunked, and the same (seed, variant, split) always gives the same policy. Train and test
policies use different keys (separate streams); see `noise_key`.
"""
from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from poxm_core.bandit.variant import VariantPolicy

EULER_GAMMA = 0.57721566490153286061
_ROW_BLOCK = 65536

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser (Steele et al. 2014) on uint64 arrays; wraps modulo 2^64 by design."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def noise_key(seed: int | Sequence[int]) -> np.uint64:
    """One 64-bit key from an int or a sequence of ints (via numpy's SeedSequence)."""
    entropy = [int(seed)] if np.isscalar(seed) else [int(s) for s in seed]  # type: ignore[union-attr]
    if any(s < 0 for s in entropy):
        raise ValueError(f"seed: expected non-negative ints, got {entropy}")
    return np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)[0]


def name_code(name: str) -> int:
    """A stable (process-independent) 32-bit int for a name, e.g. a variant's, to seed its noise."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def frozen_uniform(key: np.uint64, rows: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """U in (0, 1), one per (row, label) pair, a pure function of (key, row, label). Shapes broadcast."""
    r = np.asarray(rows).astype(np.uint64)
    y = np.asarray(labels).astype(np.uint64)
    h = _splitmix64(_splitmix64(r ^ np.uint64(key)) ^ y)
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


def frozen_gumbel(key: np.uint64, rows: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """G ~ Gumbel(0, 1) per (row, label): -ln(-ln U) with U = frozen_uniform(key, rows, labels)."""
    return -np.log(-np.log(frozen_uniform(key, rows, labels)))


def log_sigmoid(s: np.ndarray) -> np.ndarray:
    """ln sigmoid(s) = -ln(1 + e^{-s}), stable for large |s| (float64)."""
    return -np.logaddexp(0.0, -np.asarray(s, dtype=np.float64))


def rho_from_scores(cand_scores: np.ndarray, beta: float, T: float, gumbel: np.ndarray | None) -> np.ndarray:
    """rho = softmax_K((logsigmoid(s) + beta (G - gamma)) / T) row-wise, float64 (n, K)."""
    E = log_sigmoid(cand_scores)
    if beta > 0:
        if gumbel is None:
            raise ValueError("gumbel: noise is required when beta > 0")
        E = E + beta * (gumbel - EULER_GAMMA)
    A = E / T
    A -= A.max(axis=1, keepdims=True)
    P = np.exp(A)
    P /= P.sum(axis=1, keepdims=True)
    return P


def sort_by_rho(cand: np.ndarray, rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Re-order each row by rho descending, ties by smaller label id."""
    order = np.lexsort((cand, -rho), axis=-1)
    return np.take_along_axis(cand, order, 1), np.take_along_axis(rho, order, 1)


def build_variant(cand_idx: np.ndarray, cand_scores: np.ndarray, beta: float, T: float,
                  seed: int | Sequence[int], rows: np.ndarray | None = None) -> VariantPolicy:
    """The logging policy rho on C(x) for one split.

    cand_idx: (n, K) int label ids C(x) (top-K by logit); cand_scores: (n, K) head logits s(x, y).
    seed: int or ints keying the frozen Gumbel noise (prepare passes (seed, variant name code, split));
    rows: (n,) row ids of these instances in their split (default 0..n-1) - the noise is per (row, label).
    Returns VariantPolicy(cand, rho) with candidates re-sorted by rho, so Phi^p(x) = cand[:, :p].
    """
    cand_idx = np.asarray(cand_idx)
    cand_scores = np.asarray(cand_scores)
    if cand_idx.ndim != 2 or cand_idx.shape != cand_scores.shape:
        raise ValueError(f"cand_idx {cand_idx.shape} and cand_scores {cand_scores.shape}: expected equal (n, K) shapes")
    if not np.issubdtype(cand_idx.dtype, np.integer):
        raise TypeError(f"cand_idx: expected integer label ids, got dtype {cand_idx.dtype}")
    if not np.all(np.isfinite(cand_scores)):
        raise ValueError("cand_scores: expected finite logits")
    if not (np.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta must be a finite number >= 0, got {beta}")
    if not (np.isfinite(T) and T > 0):
        raise ValueError(f"T must be a finite number > 0, got {T}")
    n = cand_idx.shape[0]
    rows = np.arange(n, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    if rows.shape != (n,):
        raise ValueError(f"rows: expected shape ({n},), got {rows.shape}")
    key = noise_key(seed)
    cand = np.empty(cand_idx.shape, dtype=np.int64)
    rho = np.empty(cand_idx.shape, dtype=np.float64)
    for s in range(0, n, _ROW_BLOCK):  # row blocks bound the float64 temporaries
        blk = slice(s, s + _ROW_BLOCK)
        G = frozen_gumbel(key, rows[blk, None], cand_idx[blk]) if beta > 0 else None
        r = rho_from_scores(cand_scores[blk], float(beta), float(T), G)
        cand[blk], rho[blk] = sort_by_rho(cand_idx[blk].astype(np.int64), r)
    return VariantPolicy(cand=cand, rho=rho)
