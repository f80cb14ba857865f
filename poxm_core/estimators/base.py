"""Shared machinery of the estimators: the result type, validation (written once), ESS, intervals.

An estimator is a thin frozen dataclass of settings with ONE real method, `per_sample(w, r, **aux)`,
returning (n,) terms t_i (the n logged instances are i.i.d.; the ell positions of one slate are not,
so they are summed inside t_i). Then

    value  = mean_i t_i                      (an estimator may compute it more exactly: `point`)
    stderr = std_i(t_i, ddof=1) / sqrt(n)    (CLT; for SNIS the t_i are delta-method influence terms)
    CI     = value -/+ z_{1-alpha/2} * stderr (normal), or a seeded percentile bootstrap over instances
    ESS    = (sum_ij w_ij)^2 / sum_ij w_ij^2 over all n*ell entries (0 if every weight is 0)

On a validation log the estimator is called through one hook, `estimate_on(log: ValidationLog)`: its
`weights_on(log)` makes the (n, ell) weights (by default the importance weights of its `support`, pruned
or prefix as `weights` says) and `per_sample` gets them with its `aux_names` arrays. An estimator that
needs more than that (a marginalised IPS over action clusters, an embedding-based one) declares the
extra arrays by name in `needs` and overrides `weights_on`, reading them from `log.arrays`; the caller
gathers what `needs` names without knowing the estimator (docs/estimators.md, "Estimators that need
more than the weights").
"""
from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from poxm_core.common.errors import PoxmInputError
from poxm_core.estimators.weights import importance_weights

__all__ = ["Estimate", "BaseEstimator", "ValidationLog", "effective_sample_size", "validate_log_arrays"]



def normal_quantile(q) -> float:
    """The standard normal quantile, scipy.stats.norm.ppf(q) (which is scipy.special.ndtri(q), the same
    floats), memoised: SciPy's ppf is slow for one value (argument checks), and every estimate of every
    head at every epoch asks for the same one or two quantiles."""
    return _normal_quantile(float(q))


@functools.lru_cache(maxsize=64)
def _normal_quantile(q: float) -> float:
    # ndtri, not norm.ppf: importing scipy.stats was about a fifth of a trial process's imports
    # (docs/performance.md); scipy.special alone is a quarter of that
    from scipy.special import ndtri
    return float(ndtri(q))

@dataclass(frozen=True)
class Estimate:
    """Point estimate of a policy value with its standard error, interval, ESS and sample size n."""
    value: float
    stderr: float
    ci_low: float
    ci_high: float
    ess: float
    n: int

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{k}": float(getattr(self, k)) for k in ("value", "stderr", "ci_low", "ci_high", "ess", "n")}


def effective_sample_size(w) -> float:
    """(sum w)^2 / sum w^2 over every entry of w (Kong 1992); 0 when all weights are 0."""
    if isinstance(w, torch.Tensor):
        w = w.detach().cpu().double().numpy()
    w = np.asarray(w, dtype=np.float64)
    s2 = float(np.sum(w * w))
    return float(np.sum(w)) ** 2 / s2 if s2 > 0 else 0.0


def _as_2d(name: str, a, shape=None) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    try:
        a = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise PoxmInputError(f"{name}: expected a numeric (n, ell) array, got {type(a).__name__}") from e
    if a.ndim != 2:
        raise PoxmInputError(f"{name}: expected a 2-D (n, ell) array, got shape {a.shape}")
    if shape is not None and a.shape != shape:
        raise PoxmInputError(f"{name}: expected shape {shape} like w, got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise PoxmInputError(f"{name}: expected finite values, got NaN or inf")
    return a


def validate_log_arrays(w, r, aux: dict) -> tuple[np.ndarray, np.ndarray, dict]:
    """w >= 0 finite (n, ell) with n >= 1; r and every aux array finite with the same shape."""
    w = _as_2d("w", w)
    if w.shape[0] < 1:
        raise PoxmInputError("w: expected at least one logged instance (n >= 1), got n = 0")
    if np.any(w < 0):
        raise PoxmInputError(f"w: expected non-negative importance weights, got min {w.min()}")
    r = _as_2d("r", r, w.shape)
    return w, r, {k: _as_2d(k, v, w.shape) for k, v in aux.items()}


def _check_torch(w: torch.Tensor, r: torch.Tensor, aux: dict) -> None:
    if not isinstance(w, torch.Tensor) or not isinstance(r, torch.Tensor):
        raise PoxmInputError(f"w, r: expected torch tensors, got {type(w).__name__}, {type(r).__name__}")
    if w.dim() != 2 or w.shape[0] < 1:
        raise PoxmInputError(f"w: expected a 2-D (n, ell) tensor with n >= 1, got shape {tuple(w.shape)}")
    for k, v in {"r": r, **aux}.items():
        if tuple(v.shape) != tuple(w.shape):
            raise PoxmInputError(f"{k}: expected shape {tuple(w.shape)} like w, got {tuple(v.shape)}")


@dataclass(frozen=True, eq=False)
class ValidationLog:
    """One validation log as the estimators see it (`BaseEstimator.estimate_on`).

    logpi   {support: (n, ell) log pi_A(y_ij | x_i, y_i,<j)}: "policy" (the policy's support S),
            "selector" (Phi^p(x)); the supports a caller has
    q, r    (n, ell) conditional logging propensities and rewards
    aux     {name: (n, ell)} per-position arrays for `per_sample` (`aux_names`: DR's dm_term, rhat_logged)
    arrays  {name: array} what an estimator's `needs` may name: per-action arrays indexed by label id
            (first axis L) and per-log arrays (first axis n); the names the trainer gives are listed
            in docs/estimators.md
    """
    logpi: Mapping[str, np.ndarray]
    q: np.ndarray
    r: np.ndarray
    aux: Mapping[str, np.ndarray] = field(default_factory=dict)
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)
    _weights: dict = field(default_factory=dict, repr=False)   # (support, kind) -> weights, made once

    def importance_weights(self, support: str, kind: str = "pruned") -> np.ndarray:
        """(n, ell) importance weights of `support`, "pruned" (pi/q per position) or "prefix" (product);
        computed once per (support, kind) and shared by every estimator of this log."""
        key = (support, kind)
        if key not in self._weights:
            self._weights[key] = importance_weights(self.logpi[support], self.q, pruned=kind == "pruned")
        return self._weights[key]


@dataclass(frozen=True)
class BaseEstimator:
    """Settings common to every estimator. alpha: 1 - confidence level of the interval."""
    alpha: float = 0.05

    name: ClassVar[str] = ""
    aux_names: ClassVar[tuple[str, ...]] = ()   # extra (n, ell) arrays `per_sample` needs
    weights: ClassVar[str] = "pruned"           # weights to pass: "pruned" (pi/q per position) or "prefix" (product)
    # How the trainer reports it on the validation log (`estimators.validation`): the metric name of
    # its rows (`label`, e.g. "SNIS"), the support A of the policy's log pi_A: "policy" (the test-time
    # policy's own support S) or "selector" (Phi^p(x), sIS); reported=False for an objective that
    # needs a setting the validation log does not have (translated: shift).
    label: ClassVar[str] = ""
    support: ClassVar[str] = "policy"
    reported: ClassVar[bool] = True
    # Extra arrays `weights_on` reads from `ValidationLog.arrays`, by name (e.g. a per-action cluster id
    # or embedding array); an estimator whose needs a log does not have is not reported on it.
    needs: ClassVar[tuple[str, ...]] = ()
    # True for an estimator that makes its `aux_names` arrays itself from `needs` (OffCEM): a log
    # without those aux arrays does not skip it.
    aux_from_arrays: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0 < self.alpha < 1:
            raise PoxmInputError(f"alpha: expected a float in (0, 1) (1 - confidence level), got {self.alpha!r}")

    # ---- the one method an estimator must define -------------------------------------------
    def per_sample(self, w: np.ndarray, r: np.ndarray, **aux: np.ndarray) -> np.ndarray:
        """(n,) per-instance terms; their mean is the estimate, their spread gives the stderr."""
        raise NotImplementedError

    def torch_value(self, w: torch.Tensor, r: torch.Tensor, **aux: torch.Tensor) -> torch.Tensor:
        """Differentiable scalar value (same formula as `point`)."""
        raise NotImplementedError

    def point(self, w: np.ndarray, r: np.ndarray, **aux: np.ndarray) -> float:
        """Point estimate on validated arrays; the mean of `per_sample` unless overridden."""
        return float(np.mean(self.per_sample(w, r, **aux)))

    # ---- the hook on a validation log (override `weights_on` for weights of another kind) ----------
    def weights_on(self, log: ValidationLog) -> np.ndarray:
        """(n, ell) weights passed to `per_sample` on `log`: the importance weights of this class's
        `support`, pruned or prefix (`weights`). Override to make others from `log.arrays[needs...]`."""
        return log.importance_weights(self.support, self.weights)

    def estimate_on(self, log: ValidationLog) -> Estimate:
        """`estimate` on a validation log: `weights_on(log)`, its rewards and its `aux_names` arrays."""
        self._check_needs(log)
        return self.estimate(self.weights_on(log), log.r, **{k: log.aux[k] for k in self.aux_names})

    def _check_needs(self, log: ValidationLog) -> None:
        missing = [k for k in self.needs if k not in log.arrays]
        if missing:
            raise PoxmInputError(f"{self.name}: the validation log lacks the arrays {missing} it needs "
                                 f"(it has {sorted(log.arrays)})")

    # ---- shared ---------------------------------------------------------------------------------
    def _aux(self, aux: dict) -> dict:
        missing = [k for k in self.aux_names if k not in aux]
        extra = [k for k in aux if k not in self.aux_names]
        if missing or extra:
            raise PoxmInputError(f"{self.name}: expected extra arrays {list(self.aux_names)}, "
                                 f"missing {missing}, unexpected {extra}")
        return aux

    def value(self, w, r, **aux) -> float:
        """Point estimate only (validated)."""
        w, r, aux = validate_log_arrays(w, r, self._aux(aux))
        return self.point(w, r, **aux)

    def estimate(self, w, r, **aux) -> Estimate:
        """Value, CLT standard error, normal interval, ESS, n."""
        w, r, aux = validate_log_arrays(w, r, self._aux(aux))
        n = w.shape[0]
        terms = self.per_sample(w, r, **aux)
        value = self.point(w, r, **aux)
        stderr = float(np.std(terms, ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
        z = normal_quantile(1 - self.alpha / 2)
        return Estimate(value, stderr, value - z * stderr, value + z * stderr, effective_sample_size(w), n)

    def estimate_bootstrap(self, w, r, n_boot: int = 1000, seed: int = 0, **aux) -> Estimate:
        """As `estimate`, but stderr = std of `n_boot` bootstrap replicates (instances resampled with
        replacement, seeded) and the percentile interval [alpha/2, 1 - alpha/2] of those replicates."""
        if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 2:
            raise PoxmInputError(f"n_boot: expected an int >= 2, got {n_boot!r}")
        w, r, aux = validate_log_arrays(w, r, self._aux(aux))
        n = w.shape[0]
        rng = np.random.default_rng(seed)
        reps = np.empty(n_boot)
        for b in range(n_boot):
            idx = rng.integers(0, n, size=n)
            reps[b] = self.point(w[idx], r[idx], **{k: v[idx] for k, v in aux.items()})
        lo, hi = np.quantile(reps, [self.alpha / 2, 1 - self.alpha / 2])
        return Estimate(self.point(w, r, **aux), float(np.std(reps, ddof=1)), float(lo), float(hi),
                        effective_sample_size(w), n)

    def value_torch(self, w: torch.Tensor, r: torch.Tensor, **aux: torch.Tensor) -> torch.Tensor:
        """Shape-checked differentiable value (a training objective is its negative)."""
        aux = self._aux(aux)
        _check_torch(w, r, aux)
        return self.torch_value(w, r, **aux)
