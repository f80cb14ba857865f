"""A logging variant matched to a target logging quality (config `match`, docs/data.md): instead of a
declared temperature, prepare solves for the T at which

    ratio(T) = R@5(rho_T) / P@5(reference)          on held-out *training* rows

equals the target, where R@5(rho_T) is the logging policy's expected R@5 (Plackett-Luce slates of 5
drawn from rho_T on C(x), the exact expectation of poxm_core.metrics.slate.stochastic_metrics) and
P@5(reference) the greedy P@5 of a supervised reference: the core model trained with full labels
(one-vs-all logistic, the logging model's training with alpha = 1) on the training rows other than
the held-out rows and the validation slice. The held-out rows lie outside the logging model's alpha
sample too, so neither model saw them; test labels are never read.

rho_T is the variant construction used everywhere (poxm_core.bandit.policy.build_variant: E = ln p_hat +
beta (G - gamma), softmax of E / T over C(x), the variant's frozen Gumbel noise of the training split),
so the rho the solve measures on a held-out row is the rho the variant then logs with on that row.

The solve: the limits T -> 0 (the greedy ranking by E: its P@5) and T -> inf (uniform over C(x)) bound
what T can reach; a target outside them is an input error. Inside, T is bracketed from T = 1 by steps
of x4 on log T and found by the Illinois variant of regula falsi on log T until the ratio is within
TOL of the target. ratio(T) is continuous in T, so a bracket always holds a solution whatever its
shape; whether the evaluated ratios decrease with T (they do for beta = 0 in every case measured) is
recorded as `monotone`.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Callable

import numpy as np
import scipy.sparse as sp

from poxm_core.bandit.policy import build_variant
from poxm_core.bandit.simulate import validation_split
from poxm_core.bandit.variant import VariantPolicy
from poxm_core.common.errors import PoxmInputError
from poxm_core.common.seeds import rng
from poxm_core.config.schema import ModelConfig
from poxm_core.metrics.ranking import greedy_metrics, stochastic_metrics
from poxm_core.model.core import encode
from poxm_core.model.logging_model import train_logging_model
from poxm_core.model.topk import chunked_topk

__all__ = ["HELDOUT", "TOL", "STATISTIC_K", "heldout_rows", "build_reference", "MatchProblem", "solve_temperature"]

# The held-out rows: this share of the training rows (at least `min`, at most `max`), drawn from the
# fit rows outside the alpha sample. Part of the reference level's cache key.
HELDOUT = MappingProxyType({"fraction": 0.1, "min": 200, "max": 2000})
TOL = 1e-3                    # |ratio - target| at which the solve stops (the promise is 0.005)
STATISTIC_K = 5               # logging_to_skyline_R@5: slates of 5, the reference's top 5
T_MIN, T_MAX = 4.0 ** -6, 4.0 ** 8
_STEP = math.log(4.0)
_MAX_EVALS = 60


def heldout_rows(n_train: int, fit_rows: np.ndarray, alpha_rows: np.ndarray, seed: int) -> np.ndarray:
    """Sorted held-out training rows: a seeded draw (stream (seed, "match", "heldout")) from the fit
    rows outside the logging model's alpha sample; round(fraction * n_train) of them, within [min, max]
    and at most all such rows. Empty when the alpha sample covers every fit row."""
    pool = np.setdiff1d(np.asarray(fit_rows, dtype=np.int64), np.asarray(alpha_rows, dtype=np.int64))
    n = min(pool.size, HELDOUT["max"], max(HELDOUT["min"], int(round(HELDOUT["fraction"] * n_train))))
    return np.sort(rng(seed, "match", "heldout").choice(pool, size=n, replace=False)) if n else pool


def build_reference(d: Path, data_dir: Path, model_dir: Path, mcfg: ModelConfig, seed: int, val_fraction: float,
                    device, progress: bool = False, where: str = "") -> dict:
    """The reference level: held-out rows, the supervised reference trained on the other fit rows, its
    greedy top-5 on the held-out rows and their P@k. Writes `heldout_rows.npy` (int64, sorted) and
    `reference_top5.npy` (int64 (n_heldout, 5)) into `d`; returns the level's stats."""
    X = sp.load_npz(data_dir / "X_train.npz").tocsr()
    Y = sp.load_npz(data_dir / "Y_train.npz").tocsr()
    inv = np.load(data_dir / "inv_propensity.npy")
    n, L = Y.shape
    if L < STATISTIC_K:
        raise PoxmInputError(f"{where}: the statistic needs at least {STATISTIC_K} labels, the dataset has {L}")
    fit_rows, _ = validation_split(n, val_fraction, seed)
    held = heldout_rows(n, fit_rows, np.load(model_dir / "alpha_rows.npy"), seed)
    if held.size == 0:
        raise PoxmInputError(f"{where}: no training row is left outside the logging model's sample to measure "
                             f"the logging quality on (alpha covers every fit row); use an alpha below 1")
    ref_rows = np.setdiff1d(fit_rows, held)
    model = train_logging_model(X, Y, mcfg, 1.0, seed, device, progress=progress, rows=ref_rows)
    W, b = model.head_arrays()
    top, _ = chunked_topk(encode(model, X[held], device), W, b, STATISTIC_K, mcfg.topk_chunk_mb, device)
    np.save(d / "heldout_rows.npy", held)
    np.save(d / "reference_top5.npy", top)
    return {"n_heldout": int(held.size), "n_reference": int(ref_rows.size),
            "reference_heldout": greedy_metrics(Y[held], top, inv, (1, 3, STATISTIC_K))}


@dataclass
class MatchProblem:
    """ratio(T) on the held-out rows: their labels, their training-split candidates and logits (rows
    `rows` of the split, which key the frozen noise), the variant's beta and noise seed, the reference's
    P@5 there."""
    Y: sp.csr_matrix            # (n_h, L) labels of the held-out training rows
    cand: np.ndarray            # (n_h, K) C(x), top-K by logit
    scores: np.ndarray          # (n_h, K) their logits
    rows: np.ndarray            # (n_h,) their rows in the training split
    inv_prop: np.ndarray        # (L,)
    beta: float
    noise_seed: tuple           # the variant's training-split noise key (seed, name code, 0)
    reference_p5: float
    device: object = None       # stochastic_metrics' device (None: NumPy)

    def policy(self, T: float) -> VariantPolicy:
        return build_variant(self.cand, self.scores, self.beta, T, seed=self.noise_seed, rows=self.rows)

    def r_at_k(self, pol: VariantPolicy) -> float:
        """rho's expected R@5, exact (the position probabilities' quadrature, never Monte-Carlo)."""
        n, K = pol.cand.shape
        return stochastic_metrics(self.Y, pol.cand, pol.rho, self.inv_prop, (STATISTIC_K,),
                                  exact_budget=n * K, device=self.device)[f"R@{STATISTIC_K}"]

    def ratio(self, T: float) -> float:
        return self.r_at_k(self.policy(T)) / self.reference_p5

    def greedy_limit(self) -> float:
        """ratio as T -> 0: slates become the top 5 by E (rho's order at any T), so R@5 -> their P@5."""
        top = self.policy(1.0).cand[:, :STATISTIC_K]
        return greedy_metrics(self.Y, top, self.inv_prop, (STATISTIC_K,))[f"P@{STATISTIC_K}"] / self.reference_p5

    def uniform_limit(self) -> float:
        """ratio as T -> inf: rho uniform over C(x)."""
        return self.r_at_k(VariantPolicy(np.asarray(self.cand, dtype=np.int64),
                                         np.full(self.cand.shape, 1.0 / self.cand.shape[1]))) / self.reference_p5


def _limits_around(problem: MatchProblem, target: float, where: str) -> tuple[float, float]:
    """(the ratio as T -> 0, as T -> inf), once `target` lies strictly between them; else one line."""
    if not problem.reference_p5 > 0:
        raise PoxmInputError(f"{where}: the supervised reference's P@5 on the {problem.Y.shape[0]} held-out "
                             f"training rows is 0; no ratio to match")
    r0, rinf = problem.greedy_limit(), problem.uniform_limit()
    if not rinf < target < r0:
        raise PoxmInputError(
            f"{where}: target {target:g} is out of reach: this logging model's rho reaches ratios between "
            f"{rinf:.4f} (T -> inf, uniform over C(x)) and {r0:.4f} (T -> 0, greedy) on "
            f"{problem.Y.shape[0]} held-out training rows (reference P@5 {problem.reference_p5:.4f})")
    return r0, rinf


def _root_on_log_T(f: Callable[[float], float], tol: float, out_of_range: Callable[[], Exception]) -> None:
    """Drive f(log T) = ratio - target to within `tol`, starting at T = 1: bracket by steps of _STEP
    (within [T_MIN, T_MAX], else `out_of_range()` is raised), then Illinois. The caller reads the
    point that stopped the solve from its own trace of f's evaluations."""
    x = 0.0
    fx = f(x)
    if abs(fx) <= tol:
        return
    # bracket: a sharper T where the ratio is above the target, a flatter one where it is below
    step = _STEP if fx > 0 else -_STEP
    a, fa = x, fx
    while True:
        b = a + step
        if not math.log(T_MIN) - 1e-12 <= b <= math.log(T_MAX) + 1e-12:
            raise out_of_range()
        fb = f(b)
        if abs(fb) <= tol or (fb > 0) != (fa > 0):
            break
        a, fa = b, fb
    x, fx = b, fb
    # Illinois (regula falsi with the retained end's value halved) on log T
    while abs(fx) > tol:
        c = x - fx * (x - a) / (fx - fa)
        fc = f(c)
        if (fc > 0) != (fx > 0):
            a, fa = x, fx
        else:
            fa /= 2.0
        x, fx = c, fc


def solve_temperature(problem: MatchProblem, target: float, where: str, tol: float = TOL,
                      say: Callable[[str], None] | None = None) -> dict:
    """The T at which problem.ratio(T) is within `tol` of `target`, and what the manifest records.
    `where` names the dataset, variant and config key in an error (one line, PoxmInputError)."""
    r0, rinf = _limits_around(problem, target, where)
    trace: list[tuple[float, float]] = []

    def f(x: float) -> float:
        if len(trace) >= _MAX_EVALS:
            raise PoxmInputError(f"{where}: no T within {tol:g} of target {target:g} after {_MAX_EVALS} evaluations")
        T = math.exp(x)
        r = problem.ratio(T)
        trace.append((T, r))
        if say is not None:
            say(f"T={T:.6g}: ratio {r:.4f} (target {target:g})")
        return r - target

    def out_of_range() -> PoxmInputError:
        T, r = trace[-1]
        return PoxmInputError(f"{where}: target {target:g} lies between the limits T -> inf ({rinf:.4f}) and "
                              f"T -> 0 ({r0:.4f}) but no T in [{T_MIN:g}, {T_MAX:g}] reaches it (ratio "
                              f"{r:.4f} at T = {T:g})")

    _root_on_log_T(f, tol, out_of_range)
    T, ratio = trace[-1]            # the last point evaluated is the one that stopped the solve
    pts = sorted(trace)
    monotone = all(r2 <= r1 + 1e-9 for (_, r1), (_, r2) in zip([(0.0, r0)] + pts, pts + [(math.inf, rinf)]))
    if not monotone:
        warnings.warn(f"{where}: the ratio did not decrease with T at every evaluated point "
                      f"({', '.join(f'T={t:.3g}: {r:.4f}' for t, r in pts)}); T = {T:.6g} reaches the target",
                      stacklevel=2)
    return {"statistic": f"logging_to_skyline_R@{STATISTIC_K}", "target": float(target), "T": T,
            "ratio": ratio, f"R@{STATISTIC_K}": ratio * problem.reference_p5,
            f"reference_P@{STATISTIC_K}": float(problem.reference_p5), "n_heldout": int(problem.Y.shape[0]),
            "limits": {"T_to_0": r0, "T_to_inf": rinf}, "monotone": bool(monotone), "evaluations": len(trace),
            "trace": [[t, r] for t, r in pts]}
