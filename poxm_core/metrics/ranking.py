"""Ranking metrics of docs/metrics.md, every cut-off in one vectorised call, memory bounded by chunks.

Inputs (no n x L array is ever built):
  Y         CSR (n, L) true labels; a stored non-zero marks y in Y*_i (explicit zeros are ignored)
  ranked    (n, k) int64 label ids in rank order; -1 = no prediction (counts as a miss)
  support   (n, m) int64 label ids of a stochastic policy; -1 = padding (its prob must be 0)
  probs     (n, m) float64, rows sum to 1 (re-normalised here), zeros allowed
  inv_prop  (L,) float64 inverse propensities 1/p_l (Jain et al.)

Greedy (a ranking):  P@k, nDCG@k, PSP@k.   Stochastic (slates drawn from the policy by
Plackett-Luce without replacement = Gumbel-top-k):  R@k, nDCR@k, PSR@k, the expectations of the
same per-instance quantities over the slate.  All values are fractions in [0, 1]; docs/metrics.md
gives the formulas, the normalisations (Extreme Classification Repository / napkinxc), the exact
computation and the Monte-Carlo standard error. The stochastic metrics live in slate_metrics.py and
are re-exported here; input checks and shared kernels in metric_inputs.py.
"""
from __future__ import annotations

import numpy as np

from poxm_core.common.errors import PoxmInputError
from poxm_core.metrics.inputs import (check_count, check_ids, check_inv_prop, check_ks, check_labels,
                                     discount_cumsum, member, true_keys, truth_summaries)
from poxm_core.metrics.slate import stochastic_metrics

__all__ = ["greedy_metrics", "greedy_per_instance", "psp_unnormalised", "stochastic_metrics", "greedy_from_policy",
           "covering_curve"]


# ----------------------------------------------------------------------------- greedy

def _greedy_chunks(Y, ranked, inv_prop, ks, chunk_rows):
    """The checked inputs, then per chunk of rows: (a, b, hit (c, kmax) bool, ranked ids (c, kmax), number
    of true labels ny (c,), best_i@k (c, kmax)). The one reading of a ranking against the labels that
    the greedy sums and the per-instance values share."""
    Y = check_labels(Y)
    n, L = Y.shape
    ks = check_ks(ks)
    kmax = ks[-1]
    ranked = check_ids("ranked", ranked, L, n)
    if ranked.shape[1] < kmax:
        raise PoxmInputError(f"ranked: expected at least max(ks) = {kmax} columns, got {ranked.shape[1]}")
    inv = check_inv_prop(inv_prop, L)
    chunk_rows = check_count("chunk_rows", chunk_rows, 1)

    def chunks():
        for a in range(0, n, chunk_rows):
            b = min(n, a + chunk_rows)
            keys = true_keys(Y, a, b)
            ny, best = truth_summaries(keys, b - a, L, inv, kmax)
            r = ranked[a:b, :kmax]
            yield a, b, member(keys, r, L), r, ny, best
    return n, ks, inv, chunks()


def _greedy_sums(Y, ranked, inv_prop, ks, chunk_rows):
    n, ks, inv, chunks = _greedy_chunks(Y, ranked, inv_prop, ks, chunk_rows)
    kmax = ks[-1]
    cd = discount_cumsum(kmax)
    disc = np.diff(cd)
    s = {name: np.zeros(kmax) for name in ("hits", "ndcg", "psp", "best")}
    for _, _, hit, r, ny, best in chunks:
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
    Greedy policies of docs/metrics.md (paper §5 / Table 2). Y CSR (n, L); ranked (n, >= max(ks)) int64,
    -1 = no prediction; inv_prop (L,).  Rows are processed `chunk_rows` at a time.
    """
    n, ks, s = _greedy_sums(Y, ranked, inv_prop, ks, chunk_rows)
    out: dict[str, float] = {}
    for k in ks:
        out[f"P@{k}"] = float(s["hits"][k - 1] / (n * k))
        out[f"nDCG@{k}"] = float(s["ndcg"][k - 1] / n)
        out[f"PSP@{k}"] = float(s["psp"][k - 1] / s["best"][k - 1]) if s["best"][k - 1] > 0 else 0.0
    return out


def greedy_per_instance(Y, ranked, inv_prop, k: int, *, chunk_rows: int = 65536) -> dict[str, np.ndarray]:
    """Each test instance's share of P@k and PSP@k: {"P@k": (n,), "PSP@k": (n,)} float64 whose means are
    exactly `greedy_metrics`' P@k and PSP@k. P@k_i = (1/k) sum_{l<=k} hit_il; PSP@k_i = sum_{l<=k}
    hit_il / p_{y_il} / mean_i(best_i@k): PSP is a ratio of sums, so an instance's share divides by the
    mean denominator (the same for every policy on these instances: a paired difference of two policies'
    shares has the PSP difference as its mean). What a claim's interval reads for its test-set term."""
    n, _, inv, chunks = _greedy_chunks(Y, ranked, inv_prop, (k,), chunk_rows)
    p, ps, best = np.zeros(n), np.zeros(n), 0.0
    for a, b, hit, r, _, bst in chunks:
        p[a:b] = hit.sum(1) / k
        ps[a:b] = np.where(hit, inv[np.maximum(r, 0)], 0.0).sum(1)
        best += float(bst[:, k - 1].sum())
    return {f"P@{k}": p, f"PSP@{k}": ps / (best / n) if best > 0 else np.zeros(n)}


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
    k = check_count("k", k, 1)
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
    Y = check_labels(Y)
    n, L = Y.shape
    cand = check_ids("cand", cand, L, n)
    chunk_rows = check_count("chunk_rows", chunk_rows, 1)
    num = np.zeros(cand.shape[1])
    den = 0
    for a in range(0, n, chunk_rows):
        b = min(n, a + chunk_rows)
        keys = true_keys(Y, a, b)
        den += keys.size
        num += np.cumsum(member(keys, cand[a:b], L), axis=1).sum(0)
    return num / den if den else num
