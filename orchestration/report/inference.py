"""The inference behind a claim: a paired difference over seeds on one shared test set, its 95 %
interval, its p-values (a t-test on the crossed variance, and an exact sign test on the seeds), and
Holm's step-down adjustment.

Data of one claim cell (dataset, variant, claim): for each of n seeds s and each of the m test
instances i, D_si = value_i(first method's selected head) − value_i(second's), the per-instance
metric (×100). The estimate is the mean  d = mean_s d_s,  d_s = mean_i D_si.

Two sources of noise move d: the seeds (training randomness, a fresh draw per seed) and the test
set (one sample of instances, shared by every seed, so averaging over seeds never shrinks it). In the
crossed random-effects model D_si = μ + a_s + b_i + e_si (seed effects σ_a², instance effects σ_b²,
their interaction σ_e²), Var(d) = σ_a²/n + σ_b²/m + σ_e²/(nm). The two-way layout's mean squares
estimate it without bias:

  seed term          v_seed = s²(d_1..d_n) / n          E = σ_a²/n + σ_e²/(nm)   (= MS_seed / (nm))
  instance term      v_inst = s²(D̄_1..D̄_m) / m          E = σ_b²/m + σ_e²/(nm)   (= MS_inst / (nm)),
                     D̄_i = mean_s D_si (seed-averaged per instance)
  interaction term   v_int  = MS_res / (nm),            E = σ_e²/(nm),
                     MS_res = Σ_si (D_si − d_s − D̄_i + d)² / ((n − 1)(m − 1))
  V = v_seed + v_inst − v_int                            E[V] = Var(d)

(each of v_seed and v_inst counts the interaction once; their plain sum counts it twice). Where one
main-effect component estimates below zero (v_seed < v_int or v_inst < v_int: that component is
nothing but noise), V is floored at the larger single term, max(V, v_seed, v_inst), whose own degrees
of freedom (n − 1 or m − 1) then apply; otherwise df by Satterthwaite,
  df = V² / (v_seed²/(n−1) + v_inst²/(m−1) + v_int²/((n−1)(m−1))).
95 % interval  d ± t_{0.975, df} · √V;  p = 2·P(T_df > |d| / √V). Its coverage is checked by simulation
with a known truth in tests/orchestration/report/test_inference*.py. Without per-instance values (a
claim on the selected p, or rows from before they were kept) the seed term alone gives the paired
t-interval over seeds (df = n − 1), labelled as such.

Sign test: the seeds whose difference is > 0 against those < 0 (ties dropped), two-sided exact
binomial at 1/2: p = min(1, 2·P(X ≤ min(k+, k−))), X ~ Bin(k+ + k−, 1/2); 1 when every seed ties. It
reads the seeds only (the test-set term is shared by every seed, so it cannot see it), makes no
assumption on the shape of the seed differences, and is the test a discrete statistic (the selected
p) is declared with.

Verdicts (claims_family.py): Holm's step-down over the run's declared family of cells; a cell holds
when its adjusted p < alpha and d > 0, fails when adjusted p < alpha and d < 0, else is undecided.
Below MIN_SEEDS seeds a cell gets no verdict ("too few seeds") and is left out of the family: two
seeds cannot say how much a third would differ.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import stats

__all__ = ["MIN_SEEDS", "ALPHA", "LEVEL", "TOO_FEW", "CrossedMoments", "paired_inference", "crossed_terms", "crossed_variance",
           "sign_test", "holm", "verdict_of"]

MIN_SEEDS = 3
ALPHA = 0.05
LEVEL = 0.95
TOO_FEW = "too few seeds"
SEEDS_AND_INSTANCES = "t (seeds + test instances)"
SEEDS_ONLY = "t (seeds)"


def _nan_result(n: int, m: int, kind: str) -> dict:
    return {"se": math.nan, "df": math.nan, "ci_lo": math.nan, "ci_hi": math.nan, "p_value": math.nan,
            "n": n, "m": m, "v_seed": math.nan, "v_inst": math.nan, "v_int": math.nan, "interval": kind}


def sign_test(positive: int, negative: int) -> float:
    """Two-sided exact sign test of `positive` seeds > 0 against `negative` < 0 (ties already dropped)."""
    k = int(positive) + int(negative)
    if k == 0:
        return 1.0
    return float(min(1.0, 2.0 * stats.binom.cdf(min(int(positive), int(negative)), k, 0.5)))


@dataclasses.dataclass(frozen=True)
class CrossedMoments:
    """What the crossed variance reads of the (n, m) differences D_si: each seed's mean over the
    instances (row_means, (n,)), each instance's mean over the seeds (col_means, (m,)) and Σ_si D_si²
    (sumsq). A published folder keeps these, not D (instance_moments.py)."""
    n: int
    m: int
    row_means: np.ndarray
    col_means: np.ndarray
    sumsq: float

    @classmethod
    def of(cls, instance_diffs) -> "CrossedMoments":
        """The moments of an (n, m) matrix D (or `instance_diffs` itself when it is moments already)."""
        if isinstance(instance_diffs, cls):
            return instance_diffs
        D = np.asarray(instance_diffs, dtype=float)
        return cls(n=D.shape[0], m=D.shape[1], row_means=D.mean(axis=1), col_means=D.mean(axis=0),
                   sumsq=float((D ** 2).sum()))


def crossed_terms(seed_diffs, instance_diffs) -> tuple[float, float, float]:
    """(v_seed, v_inst, v_int) of the module docstring: `seed_diffs` (n,) the per-seed means d_s,
    `instance_diffs` the per-instance differences D_si as an (n, m) matrix or its CrossedMoments (n, m
    >= 2). v_int from D alone (its own row, column and grand means: the residual sum of squares is
    Σ D² − m Σ_s r_s² − n Σ_i D̄_i² + nm D̄², the two-way layout's identity); v_seed from `seed_diffs`,
    the rows' means as the run recorded them."""
    d = np.asarray(seed_diffs, dtype=float)
    mo = CrossedMoments.of(instance_diffs)
    n, m, row, col = mo.n, mo.m, np.asarray(mo.row_means, dtype=float), np.asarray(mo.col_means, dtype=float)
    ss_res = mo.sumsq - m * float(row @ row) - n * float(col @ col) + n * m * float(row.mean()) ** 2
    # rounding can leave a residual that is exactly zero slightly below it
    ms_res = max(ss_res, 0.0) / ((n - 1) * (m - 1))
    return float(d.var(ddof=1)) / n, float(col.var(ddof=1)) / m, ms_res / (n * m)


def crossed_variance(v_seed: float, v_inst: float, v_int: float, n: int, m: int) -> tuple[float, float]:
    """(V, df): the unbiased V = v_seed + v_inst − v_int with Satterthwaite's df, or, where a main-effect
    component estimates below zero, the larger single term with its own df (module docstring)."""
    var = v_seed + v_inst - v_int
    if v_seed >= v_int and v_inst >= v_int:
        den = v_seed ** 2 / (n - 1) + v_inst ** 2 / (m - 1) + v_int ** 2 / ((n - 1) * (m - 1))
        return var, (var ** 2 / den if den > 0 else float(n - 1))
    return (v_seed, float(n - 1)) if v_seed >= v_inst else (v_inst, float(m - 1))


def paired_inference(seed_diffs, instance_diffs=None, level: float = LEVEL) -> dict:
    """Mean, standard error, df, `level` interval and two-sided p-value of a paired difference (module
    docstring), and the sign count with its exact sign test. `seed_diffs` (n,): each seed's mean
    difference; `instance_diffs` (n, m) or None: each seed's per-instance differences on the shared
    test set (same instance order in every row), or their CrossedMoments."""
    d = np.asarray(seed_diffs, dtype=float)
    n = len(d)
    pos, neg = int((d > 0).sum()), int((d < 0).sum())
    out = {"diff": float(d.mean()) if n else math.nan, "positive": pos, "negative": neg,
           "p_sign": sign_test(pos, neg)}
    D = None if instance_diffs is None else CrossedMoments.of(instance_diffs)
    m = 0 if D is None else D.m
    kind = SEEDS_AND_INSTANCES if D is not None and m > 1 else SEEDS_ONLY
    if n < 2:
        return {**out, **_nan_result(n, m, kind)}
    if kind == SEEDS_AND_INSTANCES:
        v_seed, v_inst, v_int = crossed_terms(d, D)
        var, df = crossed_variance(v_seed, v_inst, v_int, n, m)
    else:
        v_seed, v_inst, v_int = float(d.var(ddof=1)) / n, 0.0, 0.0
        var, df = v_seed, float(n - 1)
    se = math.sqrt(max(var, 0.0))
    if se == 0.0:      # every seed and instance equal: no noise to speak of
        lo = hi = out["diff"]
        p = 1.0 if out["diff"] == 0 else 0.0
    else:
        half = float(stats.t.ppf(0.5 + level / 2, df)) * se
        lo, hi = out["diff"] - half, out["diff"] + half
        p = float(2 * stats.t.sf(abs(out["diff"]) / se, df))
    return {**out, "se": se, "df": float(df), "ci_lo": lo, "ci_hi": hi, "p_value": p, "n": n, "m": m,
            "v_seed": v_seed, "v_inst": v_inst, "v_int": v_int, "interval": kind}


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values (nan stays nan and is not counted in the family):
    sorted ascending p_(1) <= ... <= p_(k), adjusted_(j) = max_{i<=j} min(1, (k − i + 1) p_(i))."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if not len(ok):
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    k = len(order)
    adj = np.minimum(1.0, (k - np.arange(k)) * p[order])
    out[order] = np.maximum.accumulate(adj)
    return out


def verdict_of(diff: float, p_adjusted: float, n: int, alpha: float = ALPHA) -> str:
    """'holds' / 'fails' / 'undecided' from the Holm-adjusted p-value and the sign; TOO_FEW below MIN_SEEDS."""
    if n < MIN_SEEDS:
        return TOO_FEW
    if not math.isfinite(p_adjusted) or p_adjusted >= alpha:
        return "undecided"
    return "holds" if diff > 0 else "fails" if diff < 0 else "undecided"
