"""A tiny hand-built `Prepared` (no prepare stage): the trainer and method tests run on it in seconds.

Labels carry signal: Y*_i = labels whose true score z_i . W*_y + b*_y exceeds a threshold (at least
one per instance); the "logging head" (W, b) is a noisy copy of (W*, b*); C(x) = top-K of the logging
logits, rho = softmax(logits / T) on C(x) re-sorted by rho (ties by label id); slates of ell labels
drawn from rho without replacement, q_j = rho_j / (1 - sum_{k<j} rho_k).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from poxm_core.bandit.log import BanditLog
from poxm_core.config.schema import load_config
from poxm_core.prepare.prepared import Prepared, VariantPolicy


def _policy(Z, W, b, K, T):
    s = Z @ W.T + b
    order = np.lexsort((np.broadcast_to(np.arange(W.shape[0]), s.shape), -s), axis=1)[:, :K]
    top = np.take_along_axis(s, order, axis=1) / T
    rho = np.exp(top - top.max(axis=1, keepdims=True))
    rho /= rho.sum(axis=1, keepdims=True)
    return VariantPolicy(order.astype(np.int64), rho.astype(np.float64))


def _labels(Z, Wt, bt, rng):
    s = Z @ Wt.T + bt + rng.gumbel(size=(Z.shape[0], Wt.shape[0])) * 0.3
    Y = (s > np.quantile(s, 0.8, axis=1, keepdims=True)).astype(np.float32)
    Y[np.arange(Z.shape[0]), s.argmax(axis=1)] = 1.0
    return sp.csr_matrix(Y)


def simulate(policy: VariantPolicy, Y: sp.csr_matrix, rows: np.ndarray, ell: int, rng) -> BanditLog:
    n = rows.size
    acts = np.zeros((n, ell), np.int64)
    cpos = np.zeros((n, ell), np.int64)
    q = np.zeros((n, ell))
    rr = np.zeros((n, ell))
    for a, i in enumerate(rows):
        g = np.log(policy.rho[i]) + rng.gumbel(size=policy.rho.shape[1])
        picks = np.argsort(-g, kind="stable")[:ell]
        used = 0.0
        for j, c in enumerate(picks):
            cpos[a, j], acts[a, j] = c, policy.cand[i, c]
            rr[a, j], q[a, j] = policy.rho[i, c], policy.rho[i, c] / (1.0 - used)
            used += policy.rho[i, c]
    q = np.minimum(q, 1.0)
    rewards = np.asarray(Y[rows[:, None], acts].todense() if n else np.zeros((0, ell))).astype(np.float32)
    return BanditLog(rows.astype(np.int64), acts, cpos, q, rr, (rewards > 0).astype(np.float32))


def tiny_prepared(n_tr=80, n_te=40, d=6, L=16, K=8, ell=3, T=1.0, seed=0, dataset="tiny", variant="A") -> Prepared:
    rng = np.random.default_rng(seed)
    Wt = rng.normal(size=(L, d))
    bt = rng.normal(size=L) * 0.5
    Z_tr = rng.normal(size=(n_tr, d)).astype(np.float32)
    Z_te = rng.normal(size=(n_te, d)).astype(np.float32)
    W = (Wt + rng.normal(size=Wt.shape) * 0.7).astype(np.float32)
    b = (bt + rng.normal(size=L) * 0.3).astype(np.float32)
    Y_tr, Y_te = _labels(Z_tr, Wt, bt, rng), _labels(Z_te, Wt, bt, rng)
    pol_tr, pol_te = _policy(Z_tr, W, b, K, T), _policy(Z_te, W, b, K, T)
    n_val = max(2, n_tr // 5)
    val_rows = np.arange(n_tr - n_val, n_tr)
    fit_rows = np.arange(n_tr - n_val)
    counts = np.asarray(Y_tr.sum(axis=0)).ravel()
    inv_prop = 1.0 + 2.0 / (1.0 + counts)          # rarer labels: larger 1/p (shape only)
    return Prepared(dataset=dataset, variant=variant, seed=seed, Z_train=Z_tr, Z_test=Z_te, W=W, b=b,
                    policy_train=pol_tr, policy_test=pol_te,
                    log_train=simulate(pol_tr, Y_tr, fit_rows, ell, rng), log_val=simulate(pol_tr, Y_tr, val_rows, ell, rng),
                    inv_propensity=inv_prop, Y_test=Y_te, Y_train=Y_tr, X_train=_sparse(Z_tr), X_test=_sparse(Z_te))


def _sparse(Z: np.ndarray) -> sp.csr_matrix:
    """Sparse non-negative features carrying z: [max(z, 0), max(-z, 0)] (D = 2d, half the entries 0)."""
    return sp.csr_matrix(np.hstack([np.maximum(Z, 0), np.maximum(-Z, 0)]).astype(np.float32))


ALL_METHODS = {
    "logging": {},
    "dm": {"lr": 0.01},
    "banditnet": {"lam": [0.5], "lr": 0.01},
    "pm_banditnet": {"p": [4], "lam": [0.5], "lr": 0.01},
    "poxm": {"p": [4, 8], "lam": [0.5], "lr": 0.01},
    "wpoxm": {"p": [4], "lam": [0.5], "lr": 0.01},
    "skyline": {"lr": 0.01},
}


def tiny_config(methods=None, epochs=2, seed=0, **training):
    data = {"name": "tiny-sweep", "seeds": [seed], "device": "cpu",
            "datasets": [{"name": "tiny", "variants": [{"name": "A", "alpha": 0.5}]}],
            "methods": ALL_METHODS if methods is None else methods,
            "training": {"epochs": epochs, "batch_size": 16, "mc_slates": 8, "eval_max_support": 10, **training}}
    return load_config(data=data)
