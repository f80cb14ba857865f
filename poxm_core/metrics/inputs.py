"""Input checks and shared kernels of the ranking metrics (poxm_core/metrics/ranking.py, slate_metrics.py).

Labels are a CSR matrix Y (n, L); membership of a predicted label is a `searchsorted` of the key
row * L + label in a chunk's sorted true keys, so no (n, L) array is ever built.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
import scipy.sparse as sp

from poxm_core.common.csr import check_sparse
from poxm_core.common.errors import PoxmInputError

CHUNK_ELEMS = 1 << 22   # ~32 MB of float64 per working array


# ----------------------------------------------------------------------------- validation

def check_labels(Y) -> sp.csr_matrix:
    check_sparse("Y", Y, "a scipy sparse (n, L) label matrix")
    Y = sp.csr_matrix(Y)   # no copy when already CSR
    if Y.shape[0] == 0:
        raise PoxmInputError("Y: expected at least one instance, got 0 rows")
    return Y


def check_ks(ks: Iterable[int]) -> tuple[int, ...]:
    try:
        ks = tuple(ks)
    except TypeError:
        raise TypeError(f"ks: expected an iterable of positive ints, got {type(ks).__name__}") from None
    if not ks or not all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k > 0 for k in ks):
        raise PoxmInputError(f"ks: expected positive ints such as (1, 3, 5), got {ks!r}")
    return tuple(sorted({int(k) for k in ks}))


def check_inv_prop(inv_prop, L: int) -> np.ndarray:
    inv = np.asarray(inv_prop, dtype=np.float64)
    if inv.shape != (L,):
        raise PoxmInputError(f"inv_prop: expected shape ({L},) (one value per label), got {inv.shape}")
    if not (np.all(np.isfinite(inv)) and np.all(inv > 0)):
        raise PoxmInputError("inv_prop: expected finite positive inverse propensities 1/p_l")
    return inv


def check_ids(name: str, ids, L: int, n: int | None) -> np.ndarray:
    ids = np.asarray(ids)
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"{name}: expected integer label ids, got dtype {ids.dtype}")
    if ids.ndim != 2 or (n is not None and ids.shape[0] != n):
        raise PoxmInputError(f"{name}: expected shape ({n if n is not None else 'n'}, k), got {ids.shape}")
    ids = ids.astype(np.int64, copy=False)
    if ids.size and (ids.min() < -1 or ids.max() >= L):
        raise PoxmInputError(f"{name}: label ids must lie in [0, {L}) or be -1 (padding), "
                             f"got range [{ids.min()}, {ids.max()}]")
    if ids.shape[1] > 1:
        s = np.sort(ids, axis=1)
        if np.any((s[:, 1:] == s[:, :-1]) & (s[:, 1:] >= 0)):
            row = int(np.nonzero(((s[:, 1:] == s[:, :-1]) & (s[:, 1:] >= 0)).any(1))[0][0])
            raise PoxmInputError(f"{name}: row {row} repeats a label id (expected distinct labels)")
    return ids


def check_probs(support: np.ndarray, probs) -> np.ndarray:
    probs = np.asarray(probs)
    if not np.issubdtype(probs.dtype, np.floating):
        raise TypeError(f"probs: expected floating probabilities, got dtype {probs.dtype}")
    probs = probs.astype(np.float64, copy=False)
    if probs.shape != support.shape:
        raise PoxmInputError(f"probs: expected the shape of support {support.shape}, got {probs.shape}")
    if not (np.all(np.isfinite(probs)) and np.all(probs >= 0)):
        raise PoxmInputError("probs: expected finite non-negative probabilities")
    if np.any(probs[support < 0] > 0):
        raise PoxmInputError("probs: a padding entry (support id -1) has positive probability")
    tot = probs.sum(axis=1)
    if probs.shape[1] == 0 or np.any(np.abs(tot - 1.0) > 1e-6):
        bad = int(np.argmax(np.abs(tot - 1.0))) if probs.shape[1] else 0
        raise PoxmInputError(f"probs: each row must sum to 1, row {bad} sums to "
                             f"{tot[bad] if probs.shape[1] else 0.0!r}")
    return probs / tot[:, None]


def check_count(name: str, v, minimum: int) -> int:
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
        raise TypeError(f"{name}: expected an int, got {type(v).__name__}")
    if v < minimum:
        raise PoxmInputError(f"{name}: expected an int >= {minimum}, got {v}")
    return int(v)


# ----------------------------------------------------------------------------- shared pieces

def true_keys(Y: sp.csr_matrix, a: int, b: int) -> np.ndarray:
    """Sorted unique int64 keys (i - a) * L + l of the true labels of rows a..b-1."""
    L = Y.shape[1]
    lo, hi = Y.indptr[a], Y.indptr[b]
    rows = np.repeat(np.arange(b - a, dtype=np.int64), np.diff(Y.indptr[a:b + 1]))
    keep = Y.data[lo:hi] != 0
    return np.unique(rows[keep] * L + Y.indices[lo:hi][keep].astype(np.int64))


def member(keys: np.ndarray, ids: np.ndarray, L: int) -> np.ndarray:
    """hit[i, j] = 1{ids[i, j] in Y*_i} for ids (c, k) of the chunk whose true keys are `keys`."""
    q = np.arange(ids.shape[0], dtype=np.int64)[:, None] * L + ids
    if keys.size == 0:
        return np.zeros(ids.shape, dtype=bool)
    pos = np.minimum(np.searchsorted(keys, q), keys.size - 1)
    return (keys[pos] == q) & (ids >= 0)


def discount_cumsum(kmax: int) -> np.ndarray:
    """cd[j] = sum_{l<=j} 1/log2(l+1), cd[0] = 0: IDCG@k of an instance is cd[min(k, |Y*|)]."""
    return np.concatenate([[0.0], np.cumsum(1.0 / np.log2(np.arange(2, kmax + 2)))])


def truth_summaries(keys: np.ndarray, c: int, L: int, inv: np.ndarray, kmax: int):
    """(|Y*_i| (c,), best (c, kmax)) with best[i, k-1] = sum of the k largest 1/p_l over Y*_i."""
    rows, labels = keys // L, keys % L
    ny = np.bincount(rows, minlength=c)
    w = inv[labels]
    order = np.lexsort((-w, rows))
    rows, w = rows[order], w[order]
    rank = np.arange(rows.size) - np.searchsorted(rows, rows)   # rank of w within its row, largest first
    top = rank < kmax
    best = np.zeros((c, kmax))
    best[rows[top], rank[top]] = w[top]
    return ny, np.cumsum(best, axis=1)
