"""Bandit-feedback simulation (docs/protocol.md): slates of ell labels drawn from rho without replacement.

For instance i with logging policy rho(. | x_i) on C(x_i), a slate y_1..y_ell is drawn sequentially
without replacement. Equivalently (Gumbel-top-k, Kool et al. 2019) it is the ell largest of
ln rho(y | x_i) + G'_{i,y}, in order, with fresh G' ~ Gumbel(0, 1) (frozen per (instance, label) and
seed like the policy noise, but on its own stream, so a row's slate does not depend on which other rows
are simulated). Per position j:

    q_j   = rho(y_j | x) / (1 - sum_{k<j} rho(y_k | x))      conditional propensity (computed as
            rho_j / (sum of rho over labels not yet drawn), which is the same number without the
            cancellation of 1 - cumsum when rho is peaked)
    rho_j = rho(y_j | x),   r_j = 1{y_j in Y*_i},   cand_pos_j = rank of y_j in the rho-ordered C(x).

If a row of rho has fewer than ell positive entries (possible only when float64 underflows, e.g. a
tiny T), a slate of ell distinct labels cannot be drawn: `simulate_log` raises ValueError naming the
row (the softmax gives every candidate positive mass otherwise).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp

from poxm_core.bandit.log import BanditLog
from poxm_core.bandit.policy import frozen_gumbel, noise_key
from poxm_core.common.csr import check_csr
from poxm_core.bandit.variant import VariantPolicy
from poxm_core.common.seeds import tagged_rng

_SLATE_STREAM = 0x51A7E  # separates slate noise from the policy's frozen noise for the same seed
_ROW_BLOCK = 65536


def validation_split(n_train: int, frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of the training rows: (fit_rows, val_rows), sorted int64, disjoint, covering 0..n-1.

    |val| = round(frac * n_train), kept within [1, n_train - 1] so that both parts are non-empty.
    """
    if not isinstance(n_train, (int, np.integer)) or isinstance(n_train, bool):
        raise TypeError(f"n_train: expected an int, got {type(n_train).__name__}")
    if n_train < 2:
        raise ValueError(f"n_train must be >= 2 to hold out a validation slice, got {n_train}")
    if not (0.0 < frac < 1.0):
        raise ValueError(f"frac must be in (0, 1), got {frac}")
    n_val = min(n_train - 1, max(1, int(round(frac * n_train))))
    perm = tagged_rng(seed, "validation").permutation(n_train)
    return np.sort(perm[n_val:]).astype(np.int64), np.sort(perm[:n_val]).astype(np.int64)


def fold_assignment(n: int, k: int, seed: int) -> np.ndarray:
    """Seeded fold of each of n rows, (n,) int64 in 0..k-1: a random permutation dealt round-robin, so
    fold sizes differ by at most one. Cross-fitting: fold f's rows validate what the other folds trained."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise TypeError(f"n: expected an int, got {type(n).__name__}")
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 2:
        raise ValueError(f"k: expected an int >= 2 folds, got {k!r}")
    if n < k:
        raise ValueError(f"n must be >= k={k} so that every fold is non-empty, got {n}")
    folds = np.empty(n, dtype=np.int64)
    folds[tagged_rng(seed, "folds").permutation(n)] = np.arange(n, dtype=np.int64) % k
    return folds


def fold_splits(n: int, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """[(fit_rows, val_rows)] per fold of `fold_assignment`: val_rows = the fold, fit_rows = the rest
    (sorted int64; the val_rows of the k splits partition 0..n-1)."""
    folds = fold_assignment(n, k, seed)
    return [(np.flatnonzero(folds != f).astype(np.int64), np.flatnonzero(folds == f).astype(np.int64))
            for f in range(k)]


def label_membership(Y: sp.csr_matrix, rows: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """1{labels[i, j] in Y*_{rows[i]}} as float32 (m, ell), from CSR without densifying Y."""
    L = Y.shape[1]
    Ys = Y[rows]
    keys_true = np.repeat(np.arange(Ys.shape[0], dtype=np.int64), np.diff(Ys.indptr)) * L + Ys.indices
    keys = np.arange(len(rows), dtype=np.int64)[:, None] * L + labels
    return np.isin(keys, keys_true).astype(np.float32)


def _slates(cand: np.ndarray, rho: np.ndarray, rows: np.ndarray, ell: int, key: np.uint64):
    with np.errstate(divide="ignore"):
        logrho = np.log(rho)
    n_pos = (rho > 0).sum(axis=1)
    if np.any(n_pos < ell):
        bad = int(np.flatnonzero(n_pos < ell)[0])
        raise ValueError(f"rho of training row {int(rows[bad])} has only {int(n_pos[bad])} positive entries, "
                         f"fewer than the slate size ell={ell} (temperature T too small?)")
    keys = logrho + frozen_gumbel(key, rows[:, None], cand)
    top = np.argpartition(-keys, ell - 1, axis=1)[:, :ell]
    pos = np.take_along_axis(top, np.argsort(-np.take_along_axis(keys, top, 1), axis=1, kind="stable"), 1)
    rho_j = np.take_along_axis(rho, pos, 1)
    undrawn = rho.copy()
    np.put_along_axis(undrawn, pos, 0.0, axis=1)
    # mass still available before drawing position j: undrawn + rho_j + rho_{j+1} + ... + rho_ell
    rest = undrawn.sum(axis=1, keepdims=True) + np.cumsum(rho_j[:, ::-1], axis=1)[:, ::-1]
    return pos, np.take_along_axis(cand, pos, 1), rho_j / rest, rho_j


def simulate_log(policy: VariantPolicy, Y: sp.csr_matrix, rows: np.ndarray, ell: int,
                 seed: int | Sequence[int]) -> BanditLog:
    """Log one slate of `ell` labels per training row in `rows`, drawn from the policy's rho.

    policy: VariantPolicy on the training split (cand, rho: (n_train, K), rho order);
    Y: (n_train, L) CSR true labels (read only for the rewards); rows: (m,) distinct row ids.
    Returns BanditLog with instance = rows and (m, ell) actions, cand_pos, q, rho, rewards.
    """
    if not isinstance(policy, VariantPolicy):
        raise TypeError(f"policy: expected a VariantPolicy, got {type(policy).__name__}")
    check_csr("Y", Y)
    n, K = policy.cand.shape
    if Y.shape[0] != n:
        raise ValueError(f"Y has {Y.shape[0]} rows but the policy covers {n} training instances")
    if not isinstance(ell, (int, np.integer)) or isinstance(ell, bool):
        raise TypeError(f"ell: expected an int, got {type(ell).__name__}")
    if not (1 <= ell <= K):
        raise ValueError(f"ell must be in [1, K={K}], got {ell}")
    rows = np.asarray(rows, dtype=np.int64)
    if rows.ndim != 1 or (rows.size and (rows.min() < 0 or rows.max() >= n)):
        raise ValueError(f"rows: expected a 1-d array of row ids in [0, {n}), got shape {rows.shape}")
    if np.unique(rows).size != rows.size:
        raise ValueError("rows: row ids must be distinct")
    key = noise_key([*([seed] if np.isscalar(seed) else seed), _SLATE_STREAM])  # type: ignore[list-item]
    m = rows.size
    out = {"cand_pos": np.empty((m, ell), np.int64), "actions": np.empty((m, ell), np.int64),
           "q": np.empty((m, ell), np.float64), "rho": np.empty((m, ell), np.float64)}
    for s in range(0, m, _ROW_BLOCK):
        r = rows[s:s + _ROW_BLOCK]
        pos, act, q, rj = _slates(policy.cand[r], policy.rho[r], r, ell, key)
        blk = slice(s, s + r.size)
        out["cand_pos"][blk], out["actions"][blk], out["q"][blk], out["rho"][blk] = pos, act, q, rj
    rewards = label_membership(Y, rows, out["actions"])
    return BanditLog(instance=rows, actions=out["actions"], cand_pos=out["cand_pos"], q=out["q"],
                     rho=out["rho"], rewards=rewards)
