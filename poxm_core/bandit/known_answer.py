"""A small contextual slate bandit whose reward probabilities are known for every (x, y).

Known-answer check for the learners (docs/protocol.md, docs/estimators.md, docs/methods.md): the true value of any policy can be computed, so
a learner's deployed value is measured, not estimated.

World (seeded by `make_world`):
  - contexts x ~ N(0, I_m) (dense, m ~ 16); labels y in [L] (L ~ 50);
  - true click probability P(r = 1 | x, y) = sigmoid(z(x, y)), z(x, y) = a_y . x + c_y with
    a_y ~ N(0, (weight_scale^2 / m) I), c_y ~ N(bias_mean, bias_std^2);
  - logging score E(x, y) = z(x, y) + label_shift_y + noise * eps_{x,y}: the true logit, spoiled by a
    per-label systematic shift (label_shift_y ~ N(0, label_shift^2), fixed with the world) and a
    per-(x, y) Gaussian eps ~ N(0, 1) (fresh per context);
  - candidates C(x): the top K labels by E (ties by label id); logging policy
    rho(y | x) = softmax over C(x) of E / T, rho = 0 outside C(x). A small T makes rho peaked.
  - Phi^p(x) = the top-p labels of rho = the first p candidates (rho order = E order).

Bandit log (`simulate_log`): a slate of ell labels drawn from rho without replacement (Gumbel-top-k,
i.e. Plackett-Luce), rewards r_ij ~ Bernoulli(P(r=1 | x_i, y_ij)), conditional propensities
q_ij = rho(y_ij | x_i) / (1 - sum_{k<j} rho(y_ik | x_i)) (computed in log space from the mass still
available, no 1 - cumsum cancellation), cand_pos_ij = rank of y_ij in the rho-ordered C(x_i).

True values (V(pi) = E_x E_{slate ~ pi}[ sum_j P(r=1 | x, y_j) ], the mean over the given contexts):
  - `pl_slate_value`: a Plackett-Luce policy with logits s over a support (Phi^p(x), or C(x) for rho),
    slates of ell drawn without replacement. EXACT: a dynamic programme over the unordered sets of
    items drawn so far (the PL transition depends only on that set); the mass left after a set is a
    sum of non-negative terms (no 1 - sum cancellation), in linear space with weights
    exp(s - s_(ell)), or in log space for rows whose top logit exceeds the ell-th by > 600, so
    peaked policies are exact too; cost ~ sum_{k<ell} C(m, k) (m - k) per context (m <= 24).
    `method="mc"` is a Monte-Carlo alternative (Gumbel-top-k with many slates), for checks only.
  - `greedy_slate_value`: the deterministic slate of the ell largest logits of the support.
  - `optimal_value`: the OPTIMUM within Phi^p: the ell labels of Phi^p(x) with the largest true
    probabilities, V* = mean_x of their summed probabilities. No policy restricted to Phi^p can
    exceed it (the expected slate reward is a sum of ell distinct labels' probabilities).

All arrays are plain NumPy (float64 / int64).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

import numpy as np

from poxm_core.common.errors import PoxmInputError
from poxm_core.estimators.plackett_luce import _lse_np as _lse
from poxm_core.common.seeds import tagged_rng

__all__ = ["KnownAnswerWorld", "KnownAnswerContexts", "KnownAnswerLog", "make_world", "sample_contexts",
           "simulate_log", "pl_slate_value", "greedy_slate_value", "optimal_value", "logging_value",
           "phi_scores", "subset_log", "MAX_EXACT_SUPPORT"]

MAX_EXACT_SUPPORT = 24   # the exact DP enumerates sets of < ell items out of the support


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


# ------------------------------------------------------------------------------------ containers
@dataclass(frozen=True)
class KnownAnswerWorld:
    """The true model and the logging policy's parameters (see the module docstring)."""
    A: np.ndarray             # (L, m) true weights a_y
    c: np.ndarray             # (L,) true biases c_y
    label_shift: np.ndarray   # (L,) systematic error of the logging score
    noise: float              # std of the per-(x, y) logging-score noise
    temperature: float        # T of rho = softmax(E / T) over C(x)
    K: int                    # |C(x)|
    ell: int                  # slate size
    seed: int

    @property
    def m(self) -> int:
        return int(self.A.shape[1])

    @property
    def L(self) -> int:
        return int(self.A.shape[0])

    def true_logits(self, X: np.ndarray) -> np.ndarray:
        """(n, L) z(x, y) = a_y . x + c_y."""
        return np.asarray(X, dtype=np.float64) @ self.A.T + self.c


@dataclass(frozen=True)
class KnownAnswerContexts:
    """n contexts with everything the policies and the exact values need."""
    X: np.ndarray          # (n, m) features
    probs: np.ndarray      # (n, L) true P(r = 1 | x, y)
    cand: np.ndarray       # (n, K) label ids of C(x) in rho order (descending E)
    log_rho: np.ndarray    # (n, K) log rho(cand[i, k] | x_i) (normalised over C(x))
    cand_probs: np.ndarray  # (n, K) true P of the candidates, rho order

    @property
    def n(self) -> int:
        return int(self.X.shape[0])


@dataclass(frozen=True)
class KnownAnswerLog:
    """A bandit log on the contexts `contexts` (one slate per context)."""
    contexts: KnownAnswerContexts
    actions: np.ndarray    # (n, ell) label ids, in slate order
    cand_pos: np.ndarray   # (n, ell) rank of actions[i, j] in rho's candidate order
    q: np.ndarray          # (n, ell) conditional propensities, in (0, 1]
    rho: np.ndarray        # (n, ell) rho(y_ij | x_i)
    rewards: np.ndarray    # (n, ell) Bernoulli(P(r = 1 | x_i, y_ij)), float64 0/1


# ------------------------------------------------------------------------------------- generator
def make_world(m: int = 16, L: int = 50, K: int = 20, ell: int = 5, *, weight_scale: float = 1.5,
               bias_mean: float = -4.0, bias_std: float = 0.5, noise: float = 2.0,
               label_shift: float = 1.0, temperature: float = 1.0, seed: int = 0) -> KnownAnswerWorld:
    """A seeded world. The defaults give click rates ~0.1-0.15 per logged position and a logging
    policy that is clearly imperfect (noisy, shifted scores): with T = 1 its top candidate gets ~46% of
    rho's mass on average; temperature=0.5 makes rho peaked (~71% on the top candidate, ~97% on the
    top 5, so the slates rarely leave rho's top few)."""
    for name, v in (("m", m), ("L", L), ("K", K), ("ell", ell)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise PoxmInputError(f"{name}: expected a positive int, got {v!r}")
    if not ell <= K <= L:
        raise PoxmInputError(f"expected ell <= K <= L, got ell={ell}, K={K}, L={L}")
    if not (temperature > 0 and np.isfinite(temperature)):
        raise PoxmInputError(f"temperature: expected a finite T > 0, got {temperature!r}")
    if not (noise >= 0 and label_shift >= 0 and weight_scale >= 0 and bias_std >= 0):
        raise PoxmInputError("noise, label_shift, weight_scale, bias_std: expected non-negative values")
    g = tagged_rng(seed, "world")
    A = g.normal(0.0, weight_scale / np.sqrt(m), size=(L, m))
    c = g.normal(bias_mean, bias_std, size=L)
    shift = g.normal(0.0, label_shift, size=L) if label_shift > 0 else np.zeros(L)
    return KnownAnswerWorld(A=A, c=c, label_shift=shift, noise=float(noise), temperature=float(temperature),
                            K=int(K), ell=int(ell), seed=int(seed))


def sample_contexts(world: KnownAnswerWorld, n: int, seed: int) -> KnownAnswerContexts:
    """n fresh contexts (features, true probabilities, candidates and rho), seeded by `seed`."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise PoxmInputError(f"n: expected a positive int, got {n!r}")
    g = tagged_rng(seed, "contexts")
    X = g.standard_normal((n, world.m))
    z = world.true_logits(X)
    E = z + world.label_shift + world.noise * g.standard_normal((n, world.L))
    # top K by E, ties by label id (stable sort of -E)
    cand = np.argsort(-E, axis=1, kind="stable")[:, :world.K].astype(np.int64)
    logits = np.take_along_axis(E, cand, 1) / world.temperature
    log_rho = logits - _lse(logits, axis=1)[:, None]
    probs = _sigmoid(z)
    return KnownAnswerContexts(X=X, probs=probs, cand=cand, log_rho=log_rho,
                               cand_probs=np.take_along_axis(probs, cand, 1))


def simulate_log(world: KnownAnswerWorld, contexts: KnownAnswerContexts, seed: int) -> KnownAnswerLog:
    """One slate of ell labels per context from rho (Plackett-Luce via Gumbel-top-k), Bernoulli rewards."""
    g = tagged_rng(seed, "log")
    n, K, ell = contexts.n, world.K, world.ell
    keys = contexts.log_rho + g.gumbel(size=(n, K))
    pos = np.argsort(-keys, axis=1, kind="stable")[:, :ell].astype(np.int64)    # cand_pos, slate order
    lr_j = np.take_along_axis(contexts.log_rho, pos, 1)
    undrawn = contexts.log_rho.copy()
    np.put_along_axis(undrawn, pos, -np.inf, axis=1)
    base = _lse(undrawn, axis=1)                                                  # mass never drawn
    # log of the mass still available before position j: undrawn + rho_j + ... + rho_ell
    terms = np.where(np.triu(np.ones((ell, ell), dtype=bool))[None], lr_j[:, None, :], -np.inf)
    remain = _lse(np.concatenate([np.broadcast_to(base[:, None, None], (n, ell, 1)), terms], axis=2), axis=2)
    q = np.exp(np.minimum(lr_j - remain, 0.0))
    q = np.maximum(q, np.finfo(np.float64).tiny)
    probs_j = np.take_along_axis(contexts.cand_probs, pos, 1)
    rewards = (g.random((n, ell)) < probs_j).astype(np.float64)
    return KnownAnswerLog(contexts=contexts, actions=np.take_along_axis(contexts.cand, pos, 1), cand_pos=pos, q=q,
                          rho=np.exp(lr_j), rewards=rewards)


def subset_log(log: KnownAnswerLog, rows) -> KnownAnswerLog:
    """The log restricted to the instances `rows` (in that order): a validation slice or a fold."""
    rows = np.asarray(rows, dtype=np.int64)
    c = log.contexts
    contexts = KnownAnswerContexts(X=c.X[rows], probs=c.probs[rows], cand=c.cand[rows], log_rho=c.log_rho[rows],
                              cand_probs=c.cand_probs[rows])
    return KnownAnswerLog(contexts=contexts, actions=log.actions[rows], cand_pos=log.cand_pos[rows], q=log.q[rows],
                          rho=log.rho[rows], rewards=log.rewards[rows])


def phi_scores(scores_all: np.ndarray, contexts: KnownAnswerContexts, p: int) -> np.ndarray:
    """(n, p) logits of Phi^p(x) = cand[:, :p] picked from per-label logits (n, L)."""
    return np.take_along_axis(np.asarray(scores_all, dtype=np.float64), contexts.cand[:, :p], 1)


# -------------------------------------------------------------------------------------- values
@lru_cache(maxsize=32)
def _set_dp_tables(m: int, ell: int):
    """Per level k < ell: masks (C_k, m) of the k-sets, and transitions (src, item) sorted by
    destination (k+1)-set, each destination having exactly k+1 sources (one per removed item)."""
    levels = []
    prev_index = {(): 0}
    prev_sets = [()]
    for k in range(ell):
        mask = np.zeros((len(prev_sets), m), dtype=bool)
        for i, s in enumerate(prev_sets):
            mask[i, list(s)] = True
        if k + 1 < ell:
            nxt = list(combinations(range(m), k + 1))
            src = np.empty((len(nxt), k + 1), dtype=np.int64)
            item = np.empty((len(nxt), k + 1), dtype=np.int64)
            for d, s in enumerate(nxt):
                for t, b in enumerate(s):
                    src[d, t] = prev_index[s[:t] + s[t + 1:]]
                    item[d, t] = b
            prev_index = {s: i for i, s in enumerate(nxt)}
        else:
            nxt, src, item = [], None, None
        levels.append((mask, src, item))
        prev_sets = nxt
    return levels


def _pl_value_exact_log(scores: np.ndarray, probs: np.ndarray, ell: int, chunk: int) -> np.ndarray:
    """Log-space version: pi(b | S) = exp(s_b - logsumexp_{not S} s), exact for any logit gaps."""
    n, m = scores.shape
    levels = _set_dp_tables(m, ell)
    out = np.zeros(n)
    for lo in range(0, n, chunk):
        s = scores[lo:lo + chunk]
        v = probs[lo:lo + chunk]
        P = np.ones((s.shape[0], 1))                               # Pr(first k picks = set S)
        for mask, src, item in levels:
            avail = np.where(mask[None], -np.inf, s[:, None, :])   # (c, C_k, m)
            logrem = _lse(avail, axis=2)
            with np.errstate(invalid="ignore"):
                pick = np.where(mask[None], 0.0, np.exp(avail - logrem[:, :, None]))
            w = P[:, :, None] * pick                                # Pr(S then b)
            out[lo:lo + chunk] += np.einsum("ncm,nm->n", w, v)      # E[P(r=1 | x, y_{k+1})]
            if src is not None:
                P = w[:, src, item].sum(axis=2)                      # (c, C_{k+1})
    return out


def _pl_value_exact_lin(scores: np.ndarray, probs: np.ndarray, ell: int) -> np.ndarray:
    """Linear-space version for rows whose top logit exceeds the ell-th largest by <= _LIN_GAP.

    Weights are exp(s - s_(ell)) (s_(ell) = the row's ell-th largest logit), so every set S of < ell
    drawn items leaves mass >= 1 (one of the top ell is still there) and no weight overflows; the
    mass left, sum_{b not in S} w_b, is a sum of non-negative terms (no W - w(S) cancellation).
    """
    levels = _set_dp_tables(scores.shape[1], ell)
    kth = -np.sort(-scores, axis=1)[:, ell - 1:ell]
    w = np.exp(scores - kth)
    wv = w * probs
    out = np.zeros(scores.shape[0])
    P = np.ones((scores.shape[0], 1))
    for mask, src, item in levels:
        comp = (~mask).T.astype(np.float64)                         # (m, C_k)
        Pr = P / (w @ comp)                                          # Pr(S) / mass left after S
        out += np.einsum("nc,nc->n", Pr, wv @ comp)
        if src is not None:
            P = (Pr[:, src] * w[:, item]).sum(axis=2)                # sum over the last item b of D
    return out


_LIN_GAP = 600.0   # exp(600) ~ 4e260: far from float64 overflow even summed over the support


def _pl_value_exact(scores: np.ndarray, probs: np.ndarray, ell: int, chunk: int) -> np.ndarray:
    srt = -np.sort(-scores, axis=1)
    if not np.all(np.isfinite(srt[:, ell - 1])):
        bad = int(np.flatnonzero(~np.isfinite(srt[:, ell - 1]))[0])
        raise PoxmInputError(f"scores: row {bad} has fewer than ell={ell} finite logits; a PL slate of ell "
                             f"distinct items cannot be drawn")
    lin = (srt[:, 0] - srt[:, ell - 1]) <= _LIN_GAP
    out = np.empty(scores.shape[0])
    widest = max([src.size for _, src, _ in _set_dp_tables(scores.shape[1], ell) if src is not None] + [1])
    rows_per = max(1, int(8_000_000 // widest))          # ~64 MB for the (rows, C_{k+1}, k+1) gather
    for lo in range(0, scores.shape[0], rows_per):
        sl = slice(lo, lo + rows_per)
        rows = lo + np.flatnonzero(lin[sl])
        if rows.size:
            out[rows] = _pl_value_exact_lin(scores[rows], probs[rows], ell)
    rows = np.flatnonzero(~lin)
    if rows.size:
        out[rows] = _pl_value_exact_log(scores[rows], probs[rows], ell, chunk)
    return out


def _pl_value_mc(scores: np.ndarray, probs: np.ndarray, ell: int, n_slates: int, seed: int) -> np.ndarray:
    g = tagged_rng(seed, "pl-mc")
    n, m = scores.shape
    out = np.zeros(n)
    for _ in range(n_slates):
        top = np.argsort(-(scores + g.gumbel(size=(n, m))), axis=1)[:, :ell]
        out += np.take_along_axis(probs, top, 1).sum(axis=1)
    return out / n_slates


def _check_sv(scores, probs, ell):
    scores = np.asarray(scores, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    if scores.ndim != 2 or probs.shape != scores.shape:
        raise PoxmInputError(f"scores, probs: expected two (n, m) arrays of one shape, got {scores.shape}, {probs.shape}")
    if isinstance(ell, bool) or not isinstance(ell, (int, np.integer)) or not 1 <= ell <= scores.shape[1]:
        raise PoxmInputError(f"ell: expected an int in [1, {scores.shape[1]}], got {ell!r}")
    if np.isnan(scores).any() or np.isposinf(scores).any():
        raise PoxmInputError("scores: expected finite logits (-inf allowed), got NaN or +inf")
    return scores, probs


def pl_slate_value(scores, probs, ell: int, *, per_context: bool = False, method: str = "exact",
                   n_slates: int = 4000, seed: int = 0, chunk: int = 64):
    """True value of the Plackett-Luce policy with logits `scores` (n, m) over a support of m items:
    mean over contexts of E_{slate}[ sum_j probs[y_j] ], slates of `ell` distinct items.

    method="exact" (default): set dynamic programme in log space (exact up to float64 rounding;
    m <= MAX_EXACT_SUPPORT). method="mc": Gumbel-top-k Monte-Carlo with `n_slates` slates per context.
    -inf logits are allowed (never picked while finite ones remain, as in PL).
    """
    scores, probs = _check_sv(scores, probs, ell)
    if method == "exact":
        if scores.shape[1] > MAX_EXACT_SUPPORT:
            raise PoxmInputError(f"scores: exact PL value supports m <= {MAX_EXACT_SUPPORT} items, got "
                                 f"{scores.shape[1]} (use method='mc')")
        per = _pl_value_exact(scores, probs, int(ell), chunk=max(1, int(chunk)))
    elif method == "mc":
        per = _pl_value_mc(scores, probs, int(ell), int(n_slates), seed)
    else:
        raise PoxmInputError(f"method: expected 'exact' or 'mc', got {method!r}")
    return per if per_context else float(per.mean())


def greedy_slate_value(scores, probs, ell: int, *, per_context: bool = False):
    """True value of the deterministic slate of the `ell` largest `scores` (ties by column index)."""
    scores, probs = _check_sv(scores, probs, ell)
    top = np.argsort(-scores, axis=1, kind="stable")[:, :ell]
    per = np.take_along_axis(probs, top, 1).sum(axis=1)
    return per if per_context else float(per.mean())


def optimal_value(contexts: KnownAnswerContexts, p: int, ell: int, *, per_context: bool = False):
    """V* within Phi^p: mean_x of the sum of the `ell` largest true probabilities in Phi^p(x)."""
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not ell <= p <= contexts.cand.shape[1]:
        raise PoxmInputError(f"p: expected an int in [ell={ell}, K={contexts.cand.shape[1]}], got {p!r}")
    per = -np.sort(-contexts.cand_probs[:, :p], axis=1)[:, :ell].sum(axis=1)
    return per if per_context else float(per.mean())


def logging_value(contexts: KnownAnswerContexts, ell: int, *, per_context: bool = False, method: str = "exact"):
    """True value of the logging policy rho (PL over C(x) with logits log rho)."""
    return pl_slate_value(contexts.log_rho, contexts.cand_probs, ell, per_context=per_context, method=method)
