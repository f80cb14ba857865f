"""Off-policy evaluation on real logs, checked against the truth (docs/results/obd/README.md).

Two policies logged over the same traffic (OBD: uniform random and Bernoulli Thompson Sampling): the
value of one is estimated from the other's log with every estimator of the registry that applies, and
compared with its own on-policy click rate. A row of a log is one shown action (x_i, a_i, k_i, r_i, p_i)
(`poxm_core.data.logged.LoggedFeedback`); rows are the i.i.d. instances (ell = 1), as in the dataset
paper, so the value is the click rate per shown action.

The evaluation policy is context-free here, given by its position marginals pi(a | k), an (A, K)
array whose columns sum to 1 (`position_marginals`). Then, for a row i,

    w_i       = pi(a_i | k_i) / p_i                                          (IS, SNIS, DR, PIS)
    w_i(Phi)  = 1{a_i in Phi_k} pi(a_i | k_i) / pi(Phi_k | k_i) / p_i        (sIS: pi renormalised on Phi^p)
    Phi^p_k   = the p actions of largest logging marginal rho(. | k), ties by smaller id (`selector`)
    dm_i      = sum_a pi(a | k_i) rhat(a, k_i),  rhat_logged_i = rhat(a_i, k_i)      (DR, DM, OffCEM)
    w_i(e)    = pi(e_i | k_i) / rho_i(e_i),  e_i = cluster of a_i                    (MIPS, OffCEM; given clusters)
    pi(e | k) = sum_{a in e} pi(a | k);  rho_i(e_i) = p_i rho(e_i | k_i) / rho(a_i | k_i) (`cluster_row_weights`)

With ell = 1 the prefix product of PIS is the single ratio, so PIS equals IS on these logs (OBD's sample
keeps one row per impression; the slate's other rows are not in it). Each estimator's interval is its
own (`BaseEstimator.estimate`): a normal interval over the per-row terms (CLT; SNIS by the delta
method). Nothing here allocates an (n, A) array: the policy is an (A, K) table.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from poxm_core.common.errors import PoxmInputError
from poxm_core.common.seeds import rng as seeded_rng
from poxm_core.data.logged import LoggedFeedback
from poxm_core.estimators.registry import ESTIMATORS

__all__ = ["position_marginals", "selector", "row_weights", "cluster_row_weights", "cell_reward_model", "crossfit_reward",
           "OPEResult", "evaluate_against_truth", "NOT_VALUE_ESTIMATES", "FOLDS_STREAM", "BOOTSTRAP_STREAM"]

# Registered estimators that are not estimates of a policy value, hence not compared with the truth:
# the SNIS lower bound is biased low by design (a pessimistic selection criterion, docs/estimators.md).
NOT_VALUE_ESTIMATES = ("snis_lb",)
# The random streams (poxm_core.common.seeds): the reward model's folds, and the bootstrap resamples of the
# evaluation log (one stream for every estimator of a call: they are compared on the same resamples).
FOLDS_STREAM = ("logged-ope", "reward-model-folds")
BOOTSTRAP_STREAM = ("logged-ope", "bootstrap-resamples")
_AUX_WE_GIVE = {"dm_term", "rhat_logged"}


def position_marginals(log: LoggedFeedback) -> np.ndarray:
    """The logging policy's per-position marginals rho(a | k), (A, K), read from its own propensities.

    rho(a | k) is proportional to 1 / mean_{i: a_i = a, k_i = k} (1 / p_i) (0 where (a, k) was never shown),
    then each column is normalised to sum to 1. Why the harmonic mean: a policy that changes over time
    (TS updated in batches) shows a at k at round t with probability p_t; among the rows that show it,
    E[1 / p] = T / sum_t p_t, so the harmonic mean of the logged propensities is the time-averaged
    marginal (1/T) sum_t p_t. The plain mean is size-biased (rows are shown where p_t was high).
    Measured on OBD's TS logs: the un-normalised columns sum to 1.03-1.13 (plain mean: 1.7-3.7).
    """
    A, K = log.n_actions, log.slate_size
    inv = np.zeros((A, K))
    cnt = np.zeros((A, K))
    np.add.at(inv, (log.action, log.position), 1.0 / log.propensity)
    np.add.at(cnt, (log.action, log.position), 1.0)
    rho = np.where(cnt > 0, cnt / np.where(inv > 0, inv, 1.0), 0.0)
    return rho / rho.sum(axis=0, keepdims=True)


def selector(logging_marginals: np.ndarray, p: int) -> np.ndarray:
    """Phi^p per position: (A, K) bool, the p actions of largest rho(. | k), ties by smaller action id.
    Under a uniform logging policy every action ties, so Phi^p is the p smallest ids: an arbitrary set."""
    A, K = logging_marginals.shape
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 1 <= p <= A:
        raise PoxmInputError(f"p: expected an int in [1, {A}] (the action set), got {p!r}")
    order = np.argsort(-logging_marginals, axis=0, kind="stable")[:p]
    mask = np.zeros((A, K), dtype=bool)
    mask[order, np.arange(K)] = True
    return mask


def row_weights(log: LoggedFeedback, pi: np.ndarray, support: np.ndarray | None = None) -> np.ndarray:
    """(n,) w_i = pi_A(a_i | k_i) / p_i, pi_A = pi renormalised on `support` ((A, K) bool; None: all)."""
    if pi.shape != (log.n_actions, log.slate_size):
        raise PoxmInputError(f"pi: expected position marginals of shape {(log.n_actions, log.slate_size)}, "
                             f"got {pi.shape}")
    if support is not None:
        pi = np.where(support, pi, 0.0)
        mass = pi.sum(axis=0, keepdims=True)
        pi = np.where(mass > 0, pi / np.where(mass > 0, mass, 1.0), 0.0)
    return pi[log.action, log.position] / log.propensity


def cluster_row_weights(log: LoggedFeedback, pi: np.ndarray, rho: np.ndarray, cluster: np.ndarray) -> np.ndarray:
    """(n,) w_i(e) = pi(e_i | k_i) / rho_i(e_i) (module doc): the logged row's propensity p_i scaled from its
    action to its cluster by the logging marginals rho (A, K), so a uniform log gives rho_i(e) = |e| p_i.
    cluster: (A,) int cluster id of each action. With singleton clusters it is `row_weights(log, pi)`."""
    cluster = np.asarray(cluster, dtype=np.int64)
    if cluster.shape != (log.n_actions,):
        raise PoxmInputError(f"cluster: expected one id per action, shape ({log.n_actions},), got {cluster.shape}")
    E = int(cluster.max()) + 1
    pi_e, rho_e = np.zeros((E, log.slate_size)), np.zeros((E, log.slate_size))
    np.add.at(pi_e, cluster, pi)
    np.add.at(rho_e, cluster, rho)
    e, a, k = cluster[log.action], log.action, log.position
    return pi_e[e, k] * rho[a, k] / (log.propensity * rho_e[e, k])


def cell_reward_model(action: np.ndarray, position: np.ndarray, reward: np.ndarray, n_actions: int,
                      slate_size: int, prior_rows: float = 100.0) -> np.ndarray:
    """rhat(a, k) = (sum of rewards at (a, k) + m rbar_k) / (rows at (a, k) + m), (A, K): the cell's mean
    reward shrunk towards its position's mean rbar_k with the weight of m = `prior_rows` rows (a cell never
    seen gets rbar_k). A simple reward model: it ignores the context."""
    s = np.zeros((n_actions, slate_size))
    c = np.zeros((n_actions, slate_size))
    np.add.at(s, (action, position), reward)
    np.add.at(c, (action, position), 1.0)
    per_pos = c.sum(axis=0)
    rbar = np.where(per_pos > 0, s.sum(axis=0) / np.where(per_pos > 0, per_pos, 1.0), 0.0)
    return (s + prior_rows * rbar) / (c + prior_rows)


def crossfit_reward(log: LoggedFeedback, pi: np.ndarray, folds: int = 2, seed: int = 0,
                    prior_rows: float = 100.0) -> tuple[np.ndarray, np.ndarray]:
    """(dm_term, rhat_logged), each (n,): for a row of fold f, the reward model fitted on the other
    folds (so a row's own reward never enters its rhat), dm_i = sum_a pi(a | k_i) rhat(a, k_i). A row's fold:
    a permutation of the rows drawn from the stream (seed, *FOLDS_STREAM), modulo `folds`."""
    fold = seeded_rng(seed, *FOLDS_STREAM).permutation(log.n) % folds
    dm = np.empty(log.n)
    rl = np.empty(log.n)
    for f in range(folds):
        fit, ev = fold != f, fold == f
        rhat = cell_reward_model(log.action[fit], log.position[fit], log.reward[fit], log.n_actions,
                                 log.slate_size, prior_rows)
        dm[ev] = (pi * rhat).sum(axis=0)[log.position[ev]]
        rl[ev] = rhat[log.action[ev], log.position[ev]]
    return dm, rl


@dataclass(frozen=True)
class OPEResult:
    """One estimate of the target policy's value from the other log, beside the truth."""
    estimator: str         # the registry's label ("IS", "sIS p=10", ...) or "DM" (the reward model alone)
    value: float
    stderr: float
    ci_low: float
    ci_high: float
    ess: float
    truth: float           # the target policy's on-policy click rate in its own log
    truth_stderr: float
    rel_error_boot: float  # mean over bootstrap resamples of the evaluation log of |V_hat - truth| / truth

    @property
    def rel_error(self) -> float:
        """|V_hat - V| / V, the dataset paper's relative estimation error."""
        return abs(self.value - self.truth) / self.truth if self.truth else float("nan")

    @property
    def covers(self) -> bool | None:
        """Whether the interval holds the truth; None without an interval (DM)."""
        if not np.isfinite(self.ci_low):
            return None
        return bool(self.ci_low <= self.truth <= self.ci_high)

    @property
    def z(self) -> float:
        """(V_hat - V) / sqrt(se^2 + se_V^2): the difference in units of both sampling errors (the
        truth is itself a mean over one log)."""
        s = np.hypot(self.stderr, self.truth_stderr)
        return float((self.value - self.truth) / s) if np.isfinite(s) and s > 0 else float("nan")


def _boot_rel_error(point, w, r, aux, truth, n_boot, seed) -> float:
    if not truth:
        return float("nan")
    gen = seeded_rng(seed, *BOOTSTRAP_STREAM)
    n = w.shape[0]
    errs = np.empty(n_boot)
    for b in range(n_boot):
        idx = gen.integers(0, n, size=n)
        errs[b] = abs(point(w[idx], r[idx], **{k: v[idx] for k, v in aux.items()}) - truth) / truth
    return float(errs.mean())


def evaluate_against_truth(eval_log: LoggedFeedback, target_log: LoggedFeedback, *, p_list=(10, 20),
                           alpha: float = 0.05, n_boot: int = 200, seed: int = 0,
                           prior_rows: float = 100.0, clusters: np.ndarray | None = None) -> list[OPEResult]:
    """The target log's policy evaluated on `eval_log` by every registered value estimator that applies,
    plus DM (the cross-fitted reward model alone), each beside the target's on-policy value.

    Target policy: `position_marginals(target_log)`; Phi^p: top-p of `position_marginals(eval_log)`.
    An estimator needing arrays these logs do not have (`needs`, or aux other than DR's) is skipped; one
    whose weights are cluster weights (it `needs` 'action_cluster': MIPS, OffCEM) gets `cluster_row_weights`
    when `clusters` ((A,) cluster id per action) is given."""
    if (eval_log.n_actions, eval_log.slate_size) != (target_log.n_actions, target_log.slate_size):
        raise PoxmInputError(f"{target_log.source}: expected the action set and slate of {eval_log.source} "
                             f"({eval_log.n_actions} actions, {eval_log.slate_size} slots), got "
                             f"{target_log.n_actions}, {target_log.slate_size}")
    pi = position_marginals(target_log)
    rho = position_marginals(eval_log)
    truth, truth_se = target_log.on_policy_value()
    r = eval_log.reward[:, None]
    dm, rl = crossfit_reward(eval_log, pi, seed=seed, prior_rows=prior_rows)
    aux_all = {"dm_term": dm[:, None], "rhat_logged": rl[:, None]}
    w_full = row_weights(eval_log, pi)[:, None]
    out = []
    for cls in ESTIMATORS.values():
        by_cluster = clusters is not None and "action_cluster" in cls.needs
        if (not cls.reported or cls.name in NOT_VALUE_ESTIMATES or (cls.needs and not by_cluster)
                or not set(cls.aux_names) <= _AUX_WE_GIVE):
            continue
        est = cls(alpha=alpha)
        aux = {k: aux_all[k] for k in cls.aux_names}
        if by_cluster:      # the whole action set is the support here (no selector to restrict it)
            cases = [(cls.label, cluster_row_weights(eval_log, pi, rho, clusters)[:, None])]
        else:
            cases = ([(f"{cls.label} p={p}", row_weights(eval_log, pi, selector(rho, p))[:, None]) for p in p_list]
                     if cls.support == "selector" else [(cls.label, w_full)])
        for label, w in cases:
            e = est.estimate(w, r, **aux)
            boot = _boot_rel_error(est.point, w, r, aux, truth, n_boot, seed)
            out.append(OPEResult(label, e.value, e.stderr, e.ci_low, e.ci_high, e.ess, truth, truth_se, boot))
    # DM: the reward model's own estimate mean_i dm_i (the dataset paper's DM). No interval: the spread of
    # dm_i over rows says nothing of the reward model's own error, which is what DM's error is.
    n = eval_log.n
    boot = _boot_rel_error(lambda w, r: float(np.mean(r)), np.ones((n, 1)), dm[:, None], {}, truth, n_boot, seed)
    nan = float("nan")
    out.append(OPEResult("DM", float(dm.mean()), nan, nan, nan, nan, truth, truth_se, boot))
    return out
