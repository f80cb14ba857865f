"""Real logged feedback as a trial's inputs (docs/data.md, "Learning from a log"): a `LoggedFeedback`
mapped onto what every trial reads (`Prepared`), the smallest faithful mapping.

- A row of the log is an instance with a slate of ell = 1: its logged action, q = rho = the logged
  propensity (the probability of that action at that slot), its 0/1 reward.
- Features: the context, then one indicator per slot (a row is shown at a position; a learned policy
  pi(a | x, k) may depend on it). Z (the frozen "encoder" output) is the same matrix, dense: there is no
  encoder, no logging model; W = 0, b = 0 stand for it (init: logging would start from the uniform policy).
- Candidates C(x) = the whole action set (OBD: 34-80 actions), ordered per row by the logging
  policy's marginal at the row's slot, rho(a | k) (read from the propensities, `position_marginals`),
  ties by smaller id (`selector: logging`) or by a reward model rhat(a, k) fitted on the fit rows only
  (`selector: reward`); Phi^p = the first p. Under a uniform logging policy every action ties.
- Splits: a fixed test part (test_fraction, split_seed) of the rows; the rest is the training split,
  from which the run seed's validation slice (val_fraction) is held out as everywhere else.
- No labels: Y_train and Y_test are None; the test values are off-policy estimates on `eval_logs`.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from poxm_core.bandit.log import BanditLog
from poxm_core.bandit.logged_ope import cell_reward_model, position_marginals
from poxm_core.common.errors import PoxmInputError
from poxm_core.common.seeds import rng
from poxm_core.data.logged import LoggedFeedback
from poxm_core.prepare.prepared import VariantPolicy

__all__ = ["split_rows", "log_features", "order_actions", "candidates_of", "bandit_log", "PART_ARRAYS", "part_arrays",
           "slot_marginals", "TEST_SPLIT_STREAM"]

PART_ARRAYS = ("action", "position", "reward", "propensity")
TEST_SPLIT_STREAM = ("logged-data", "test-split")     # the stream of the fixed test part (poxm_core.common.seeds)


def split_rows(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, test rows), sorted int64: the first round(n * test_fraction) rows of a permutation
    drawn from the stream (seed, *TEST_SPLIT_STREAM) are the test part (at least one row on each side)."""
    if n < 2:
        raise PoxmInputError(f"logged data: expected at least 2 rows to cut a test part, got {n}")
    n_test = min(max(int(round(n * test_fraction)), 1), n - 1)
    perm = rng(seed, *TEST_SPLIT_STREAM).permutation(n)
    return np.sort(perm[n_test:]).astype(np.int64), np.sort(perm[:n_test]).astype(np.int64)


def log_features(log: LoggedFeedback, rows: np.ndarray | None = None) -> sp.csr_matrix:
    """(n, D + K) CSR float32: the context, then an indicator of the row's slot."""
    rows = np.arange(log.n) if rows is None else rows
    n, K = rows.size, log.slate_size
    slot = sp.csr_matrix((np.ones(n, np.float32), (np.arange(n), log.position[rows])), shape=(n, K))
    X = sp.hstack([log.context[rows], slot], format="csr", dtype=np.float32)
    X.sort_indices()
    return X


def part_arrays(log: LoggedFeedback, rows: np.ndarray) -> dict[str, np.ndarray]:
    return {k: getattr(log, k)[rows] for k in PART_ARRAYS}


def slot_marginals(action, position, propensity, n_actions: int, slate_size: int) -> np.ndarray:
    """The logging policy's marginals rho(a | k), (A, K), from the propensities of the rows given
    (`logged_ope.position_marginals`); a (a, k) never shown gets the smallest shown marginal of its slot,
    renormalised (rho must be positive on C(x): the logging policy's own head scores log rho)."""
    log = LoggedFeedback("rows", sp.csr_matrix((len(action), 1), dtype=np.float32), action, position,
                         np.zeros(len(action)), propensity, n_actions, slate_size)
    rho = position_marginals(log)
    for k in range(slate_size):
        col = rho[:, k]
        if (col <= 0).any():
            col[col <= 0] = col[col > 0].min() if (col > 0).any() else 1.0
            rho[:, k] = col / col.sum()
    return rho


def order_actions(rho: np.ndarray, rhat: np.ndarray | None = None) -> np.ndarray:
    """(A, K): per slot k, the actions by rho(. | k) descending, ties by rhat(., k) descending when given,
    then by smaller id."""
    A, K = rho.shape
    ids = np.arange(A)
    out = np.empty((A, K), dtype=np.int64)
    for k in range(K):
        keys = (ids, -rhat[:, k], -rho[:, k]) if rhat is not None else (ids, -rho[:, k])
        out[:, k] = np.lexsort(keys)
    return out


def candidates_of(order: np.ndarray, rho: np.ndarray, position: np.ndarray) -> VariantPolicy:
    """Each row's C(x): the action set in its slot's order, with rho(a | k) (rows sum to 1)."""
    cand = np.ascontiguousarray(order[:, position].T)
    return VariantPolicy(cand, np.ascontiguousarray(rho[cand, position[:, None]]))


def bandit_log(arrays: dict[str, np.ndarray], policy: VariantPolicy, instance: np.ndarray, where: str) -> BanditLog:
    """The rows `instance` (of the split `policy` covers) as a BanditLog of ell = 1: q = rho = the logged
    propensity. Rewards must be 0/1 (clicks)."""
    r = arrays["reward"][instance]
    if not np.all(np.isin(r, (0.0, 1.0))):
        bad = r[~np.isin(r, (0.0, 1.0))][0]
        raise PoxmInputError(f"{where}: rewards must be 0/1 (a click) to learn from the log, got {bad!r}")
    a = arrays["action"][instance]
    cand = policy.cand[instance]
    pos = np.argmax(cand == a[:, None], axis=1)
    p = arrays["propensity"][instance].astype(np.float64)[:, None]
    log = BanditLog(instance.astype(np.int64), a[:, None].astype(np.int64), pos[:, None].astype(np.int64), p, p.copy(),
                    r[:, None].astype(np.float32))
    log.validate_against(policy.cand)
    return log


def reward_ranking(arrays: dict[str, np.ndarray], rows: np.ndarray, n_actions: int, slate_size: int) -> np.ndarray:
    """rhat(a, k) of the rows given (the fit rows: never the validation or test rows), (A, K)."""
    return cell_reward_model(arrays["action"][rows], arrays["position"][rows], arrays["reward"][rows],
                             n_actions, slate_size)
