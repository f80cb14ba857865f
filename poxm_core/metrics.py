"""Ranking metrics of DESIGN §8, every cut-off in one vectorised call, memory bounded by chunks.

Inputs (no n x L array is ever built):
  Y         CSR (n, L) true labels; a stored non-zero marks y in Y*_i (explicit zeros are ignored)
  ranked    (n, k) int64 label ids in rank order; -1 = no prediction (counts as a miss)
  support   (n, m) int64 label ids of a stochastic policy; -1 = padding (its prob must be 0)
  probs     (n, m) float64, rows sum to 1 (re-normalised here), zeros allowed
  inv_prop  (L,) float64 inverse propensities 1/p_l (Jain et al.)

Greedy (a ranking):  P@k, nDCG@k, PSP@k.   Stochastic (slates drawn from the policy by
Plackett-Luce without replacement = Gumbel-top-k):  R@k, nDCR@k, PSR@k, the expectations of the
same per-instance quantities over the slate.  All values are fractions in [0, 1]; docs/metrics.md
gives the formulas, the normalisations (Extreme Classification Repository / napkinxc) and the
Monte-Carlo standard error.
"""
from __future__ import annotations

import itertools
import math
from typing import Iterable

import numpy as np
import scipy.sparse as sp

from poxm_core.csr import check_sparse
from poxm_core.errors import PoxmInputError

_CHUNK_ELEMS = 1 << 22   # ~32 MB of float64 per working array
_NOISE_BLOCK = 64        # rows per independently seeded noise block: results do not depend on chunking

__all__ = ["greedy_metrics", "psp_unnormalised", "stochastic_metrics", "greedy_from_policy",
           "covering_curve"]


# ----------------------------------------------------------------------------- validation

def _check_labels(Y) -> sp.csr_matrix:
    check_sparse("Y", Y, "a scipy sparse (n, L) label matrix")
    Y = sp.csr_matrix(Y)   # no copy when already CSR
    if Y.shape[0] == 0:
        raise PoxmInputError("Y: expected at least one instance, got 0 rows")
    return Y


def _check_ks(ks: Iterable[int]) -> tuple[int, ...]:
    try:
        ks = tuple(ks)
    except TypeError:
        raise TypeError(f"ks: expected an iterable of positive ints, got {type(ks).__name__}") from None
    if not ks or not all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k > 0 for k in ks):
        raise PoxmInputError(f"ks: expected positive ints such as (1, 3, 5), got {ks!r}")
    return tuple(sorted({int(k) for k in ks}))


def _check_inv_prop(inv_prop, L: int) -> np.ndarray:
    inv = np.asarray(inv_prop, dtype=np.float64)
    if inv.shape != (L,):
        raise PoxmInputError(f"inv_prop: expected shape ({L},) (one value per label), got {inv.shape}")
    if not (np.all(np.isfinite(inv)) and np.all(inv > 0)):
        raise PoxmInputError("inv_prop: expected finite positive inverse propensities 1/p_l")
    return inv


def _check_ids(name: str, ids, L: int, n: int | None) -> np.ndarray:
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


def _check_probs(support: np.ndarray, probs) -> np.ndarray:
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


def _check_count(name: str, v, minimum: int) -> int:
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
        raise TypeError(f"{name}: expected an int, got {type(v).__name__}")
    if v < minimum:
        raise PoxmInputError(f"{name}: expected an int >= {minimum}, got {v}")
    return int(v)


# ----------------------------------------------------------------------------- shared pieces

def _true_keys(Y: sp.csr_matrix, a: int, b: int) -> np.ndarray:
    """Sorted unique int64 keys (i - a) * L + l of the true labels of rows a..b-1."""
    L = Y.shape[1]
    lo, hi = Y.indptr[a], Y.indptr[b]
    rows = np.repeat(np.arange(b - a, dtype=np.int64), np.diff(Y.indptr[a:b + 1]))
    keep = Y.data[lo:hi] != 0
    return np.unique(rows[keep] * L + Y.indices[lo:hi][keep].astype(np.int64))


def _member(keys: np.ndarray, ids: np.ndarray, L: int) -> np.ndarray:
    """hit[i, j] = 1{ids[i, j] in Y*_i} for ids (c, k) of the chunk whose true keys are `keys`."""
    q = np.arange(ids.shape[0], dtype=np.int64)[:, None] * L + ids
    if keys.size == 0:
        return np.zeros(ids.shape, dtype=bool)
    pos = np.minimum(np.searchsorted(keys, q), keys.size - 1)
    return (keys[pos] == q) & (ids >= 0)


def _discount_cumsum(kmax: int) -> np.ndarray:
    """cd[j] = sum_{l<=j} 1/log2(l+1), cd[0] = 0: IDCG@k of an instance is cd[min(k, |Y*|)]."""
    return np.concatenate([[0.0], np.cumsum(1.0 / np.log2(np.arange(2, kmax + 2)))])


def _truth_summaries(keys: np.ndarray, c: int, L: int, inv: np.ndarray, kmax: int):
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


# ----------------------------------------------------------------------------- greedy

def _greedy_sums(Y, ranked, inv_prop, ks, chunk_rows):
    Y = _check_labels(Y)
    n, L = Y.shape
    ks = _check_ks(ks)
    kmax = ks[-1]
    ranked = _check_ids("ranked", ranked, L, n)
    if ranked.shape[1] < kmax:
        raise PoxmInputError(f"ranked: expected at least max(ks) = {kmax} columns, got {ranked.shape[1]}")
    inv = _check_inv_prop(inv_prop, L)
    chunk_rows = _check_count("chunk_rows", chunk_rows, 1)
    cd = _discount_cumsum(kmax)
    disc = np.diff(cd)
    s = {name: np.zeros(kmax) for name in ("hits", "ndcg", "psp", "best")}
    for a in range(0, n, chunk_rows):
        b = min(n, a + chunk_rows)
        keys = _true_keys(Y, a, b)
        ny, best = _truth_summaries(keys, b - a, L, inv, kmax)
        r = ranked[a:b, :kmax]
        hit = _member(keys, r, L)
        s["hits"] += np.cumsum(hit, axis=1).sum(0)
        idcg = cd[np.minimum(np.arange(1, kmax + 1)[None, :], ny[:, None])]
        dcg = np.cumsum(hit * disc, axis=1)
        s["ndcg"] += np.divide(dcg, idcg, out=np.zeros_like(dcg), where=idcg > 0).sum(0)
        s["psp"] += np.cumsum(np.where(hit, inv[np.maximum(r, 0)], 0.0), axis=1).sum(0)
        s["best"] += best.sum(0)
    return n, ks, s


def greedy_metrics(Y, ranked, inv_prop, ks=(1, 3, 5), *, chunk_rows: int = 65536) -> dict[str, float]:
    """P@k, nDCG@k, PSP@k of a ranking, for every k in `ks` (fractions in [0, 1]).

    With hit_il = 1{ranked[i, l] in Y*_i} (l = 1..k) and n instances:
      P@k    = (1/n) sum_i (1/k) sum_{l<=k} hit_il
      nDCG@k = (1/n) sum_i DCG_i@k / IDCG_i@k,  DCG_i@k = sum_{l<=k} hit_il / log2(l+1),
               IDCG_i@k = sum_{l<=min(k,|Y*_i|)} 1/log2(l+1); an instance with Y*_i empty adds 0
      PSP@k  = sum_i sum_{l<=k} hit_il / p_{y_il}  /  sum_i best_i@k,
               best_i@k = sum of the k largest 1/p_l over Y*_i (XC repository; napkinxc normalize=True)
    Greedy policies of DESIGN §8 (paper §5 / Table 2). Y CSR (n, L); ranked (n, >= max(ks)) int64,
    -1 = no prediction; inv_prop (L,).  Rows are processed `chunk_rows` at a time.
    """
    n, ks, s = _greedy_sums(Y, ranked, inv_prop, ks, chunk_rows)
    out: dict[str, float] = {}
    for k in ks:
        out[f"P@{k}"] = float(s["hits"][k - 1] / (n * k))
        out[f"nDCG@{k}"] = float(s["ndcg"][k - 1] / n)
        out[f"PSP@{k}"] = float(s["psp"][k - 1] / s["best"][k - 1]) if s["best"][k - 1] > 0 else 0.0
    return out


def psp_unnormalised(Y, ranked, inv_prop, ks=(1, 3, 5), *, chunk_rows: int = 65536) -> dict[str, float]:
    """uPSP@k = (1/n) sum_i (1/k) sum_{l<=k} hit_il / p_{y_il}: napkinxc psprecision_at_k(normalize=False).

    Not bounded by 1 (it is in units of inverse propensity). Keys "uPSP@k". Shapes as greedy_metrics.
    """
    n, ks, s = _greedy_sums(Y, ranked, inv_prop, ks, chunk_rows)
    return {f"uPSP@{k}": float(s["psp"][k - 1] / (n * k)) for k in ks}


def greedy_from_policy(support, probs_or_scores, k: int) -> np.ndarray:
    """Top-k labels of each row by score, descending, ties by smaller label id -> (n, k) int64.

    support (n, m) int64 (-1 = padding, always ranked last); probs_or_scores (n, m) float (any
    monotone score: probabilities, logits). Rows with fewer than k real labels are padded with -1.
    """
    support = np.asarray(support)
    if not np.issubdtype(support.dtype, np.integer) or support.ndim != 2:
        raise TypeError(f"support: expected a 2-D integer array, got dtype {support.dtype}, ndim {support.ndim}")
    scores = np.asarray(probs_or_scores, dtype=np.float64)
    if scores.shape != support.shape:
        raise PoxmInputError(f"probs_or_scores: expected the shape of support {support.shape}, got {scores.shape}")
    if np.any(np.isnan(scores)):
        raise PoxmInputError("probs_or_scores: contains NaN")
    k = _check_count("k", k, 1)
    n, m = support.shape
    pad = support < 0
    label_key = np.where(pad, np.iinfo(np.int64).max, support.astype(np.int64))
    order = np.lexsort((label_key, -np.where(pad, -np.inf, scores), pad), axis=-1)[:, :k]
    top = np.where(pad, -1, support.astype(np.int64))[np.arange(n)[:, None], order]
    if k > m:
        top = np.concatenate([top, np.full((n, k - m), -1, dtype=np.int64)], axis=1)
    return top


# ----------------------------------------------------------------------------- covering

def covering_curve(Y, cand, *, chunk_rows: int = 65536) -> np.ndarray:
    """cover[k-1] = sum_i |Y*_i ∩ cand_i[:k]| / sum_i |Y*_i| for k = 1..K (paper Fig. 1).

    Y CSR (n, L); cand (n, K) int64 in rho order (-1 = padding). Returns (K,) float64 (all zeros
    when no instance has a true label).
    """
    Y = _check_labels(Y)
    n, L = Y.shape
    cand = _check_ids("cand", cand, L, n)
    chunk_rows = _check_count("chunk_rows", chunk_rows, 1)
    num = np.zeros(cand.shape[1])
    den = 0
    for a in range(0, n, chunk_rows):
        b = min(n, a + chunk_rows)
        keys = _true_keys(Y, a, b)
        den += keys.size
        num += np.cumsum(_member(keys, cand[a:b], L), axis=1).sum(0)
    return num / den if den else num


# ----------------------------------------------------------------------------- stochastic

def _slate_values(hit_pos, w_pos, filled, ks, idcg, disc):
    """Per-slate R, DCG/IDCG and PS sums for each k. hit_pos/w_pos/filled (c, S, kk) by position."""
    kk = hit_pos.shape[-1]
    h = hit_pos & filled
    ch = np.cumsum(h, axis=-1)
    cdcg = np.cumsum(h * disc[:kk], axis=-1)
    cps = np.cumsum(np.where(h, w_pos, 0.0), axis=-1)
    out = {}
    for k in ks:
        j = min(k, kk) - 1   # a slate shorter than k simply has no hit beyond its end
        idk = idcg[:, k - 1][:, None]
        out[k] = (ch[..., j] / k,
                  np.divide(cdcg[..., j], idk, out=np.zeros(cdcg.shape[:-1]), where=idk > 0),
                  cps[..., j])
    return out


def _block_gumbel(seed: int, a: int, b: int, S: int, m: int) -> np.ndarray:
    """Gumbel noise (b-a, S, m) for rows a..b-1 (a multiple of _NOISE_BLOCK): a fixed function of
    (seed, row block), so the chunk size never changes the draws."""
    parts = []
    for blk_start in range(a, b, _NOISE_BLOCK):
        r = min(b, blk_start + _NOISE_BLOCK) - blk_start
        rng = np.random.default_rng([seed, blk_start // _NOISE_BLOCK])
        parts.append(rng.gumbel(size=(r, S, m)))
    return np.concatenate(parts, axis=0)


def _mc_slates(probs: np.ndarray, seed: int, a: int, S: int, kk: int):
    """Gumbel-top-kk: (idx (c, S, kk) columns in draw order, filled (c, S, kk) real positions)."""
    c, m = probs.shape
    with np.errstate(divide="ignore"):
        keys = np.log(probs)[:, None, :] + _block_gumbel(seed, a, a + c, S, m)
    if kk < m:
        idx = np.argpartition(-keys, kk - 1, axis=-1)[..., :kk]
    else:
        idx = np.broadcast_to(np.arange(m), (c, S, m))
    sel = np.take_along_axis(keys, idx, axis=-1)
    o = np.argsort(-sel, axis=-1, kind="stable")
    idx = np.take_along_axis(idx, o, axis=-1)
    filled = np.isfinite(np.take_along_axis(sel, o, axis=-1))   # -inf key = zero prob: slate ends
    return idx, filled


def _exact_slate_probs(probs: np.ndarray, perms: np.ndarray):
    """P(slate = perms[s]) under Plackett-Luce without replacement, (c, P), and filled (c, P, kk).

    Once the positive-probability labels are exhausted the slate is over; the remaining positions
    are spread uniformly over the zero-probability columns (weight 1/(m - l)) so that the
    probabilities still sum to 1, and are marked unfilled (they score nothing).
    """
    c, m = probs.shape
    kk = perms.shape[1]
    pp = probs[:, perms]                                     # (c, P, kk)
    pos = pp > 0
    before = np.cumsum(pp, axis=-1) - pp
    rem = 1.0 - before
    exhausted = (np.cumsum(pos, axis=-1) - pos) >= (probs > 0).sum(1)[:, None, None]
    uniform = 1.0 / (m - np.arange(kk))
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(exhausted, uniform, np.where(pos, pp / np.maximum(rem, pp), 0.0))
    return factor.prod(axis=-1), pos


def stochastic_metrics(Y, support, probs, inv_prop, ks=(1, 3, 5), n_slates: int = 32, seed: int = 0,
                       exact_threshold: int = 1024, *, chunk_elems: int = _CHUNK_ELEMS) -> dict[str, float]:
    """R@k, nDCR@k, PSR@k of a stochastic policy and their Monte-Carlo standard errors "<name>_se".

    Slates y_1..y_k of distinct labels are drawn from the policy by Plackett-Luce without
    replacement (Gumbel-top-k on log probs); with hit_l = 1{y_l in Y*_i} (DESIGN §8, paper §5):
      R@k    = (1/n) sum_i E[(1/k) sum_{l<=k} hit_l]
      nDCR@k = (1/n) sum_i E[DCG_i@k] / IDCG_i@k     (IDCG over min(k, |Y*_i|); Y*_i empty adds 0)
      PSR@k  = sum_i E[sum_{l<=k} hit_l / p_{y_l}] / sum_i best_i@k   (ratio of sums, as PSP@k)
    If a row has fewer than k positive-probability labels its slate is that short (the 1/k stays).

    Exact for k = 1 (E[hit_1] = sum_j pi_j hit_j) and, when the policy has at most
    `exact_threshold` ordered slates P(m, min(k_max, m)), for every k by enumeration (se = 0).
    Otherwise Monte-Carlo with S = n_slates seeded slates per instance:
      estimate = (1/n) sum_i mean_s v_is,  se = sqrt(sum_i var_s(v_is) / S) / n   (PSR: / sum_i best_i)
    with var_s the unbiased sample variance over the S slates of instance i (se is nan when S = 1).
    This is the error of the Monte-Carlo approximation to the expectation on these instances.

    Y CSR (n, L); support (n, m) int64 (-1 padding, prob 0); probs (n, m) float64 rows summing to 1;
    inv_prop (L,). Memory is bounded by `chunk_elems` elements per working array.
    """
    Y = _check_labels(Y)
    n, L = Y.shape
    ks = _check_ks(ks)
    kmax = ks[-1]
    support = _check_ids("support", support, L, n)
    probs = _check_probs(support, probs)
    inv = _check_inv_prop(inv_prop, L)
    S = _check_count("n_slates", n_slates, 1)
    seed = _check_count("seed", seed, 0)
    exact_threshold = _check_count("exact_threshold", exact_threshold, 0)
    chunk_elems = _check_count("chunk_elems", chunk_elems, 1)
    m = support.shape[1]
    kk = min(kmax, m)
    cd = _discount_cumsum(kmax)
    disc = np.diff(cd)
    n_perm = math.perm(m, kk)
    exact = kmax == 1 or n_perm <= exact_threshold
    if exact and kmax > 1:
        perms = np.array(list(itertools.permutations(range(m), kk)), dtype=np.int64)
        chunk = max(1, chunk_elems // (n_perm * kk))
    else:
        chunk = max(1, chunk_elems // (S * m) // _NOISE_BLOCK) * _NOISE_BLOCK

    names = ("R", "nDCR", "PSR")
    est = {(nm, k): 0.0 for nm in names for k in ks}
    var = {(nm, k): 0.0 for nm in names for k in ks}
    best_sum = np.zeros(kmax)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        keys = _true_keys(Y, a, b)
        ny, best = _truth_summaries(keys, b - a, L, inv, kmax)
        best_sum += best.sum(0)
        idcg = cd[np.minimum(np.arange(1, kmax + 1)[None, :], ny[:, None])]
        pr = probs[a:b]
        hit = _member(keys, support[a:b], L)
        w = np.where(hit, inv[np.maximum(support[a:b], 0)], 0.0)
        if exact and kmax > 1:
            slate_p, filled = _exact_slate_probs(pr, perms)
            vals = _slate_values(hit[:, perms], w[:, perms], filled, ks, idcg, disc)
            for k in ks:
                for nm, v in zip(names, vals[k]):
                    est[nm, k] += float((slate_p * v).sum())
            continue
        if kmax > 1:
            idx, filled = _mc_slates(pr, seed, a, S, kk)
            rows = np.arange(b - a)[:, None, None]
            vals = _slate_values(hit[rows, idx], w[rows, idx], filled, [k for k in ks if k > 1], idcg, disc)
            for k, triple in vals.items():
                for nm, v in zip(names, triple):
                    est[nm, k] += float(v.mean(axis=1).sum())
                    if S > 1:
                        var[nm, k] += float(v.var(axis=1, ddof=1).sum())
        if ks[0] == 1:   # exact: the first label is drawn with probability pi_j
            p_hit = (pr * hit).sum(1)
            est["R", 1] += float(p_hit.sum())
            est["nDCR", 1] += float(p_hit.sum())   # IDCG@1 = 1 whenever a hit is possible
            est["PSR", 1] += float((pr * w).sum())

    out: dict[str, float] = {}
    for k in ks:
        mc = not exact and k > 1
        for nm in names:
            den = (best_sum[k - 1] if nm == "PSR" else n)
            value = est[nm, k] / den if den > 0 else 0.0
            if not mc:
                se = 0.0
            elif S == 1:
                se = math.nan
            else:
                se = math.sqrt(var[nm, k] / S) / den if den > 0 else 0.0
            out[f"{nm}@{k}"] = float(value)
            out[f"{nm}@{k}_se"] = float(se)
    return out
