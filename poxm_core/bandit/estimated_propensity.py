"""Logging propensities estimated from the log, for logs whose propensities were never recorded
(docs/estimators.md, "Logs without propensities"; dataset option `logging_propensities: estimated`).

The model of rho is a softmax over the candidates C(x) (the logging policy's support):

    rho_hat(k | x) = exp(a s_k(x) + c_k) / sum_{k' in C(x)} exp(a s_k'(x) + c_k')

with s_k(x) the logging model's score of candidate k (its logit; none on a bandit without one) and c_k
a bias per candidate rank (K parameters). It is fitted by maximum likelihood of the logged slates,
position by position as they were drawn: the j-th pick is a draw from rho_hat over the candidates the
slate has not yet taken (Plackett-Luce), with a small ridge on (a, c).
Cross-fitted: the log's rows are cut into `folds` seeded folds and a row's rho_hat comes from the
model fitted on the other folds (its own slate never fits its propensity); rows outside the fitted log
(the validation log, unlogged training rows) get the model fitted on the whole log.

From rho_hat the conditional propensities of a slate are formed like the recorded ones,
q_ij = rho_hat(y_ij) / (1 - sum_{k<j} rho_hat(y_ik)), in log space from the mass still available (no
1 - cumsum cancellation). Every importance weight downstream (the methods' losses, the validation
estimators, the cluster marginals of MIPS/OffCEM, POTEC's) reads q and rho, so replacing them is enough.
Exact when rho is the softmax of a / T-scaled logits with rank-free noise (a variant without Gumbel
noise, beta = 0); an approximation otherwise (per-(x, y) noise cannot be learned from one slate).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from poxm_core.common.errors import PoxmInputError
from poxm_core.common.seeds import rng as seeded_rng
from poxm_core.estimators.plackett_luce import _lse_np

__all__ = ["PropensityModel", "fit_propensity_model", "crossfit_log_rho", "slate_propensities",
           "with_estimated_propensities", "dataset_propensities", "FOLDS", "FOLDS_STREAM"]

FOLDS = 5
FOLDS_STREAM = ("estimated-propensity", "folds")
_CHUNK_FLOATS = 1 << 24          # the candidate rows of W gathered at once: 128 MiB in float64


@dataclasses.dataclass(frozen=True)
class PropensityModel:
    """a (the score's coefficient) and c (K,) the per-rank biases; `log_rho(scores)` -> (n, K)."""
    a: float
    c: np.ndarray

    def log_rho(self, scores: np.ndarray | None, n: int | None = None) -> np.ndarray:
        if scores is None:
            logits = np.broadcast_to(self.c, (int(n), self.c.size)).astype(np.float64)
        else:
            logits = self.a * np.asarray(scores, dtype=np.float64) + self.c
        return logits - _lse_np(logits, axis=1)[:, None]


def _pl_nll(logits: np.ndarray, pos: np.ndarray, drawn: np.ndarray) -> tuple[float, np.ndarray]:
    """(mean over rows of -sum_j log PL(pick pos_ij | the columns not yet drawn), its gradient in the
    logits). The mass still available at j is the never-drawn columns' plus the picks from j on:
    non-negative parts only, no cancellation. A column drawn at t is available at positions j <= t, a
    never-drawn one at every j, so d/ds_k = e_k sum_{j available} 1 / remain_j - #(k picked)."""
    n, ell = pos.shape
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    base = np.where(drawn, 0.0, e).sum(axis=1, keepdims=True)
    e_pos = np.take_along_axis(e, pos, 1)
    remain = base + np.cumsum(e_pos[:, ::-1], axis=1)[:, ::-1]
    nll = -(np.log(e_pos) - np.log(remain)).sum() / n
    R = np.cumsum(1.0 / remain, axis=1)                        # R_t = sum_{j <= t} 1 / remain_j
    coef = np.broadcast_to(R[:, -1:], e.shape).copy()
    np.put_along_axis(coef, pos, R, axis=1)
    grad = e * coef
    np.put_along_axis(grad, pos, np.take_along_axis(grad, pos, 1) - 1.0, axis=1)
    return nll, grad / n


def fit_propensity_model(scores: np.ndarray | None, cand_pos: np.ndarray, K: int | None = None,
                         ridge: float = 1e-4, iters: int = 200) -> PropensityModel:
    """Maximum likelihood (module doc) on slates `cand_pos` (n, ell) (columns of C(x), slate order), with
    the candidates' scores (n, K) or None (rank biases only; then K is required). L-BFGS (SciPy), float64."""
    from scipy.optimize import minimize

    cand_pos = np.asarray(cand_pos, dtype=np.int64)
    if cand_pos.ndim != 2 or cand_pos.shape[0] < 1:
        raise PoxmInputError(f"cand_pos: expected a non-empty (n, ell) array, got shape {cand_pos.shape}")
    K = int(scores.shape[1]) if scores is not None else int(K)
    if cand_pos.min() < 0 or cand_pos.max() >= K:
        raise PoxmInputError(f"cand_pos: expected candidate columns in [0, {K}), got [{cand_pos.min()}, {cand_pos.max()}]")
    n = cand_pos.shape[0]
    S = None if scores is None else np.asarray(scores, dtype=np.float64)
    drawn = np.zeros((n, K), dtype=bool)
    np.put_along_axis(drawn, cand_pos, True, axis=1)

    def objective(theta):
        a, c = theta[0], theta[1:]
        logits = np.broadcast_to(c, (n, K)) if S is None else a * S + c
        nll, g = _pl_nll(logits, cand_pos, drawn)
        ga = 0.0 if S is None else float((g * S).sum())
        return (nll + ridge * (c @ c + (a - 1) ** 2),
                np.concatenate([[ga + 2 * ridge * (a - 1)], g.sum(axis=0) + 2 * ridge * c]))

    res = minimize(objective, np.concatenate([[1.0], np.zeros(K)]), jac=True, method="L-BFGS-B",
                   options={"maxiter": iters, "gtol": 1e-9})
    c = res.x[1:]
    return PropensityModel(float(res.x[0]), c - c.mean())


def crossfit_log_rho(scores: np.ndarray | None, cand_pos: np.ndarray, K: int | None = None,
                     folds: int = FOLDS, seed: int = 0, whole: bool = True) -> tuple[np.ndarray, PropensityModel | None]:
    """(log rho_hat (n, K) of the log's rows, each from the model fitted without its fold; the model
    fitted on every row, for rows outside the log, or None if not `whole`). Folds: a permutation from
    (seed, *FOLDS_STREAM)."""
    n = np.asarray(cand_pos).shape[0]
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or not 2 <= folds <= n:
        raise PoxmInputError(f"folds: expected an int in [2, {n}] (the log's rows), got {folds!r}")
    K = int(scores.shape[1]) if scores is not None else int(K)
    fold = seeded_rng(seed, *FOLDS_STREAM).permutation(n) % folds
    out = np.empty((n, K))
    for f in range(folds):
        fit, ev = fold != f, fold == f
        m = fit_propensity_model(None if scores is None else scores[fit], cand_pos[fit], K)
        out[ev] = m.log_rho(None if scores is None else scores[ev], int(ev.sum()))
    return out, fit_propensity_model(scores, cand_pos, K) if whole else None


def slate_propensities(log_rho: np.ndarray, cand_pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q, rho_y), each (n, ell): the conditional propensities of the slates `cand_pos` under rho =
    exp(log_rho) (n, K), q_ij = rho(y_ij) / (mass not yet drawn), from non-negative parts in log space."""
    log_rho = np.asarray(log_rho, dtype=np.float64)
    pos = np.asarray(cand_pos, dtype=np.int64)
    n, ell = pos.shape
    lr_j = np.take_along_axis(log_rho, pos, 1)
    undrawn = log_rho.copy()
    np.put_along_axis(undrawn, pos, -np.inf, axis=1)
    base = _lse_np(undrawn, axis=1)
    terms = np.where(np.triu(np.ones((ell, ell), dtype=bool))[None], lr_j[:, None, :], -np.inf)
    remain = _lse_np(np.concatenate([np.broadcast_to(base[:, None, None], (n, ell, 1)), terms], axis=2), axis=2)
    q = np.maximum(np.exp(np.minimum(lr_j - remain, 0.0)), np.finfo(np.float64).tiny)
    return q, np.exp(lr_j)


def _candidate_scores(prepared, rows: np.ndarray) -> np.ndarray:
    """(len(rows), K) the logging model's logits W_y . z + b_y of the rows' candidates, in chunks of rows
    whose gathered candidate rows (chunk, K, d) stay within _CHUNK_FLOATS; only those rows of W are read
    (and made float64), never all L of them."""
    cand = prepared.policy_train.cand
    W, b = np.asarray(prepared.W), np.asarray(prepared.b)
    out = np.empty((rows.size, cand.shape[1]))
    step = max(1, _CHUNK_FLOATS // max(1, cand.shape[1] * W.shape[1]))
    for a in range(0, rows.size, step):
        r = rows[a:a + step]
        z = np.asarray(prepared.Z_train[r], dtype=np.float64)
        c = cand[r]
        out[a:a + step] = np.einsum("nd,nkd->nk", z, W[c].astype(np.float64)) + b[c].astype(np.float64)
    return out


def with_estimated_propensities(prepared, folds: int = FOLDS, seed: int = 0):
    """`prepared` with every training-split propensity replaced by the estimated one (module doc): rho on
    the candidates of every training row (`policy_train.rho`) and q, rho of the training and validation
    logs. Fitted on the training log only, cross-fitted over its rows; the validation log and the other
    rows get the model of the whole training log. The test split's rho (ground truth for the logging
    policy's own test value) is kept. `meta['propensities']` records it."""
    if prepared.Y_test is None:
        raise PoxmInputError("logging_propensities: 'estimated' applies to a simulated bandit log of an XMC "
                             "dataset; a logged dataset's propensities are its own records")
    n_tr = prepared.policy_train.cand.shape[0]
    tr = np.asarray(prepared.log_train.instance, dtype=np.int64)
    scores = _candidate_scores(prepared, np.arange(n_tr))
    log_tr, model = crossfit_log_rho(scores[tr], prepared.log_train.cand_pos, folds=folds, seed=seed)
    log_rho = model.log_rho(scores)
    log_rho[tr] = log_tr
    logs = {}
    for name in ("log_train", "log_val"):
        lg = getattr(prepared, name)
        q, rho_y = slate_propensities(log_rho[lg.instance], lg.cand_pos)
        logs[name] = dataclasses.replace(lg, q=q, rho=rho_y)
    policy = dataclasses.replace(prepared.policy_train, rho=np.exp(log_rho))
    meta = {**prepared.meta, "propensities": {"kind": "estimated", "folds": int(folds), "seed": int(seed),
                                              "a": model.a, "model": "softmax over C(x) of a * logit + rank bias"}}
    return dataclasses.replace(prepared, policy_train=policy, meta=meta, **logs)


def dataset_propensities(cfg, dataset: str, prepared):
    """`prepared` as the dataset's `logging_propensities` option says: unchanged for 'recorded' (the
    default), `with_estimated_propensities` (seeded by the prepared seed) for 'estimated'; idempotent."""
    if cfg.dataset(dataset).logging_propensities != "estimated":
        return prepared
    if (prepared.meta.get("propensities") or {}).get("kind") == "estimated":
        return prepared
    return with_estimated_propensities(prepared, seed=int(prepared.seed))
