"""Linear learners on the known-answer bandit (poxm_core.bandit.known_answer), each the project's
estimator pieces on a linear policy trained full-batch from 0: POXM (translated sIS over Phi^p),
DR-POXM, the Direct Method; and the exact value of what they learned. The known-answer study
(`python -m studies.known_answer`) and the selection study run them; the tests check them against the
exact optimum within Phi^p."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from poxm_core.bandit.known_answer import (KnownAnswerContexts, KnownAnswerLog, greedy_slate_value,
                                           pl_slate_value)
from poxm_core.estimators import (importance_weights_torch, pl_log_conditionals_torch, selector_pos,
                                  translated_value_torch)


# ------------------------------------------------------------------------------------- learners
@dataclass(frozen=True)
class LinearPolicy:
    """Per-label linear scores s(x, y) = theta_y . x[:, :k] + b_y (k = theta.shape[1])."""
    theta: np.ndarray   # (L, k)
    b: np.ndarray       # (L,)

    def scores(self, X: np.ndarray) -> np.ndarray:
        k = self.theta.shape[1]
        return np.asarray(X, dtype=np.float64)[:, :k] @ self.theta.T + self.b


def _phi(scores_all: torch.Tensor, cand_p: torch.Tensor) -> torch.Tensor:
    return scores_all.gather(1, cand_p)


def _fit_on_phi(log: KnownAnswerLog, p: int, value, *, epochs: int, lr: float, weight_decay: float,
                seed: int) -> LinearPolicy:
    """Full-batch Adam maximising value(s, w) of a linear policy from 0: s (n, p) its scores on Phi^p,
    w (n, ell) the pruned importance weights of the logged slates under it."""
    torch.manual_seed(seed)
    contexts = log.contexts
    X = torch.as_tensor(contexts.X, dtype=torch.float64)
    cand_p = torch.as_tensor(contexts.cand[:, :p])
    pos = selector_pos(torch.as_tensor(log.cand_pos), p)
    q = torch.as_tensor(log.q, dtype=torch.float64)
    L = contexts.probs.shape[1]
    theta = torch.zeros((L, X.shape[1]), dtype=torch.float64, requires_grad=True)
    b = torch.zeros(L, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([theta, b], lr=lr, weight_decay=weight_decay)
    for _ in range(epochs):
        opt.zero_grad()
        s = _phi(X @ theta.T + b, cand_p)
        w = importance_weights_torch(pl_log_conditionals_torch(s, pos, check=False), q, check=False)
        loss = -value(s, w, pos)
        loss.backward()
        opt.step()
    return LinearPolicy(theta.detach().numpy().copy(), b.detach().numpy().copy())


def train_poxm(log: KnownAnswerLog, p: int, lam: float, *, epochs: int = 200, lr: float = 0.1,
               weight_decay: float = 0.0, seed: int = 0) -> LinearPolicy:
    """POXM on the log: full-batch Adam on -(translated sIS over Phi^p). Parameters start at 0."""
    r = torch.as_tensor(log.rewards, dtype=torch.float64)
    return _fit_on_phi(log, p, lambda s, w, pos: translated_value_torch(w, r, lam),
                       epochs=epochs, lr=lr, weight_decay=weight_decay, seed=seed)


def train_dr_poxm(log: KnownAnswerLog, p: int, reward: LinearPolicy, *, epochs: int = 200, lr: float = 0.1,
                  weight_decay: float = 0.0, seed: int = 0) -> LinearPolicy:
    """DR-POXM on the log: full-batch Adam on -(DR estimate over Phi^p), the project's estimator pieces
    (PL conditionals, pruned weights, PL expectations, the registry's 'dr' value), with the reward model
    rhat = sigmoid(reward's scores) fitted before and held fixed. Parameters start at 0."""
    from poxm_core.estimators import pl_expectations_torch
    from poxm_core.estimators.registry import get_estimator

    contexts = log.contexts
    r = torch.as_tensor(log.rewards, dtype=torch.float64)
    rhat = torch.sigmoid(torch.as_tensor(reward.scores(contexts.X), dtype=torch.float64))
    rhat_phi = rhat.gather(1, torch.as_tensor(contexts.cand[:, :p]))
    rhat_logged = rhat.gather(1, torch.as_tensor(log.actions))
    dr = get_estimator("dr")
    return _fit_on_phi(log, p, lambda s, w, pos: dr.torch_value(
        w, r, dm_term=pl_expectations_torch(s, rhat_phi, pos, check=False), rhat_logged=rhat_logged),
        epochs=epochs, lr=lr, weight_decay=weight_decay, seed=seed)


def train_dm(log: KnownAnswerLog, n_features: int, *, epochs: int = 200, lr: float = 0.1,
             weight_decay: float = 0.0, seed: int = 0) -> LinearPolicy:
    """Direct Method: logistic loss on the logged (x, y_ij, r_ij) with features x[:, :n_features]."""
    torch.manual_seed(seed)
    contexts = log.contexts
    X = torch.as_tensor(contexts.X[:, :n_features], dtype=torch.float64)
    acts = torch.as_tensor(log.actions)
    r = torch.as_tensor(log.rewards, dtype=torch.float64)
    L = contexts.probs.shape[1]
    theta = torch.zeros((L, n_features), dtype=torch.float64, requires_grad=True)
    b = torch.zeros(L, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([theta, b], lr=lr, weight_decay=weight_decay)
    for _ in range(epochs):
        opt.zero_grad()
        z = (X @ theta.T + b).gather(1, acts)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(z, r)
        loss.backward()
        opt.step()
    return LinearPolicy(theta.detach().numpy().copy(), b.detach().numpy().copy())


# ------------------------------------------------------------------------------------ evaluation
def phi_logits(policy: LinearPolicy, contexts: KnownAnswerContexts, p: int) -> np.ndarray:
    return np.take_along_axis(policy.scores(contexts.X), contexts.cand[:, :p], 1)


def value_softmax(policy: LinearPolicy, contexts: KnownAnswerContexts, p: int, ell: int) -> float:
    """True value of the PL policy of `policy`'s logits restricted to Phi^p (exact)."""
    return pl_slate_value(phi_logits(policy, contexts, p), contexts.cand_probs[:, :p], ell)


def value_greedy(policy: LinearPolicy, contexts: KnownAnswerContexts, p: int, ell: int) -> float:
    """True value of the top-ell slate of `policy`'s logits within Phi^p."""
    return greedy_slate_value(phi_logits(policy, contexts, p), contexts.cand_probs[:, :p], ell)
