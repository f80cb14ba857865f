"""Stochastic (slate) metrics of docs/metrics.md: R@k, nDCR@k, PSR@k of a Plackett-Luce policy.

Slates y_1..y_k of distinct labels are drawn from the policy by Plackett-Luce without replacement
(Gumbel-top-k). Expectations are exact where cheap — position probabilities by the exponential-race
integral of poxm_core/metrics/position_probs.py, no m^k enumeration — else Monte-Carlo with S slates per
instance and its standard error (docs/metrics.md). docs/metrics.md gives the formulas.
"""
from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from poxm_core.metrics.inputs import (CHUNK_ELEMS, check_count, check_ids, check_inv_prop, check_ks, check_labels,
                                     check_probs, discount_cumsum, member, true_keys, truth_summaries)
from poxm_core.metrics.position_probs import (elements_per_row, node_bounded_groups, position_sums,
                                              position_sums_torch)
from poxm_core.common.errors import PoxmInputError
from poxm_core.metrics.gumbel_noise import _NOISE_BLOCK, block_gumbel, torch_gumbel

# Exact when instances x support <= this (e.g. 3000 test instances at m = 100): the exact quadrature
# costs several times the 32-slate Monte-Carlo per row (docs/metrics.md, docs/performance.md), so larger
# tables use Monte-Carlo
EXACT_BUDGET = 300_000
NAMES = ("R", "nDCR", "PSR")
# float64 elements per working array of the quadrature on a GPU (about 256 MB each at 300 nodes a row;
# more where tiny probabilities need more panels): a chunk costs a few hundred kernels whatever its size
GPU_CHUNK_ELEMS = 1 << 25
# float64 elements of Gumbel noise per chunk of the Monte-Carlo on a device (64 MB): the draws of a chunk
# are a few kernels whatever its size, and a trial evaluates its heads on threads, each holding its chunk
GPU_MC_CHUNK_ELEMS = 1 << 23

__all__ = ["stochastic_metrics", "EXACT_BUDGET"]


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


def _mc_slates(probs: np.ndarray, seed: int, a: int, S: int, kk: int):
    """Gumbel-top-kk: (idx (c, S, kk) columns in draw order, filled (c, S, kk) real positions)."""
    c, m = probs.shape
    with np.errstate(divide="ignore"):
        keys = np.log(probs)[:, None, :] + block_gumbel(seed, a, a + c, S, m)
    if kk < m:
        idx = np.argpartition(-keys, kk - 1, axis=-1)[..., :kk]
    else:
        idx = np.broadcast_to(np.arange(m), (c, S, m))
    sel = np.take_along_axis(keys, idx, axis=-1)
    o = np.argsort(-sel, axis=-1, kind="stable")
    idx = np.take_along_axis(idx, o, axis=-1)
    filled = np.isfinite(np.take_along_axis(sel, o, axis=-1))   # -inf key = zero prob: slate ends
    return idx, filled


def _mc_chunk_torch(pr, hit, w, ks, idcg, disc, seed, a, S, kk, est, var, device, out_rows=None) -> None:
    """`_mc_chunk` on a torch device (a trial's GPU): the slates drawn and scored there instead of NumPy's
    noise on the host, which for wide supports is most of an evaluation (an all-label head's 1,024
    labels: 32 x 1,024 Gumbel draws a test row; docs/performance.md). Same estimator and standard error;
    other draws."""
    c = pr.shape[0]
    if ks[-1] > 1:
        prt = torch.as_tensor(pr, device=device)
        with torch.no_grad():
            keys = torch.log(prt).unsqueeze(1) + torch_gumbel(seed, a, a + c, S, prt.shape[1], device)
            sel, idx = torch.topk(keys, kk, dim=-1, sorted=True)          # draw order: largest key first
            del keys
            filled = torch.isfinite(sel)                                   # -inf key = zero prob: slate ends
            ht = torch.as_tensor(hit, device=device).unsqueeze(1).expand(c, S, -1).gather(-1, idx) & filled
            wt = torch.as_tensor(w, device=device).unsqueeze(1).expand(c, S, -1).gather(-1, idx)
            dt = torch.as_tensor(disc[:kk], device=device)
            hf = ht.double()
            ch = torch.cumsum(hf, dim=-1)
            cdcg = torch.cumsum(hf * dt, dim=-1)
            cps = torch.cumsum(torch.where(ht, wt, torch.zeros((), dtype=wt.dtype, device=device)), dim=-1)
            idt = torch.as_tensor(idcg, device=device, dtype=torch.float64)
            keys, sums = [], []       # read back in one transfer (a synchronisation per value cost more)
            for k in (k for k in ks if k > 1):
                j = min(k, kk) - 1
                idk = idt[:, k - 1].unsqueeze(1)
                triple = (ch[..., j] / k,
                          torch.where(idk > 0, cdcg[..., j] / torch.where(idk > 0, idk, torch.ones_like(idk)),
                                      torch.zeros((), dtype=torch.float64, device=device)),
                          cps[..., j])
                for nm, v in zip(NAMES, triple):
                    keys.append((est, (nm, k)))
                    sums.append(v.mean(dim=1).sum())
                    if out_rows is not None and (nm, k) in out_rows:
                        out_rows[nm, k][a:a + c] = v.mean(dim=1).cpu().numpy()
                    if S > 1:
                        keys.append((var, (nm, k)))
                        sums.append(v.var(dim=1, unbiased=True).sum())
            for (acc, key), value in zip(keys, torch.stack(sums).tolist() if sums else []):
                acc[key] += value
    if ks[0] == 1:
        p_hit = (pr * hit).sum(1)
        est["R", 1] += float(p_hit.sum())
        est["nDCR", 1] += float(p_hit.sum())
        est["PSR", 1] += float((pr * w).sum())
        _first_rows(out_rows, a, p_hit, (pr * w).sum(1))


def _first_rows(rows, a: int, p_hit, ps) -> None:
    """The exact k = 1 values of the chunk's rows into `rows` (where asked for)."""
    if rows is None:
        return
    for nm, v in (("R", p_hit), ("nDCR", p_hit), ("PSR", ps)):
        if (nm, 1) in rows:
            rows[nm, 1][a:a + len(v)] = v


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _map_chunks(fn, starts: range) -> list:
    """[fn(a) for a in starts], by a module-wide thread pool when there is more than one chunk."""
    global _POOL
    if len(starts) <= 1 or (os.cpu_count() or 1) <= 1:
        return [fn(a) for a in starts]
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=min(32, os.cpu_count() or 1), thread_name_prefix="slate-metrics")
    return list(_POOL.map(fn, starts))


def _exact_chunk(pr, hit, w, ks, idcg, disc, est, device=None, out_rows=None, a: int = 0,
                 max_elems: int = 1 << 62) -> None:
    """Add the chunk's exact expectations to est[(name, k)]: position probabilities by quadrature (on
    `device` when it is a GPU: the same quadrature in torch, equal to round-off). The chunk was sized
    for 300 nodes a row; rows that need far more are computed in groups within `max_elems` elements a
    working array (position_probs.node_bounded_groups)."""
    kmax = ks[-1]
    vals = np.stack([hit.astype(np.float64), w], axis=2)
    r = max(1, int((np.any(vals != 0, axis=2) & (pr > 0)).sum(1).max()))
    S = np.empty((pr.shape[0], kmax, 2))         # (c, kmax, 2), by groups bounded at their nodes a row
    for rows in node_bounded_groups(pr, r, kmax, max_elems):
        if device is not None:
            S[rows] = position_sums_torch(torch.as_tensor(pr[rows], device=device),
                                          torch.as_tensor(vals[rows], device=device), kmax).cpu().numpy()
        else:
            S[rows] = position_sums(pr[rows], vals[rows], kmax)
    cum_hit = np.cumsum(S[:, :, 0], axis=1)
    cum_dcg = np.cumsum(S[:, :, 0] * disc[:kmax], axis=1)
    cum_ps = np.cumsum(S[:, :, 1], axis=1)
    for k in ks:
        idk = idcg[:, k - 1]
        est["R", k] += float(cum_hit[:, k - 1].sum() / k)
        est["nDCR", k] += float(np.divide(cum_dcg[:, k - 1], idk, out=np.zeros(len(idk)), where=idk > 0).sum())
        est["PSR", k] += float(cum_ps[:, k - 1].sum())
        if out_rows is not None:   # each row's value (the sums above stay as they were: the same floats)
            if ("R", k) in out_rows:
                out_rows["R", k][a:a + len(idk)] = cum_hit[:, k - 1] / k
            if ("PSR", k) in out_rows:
                out_rows["PSR", k][a:a + len(idk)] = cum_ps[:, k - 1]
            if ("nDCR", k) in out_rows:
                out_rows["nDCR", k][a:a + len(idk)] = np.divide(cum_dcg[:, k - 1], idk, out=np.zeros(len(idk)),
                                                                where=idk > 0)


def _mc_chunk(pr, hit, w, ks, idcg, disc, seed, a, S, kk, est, var, out_rows=None) -> None:
    """Add the chunk's Monte-Carlo means (and sample variances) for k > 1; k = 1 exactly."""
    c = pr.shape[0]
    if ks[-1] > 1:
        idx, filled = _mc_slates(pr, seed, a, S, kk)
        rows = np.arange(c)[:, None, None]
        vals = _slate_values(hit[rows, idx], w[rows, idx], filled, [k for k in ks if k > 1], idcg, disc)
        for k, triple in vals.items():
            for nm, v in zip(NAMES, triple):
                est[nm, k] += float(v.mean(axis=1).sum())
                if out_rows is not None and (nm, k) in out_rows:
                    out_rows[nm, k][a:a + c] = v.mean(axis=1)
                if S > 1:
                    var[nm, k] += float(v.var(axis=1, ddof=1).sum())
    if ks[0] == 1:   # exact: the first label is drawn with probability pi_j
        p_hit = (pr * hit).sum(1)
        est["R", 1] += float(p_hit.sum())
        est["nDCR", 1] += float(p_hit.sum())   # IDCG@1 = 1 whenever a hit is possible
        est["PSR", 1] += float((pr * w).sum())
        _first_rows(out_rows, a, p_hit, (pr * w).sum(1))


def _chunk_rows(Y, m: int, S: int, kmax: int, exact: bool, device, chunk_elems: int) -> int:
    """Rows per chunk: the working arrays of one chunk hold about `chunk_elems` elements (on a GPU more,
    unless the caller set them: a chunk costs a few hundred kernels whatever its size). Monte-Carlo
    chunks are whole noise blocks, so the draws do not depend on the chunking."""
    budget = _elems_budget(exact, device, chunk_elems)
    if exact:
        r = min(m, int(np.diff(Y.indptr).max()))   # relevant columns per row, at most
        return max(1, budget // elements_per_row(m, max(r, 1), kmax))
    return max(1, budget // (S * m) // _NOISE_BLOCK) * _NOISE_BLOCK


def _elems_budget(exact: bool, device, chunk_elems: int) -> int:
    """Elements a working array of a chunk may hold: the caller's, else larger ones on a GPU."""
    if device is None or chunk_elems != CHUNK_ELEMS:
        return chunk_elems
    return GPU_CHUNK_ELEMS if exact else GPU_MC_CHUNK_ELEMS


def _per_instance_arrays(per_instance: dict | None, ks: list[int], n: int) -> dict[tuple[str, int], np.ndarray]:
    """{(name, k): zeros(n)} for each metric `per_instance` names; an unknown name is an input error."""
    want = {}
    for name in (per_instance or {}):
        nm, _, k = name.partition("@")
        if nm not in NAMES or not k.isdigit() or int(k) not in ks:
            raise PoxmInputError(f"per_instance: {name!r} is not one of the computed metrics "
                                 f"{[f'{x}@{k}' for x in NAMES for k in ks]}")
        want[nm, int(k)] = np.zeros(n)
    return want


@dataclass(frozen=True)
class _Chunks:
    """One call's checked inputs, cut into chunks of `chunk` rows that are computed independently."""
    Y: object
    support: np.ndarray
    probs: np.ndarray
    inv: np.ndarray
    ks: list[int]
    S: int
    seed: int
    exact: bool
    chunk: int
    device: object
    want: dict                  # per-instance arrays to fill ({} for none)
    elems: int                  # elements a working array may hold (the chunk's rows at their own nodes)

    def sums(self, a: int):
        """Chunk [a, a + chunk)'s (sum of best_i per k, additions to est, additions to var)."""
        n, L = self.Y.shape
        kmax, m = self.ks[-1], self.support.shape[1]
        cd = discount_cumsum(kmax)
        disc = np.diff(cd)
        b = min(n, a + self.chunk)
        keys = true_keys(self.Y, a, b)
        ny, best = truth_summaries(keys, b - a, L, self.inv, kmax)
        idcg = cd[np.minimum(np.arange(1, kmax + 1)[None, :], ny[:, None])]
        pr = self.probs[a:b]
        hit = member(keys, self.support[a:b], L)
        w = np.where(hit, self.inv[np.maximum(self.support[a:b], 0)], 0.0)
        e = {(nm, k): 0.0 for nm in NAMES for k in self.ks}
        v = {(nm, k): 0.0 for nm in NAMES for k in self.ks}
        want, kk = self.want or None, min(kmax, m)
        if self.exact:
            _exact_chunk(pr, hit, w, self.ks, idcg, disc, e, self.device, want, a, self.elems)
        elif self.device is not None:
            _mc_chunk_torch(pr, hit, w, self.ks, idcg, disc, self.seed, a, self.S, kk, e, v, self.device, want)
        else:
            _mc_chunk(pr, hit, w, self.ks, idcg, disc, self.seed, a, self.S, kk, e, v, want)
        return best.sum(0), e, v

    def totals(self):
        """(est, var, sum of best_i per k) over every chunk. On the CPU the chunks run on a thread pool
        (NumPy's large array operations release the GIL); their sums are added in chunk order, so the
        result is the same float for float as the sequential loop's."""
        est = {(nm, k): 0.0 for nm in NAMES for k in self.ks}
        var = {(nm, k): 0.0 for nm in NAMES for k in self.ks}
        best_sum = np.zeros(self.ks[-1])
        starts = range(0, self.Y.shape[0], self.chunk)
        for best_c, e, v in (map(self.sums, starts) if self.device is not None else _map_chunks(self.sums, starts)):
            best_sum += best_c
            for key in est:
                est[key] += e[key]
                var[key] += v[key]
        return est, var, best_sum


def _estimates(est: dict, var: dict, best_sum: np.ndarray, ks: list[int], n: int, S: int,
               exact: bool) -> dict[str, float]:
    """Each metric's value (PSR over the sum of best_i, the others over n) and its standard error:
    0 where exact, nan for one slate, else the Monte-Carlo error."""
    out: dict[str, float] = {}
    for k in ks:
        mc = not exact and k > 1
        for nm in NAMES:
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


def stochastic_metrics(Y, support, probs, inv_prop, ks=(1, 3, 5), n_slates: int = 32, seed: int = 0,
                       exact_budget: int = EXACT_BUDGET, *, chunk_elems: int = CHUNK_ELEMS,
                       device=None, per_instance: dict | None = None) -> dict[str, float]:
    """R@k, nDCR@k, PSR@k of a stochastic policy and their Monte-Carlo standard errors "<name>_se".

    Slates y_1..y_k of distinct labels are drawn from the policy by Plackett-Luce without
    replacement (Gumbel-top-k on log probs); with hit_l = 1{y_l in Y*_i} (docs/metrics.md, paper §5):
      R@k    = (1/n) sum_i E[(1/k) sum_{l<=k} hit_l] = (1/n) sum_i (1/k) sum_{l<=k} sum_y hit_y P(y at l)
      nDCR@k = (1/n) sum_i E[DCG_i@k] / IDCG_i@k     (IDCG over min(k, |Y*_i|); Y*_i empty adds 0)
      PSR@k  = sum_i E[sum_{l<=k} hit_l / p_{y_l}] / sum_i best_i@k   (ratio of sums, as PSP@k)
    If a row has fewer than k positive-probability labels its slate is that short (the 1/k stays).

    Exact (se = 0) for k = 1 (E[hit_1] = sum_j pi_j hit_j) and, when n * m <= `exact_budget`, for
    every k: the position probabilities P(y at l) come from the exponential-race integral
    (plackett_luce.position_sums, quadrature error ~1e-12). Otherwise Monte-Carlo with S = n_slates
    seeded slates per instance:
      estimate = (1/n) sum_i mean_s v_is,  se = sqrt(sum_i var_s(v_is) / S) / n   (PSR: / sum_i best_i)
    with var_s the unbiased sample variance over the S slates of instance i (se is nan when S = 1),
    the error of the Monte-Carlo approximation to the expectation on these instances.
    `exact_budget=0` forces Monte-Carlo. `device`: a torch device (the trial's GPU) computes the exact
    position probabilities there (the same quadrature; in larger chunks by default, and a chunk's
    hardest row sets its number of panels, so a row's value may move within the quadrature error,
    ~1e-10) and draws and scores the Monte-Carlo slates there (torch's generator, seeded per block of
    rows like NumPy's: the same estimator and standard error, other draws, so values differ from the
    NumPy path's within the Monte-Carlo error); None: NumPy.

    `per_instance`: a dict whose keys name metrics ("R@5", "PSR@5", ...): each is set to the (n,) float64
    array of every instance's share, whose mean is the returned value (an instance's expectation, or
    its Monte-Carlo mean over the S slates; PSR's numerator over the mean best_i, PSR being a ratio of
    sums). The claims' intervals read them for their test-set term; the returned values do not change.

    Y CSR (n, L); support (n, m) int64 (-1 padding, prob 0); probs (n, m) float64 rows summing to 1;
    inv_prop (L,). Memory is bounded by `chunk_elems` elements per working array.
    """
    Y = check_labels(Y)
    n, L = Y.shape
    ks = check_ks(ks)
    support = check_ids("support", support, L, n)
    probs = check_probs(support, probs)
    inv = check_inv_prop(inv_prop, L)
    S = check_count("n_slates", n_slates, 1)
    seed = check_count("seed", seed, 0)
    exact_budget = check_count("exact_budget", exact_budget, 0)
    chunk_elems = check_count("chunk_elems", chunk_elems, 1)
    m = support.shape[1]
    exact = ks[-1] == 1 or n * m <= exact_budget
    want = _per_instance_arrays(per_instance, ks, n)
    chunks = _Chunks(Y, support, probs, inv, ks, S, seed, exact, _chunk_rows(Y, m, S, ks[-1], exact, device, chunk_elems),
                     device, want, _elems_budget(exact, device, chunk_elems))
    est, var, best_sum = chunks.totals()
    for (nm, k), arr in want.items():    # PSR: each row's numerator over the mean denominator
        den = best_sum[k - 1] / n if nm == "PSR" else 1.0
        per_instance[f"{nm}@{k}"] = arr / den if den > 0 else np.zeros(n)
    return _estimates(est, var, best_sum, ks, n, S, exact)
