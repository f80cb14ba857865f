"""The inference behind a claim: a paired difference over seeds on one shared test set, its 95 %
interval, its p-value, and verdicts corrected for multiplicity (Holm) within each claim.

Data of one claim cell (dataset, variant, claim): for each of n seeds s and each of the m test
instances i, D_si = value_i(first method's selected head) − value_i(second's), the per-instance
metric (×100). The estimate is the mean  d = mean_s d_s,  d_s = mean_i D_si.

Two sources of noise move d: the seeds (training randomness, a fresh draw per seed) and the test
set (one sample of instances, shared by every seed, so averaging over seeds never shrinks it). By
the law of total variance, Var(d) = E[Var(d | test set)] + Var(E[d | test set]); each term has a
plain estimate, and the interval uses their sum:

  seed term      v_seed = s²(d_1..d_n) / n             (the seed-to-seed variance of the per-seed means)
  instance term  v_inst = s²(Dbar_1..Dbar_m) / m,     Dbar_i = mean_s D_si (seed-averaged per instance)
  se = sqrt(v_seed + v_inst), degrees of freedom by Welch–Satterthwaite:
  df = (v_seed + v_inst)² / (v_seed²/(n−1) + v_inst²/(m−1))
  95 % interval  d ± t_{0.975, df} · se;  p = 2·P(T_df > |d| / se)

Both terms carry the per-(seed, instance) interaction once more than Var(d) does (each estimates it
as σ²/(nm)), so the interval errs on the wide side by that amount; its coverage is checked by
simulation with a known truth in tests/orchestration/report/test_inference.py. Without per-instance values (a claim on
the selected p, or rows from before they were kept) the seed term alone gives the paired t-interval
over seeds (df = n − 1), labelled as such.

Verdicts: within each claim (and criterion), the cells over datasets × variants are one family;
Holm's step-down adjusts their p-values; a cell holds when its adjusted p < 0.05 and d > 0, fails
when adjusted p < 0.05 and d < 0, else is undecided. Below MIN_SEEDS seeds a cell gets no verdict
("too few seeds") and is left out of the family: two seeds cannot say how much a third would differ.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats

__all__ = ["MIN_SEEDS", "ALPHA", "LEVEL", "TOO_FEW", "paired_inference", "holm", "verdict_of"]

MIN_SEEDS = 3
ALPHA = 0.05
LEVEL = 0.95
TOO_FEW = "too few seeds"
SEEDS_AND_INSTANCES = "t (seeds + test instances)"
SEEDS_ONLY = "t (seeds)"


def _nan_result(n: int, m: int, kind: str) -> dict:
    return {"se": math.nan, "df": math.nan, "ci_lo": math.nan, "ci_hi": math.nan, "p_value": math.nan,
            "n": n, "m": m, "v_seed": math.nan, "v_inst": math.nan, "interval": kind}


def paired_inference(seed_diffs, instance_diffs=None, level: float = LEVEL) -> dict:
    """Mean, standard error, Welch–Satterthwaite df, `level` interval and two-sided p-value of a paired
    difference (module docstring). `seed_diffs` (n,): each seed's mean difference; `instance_diffs`
    (n, m) or None: each seed's per-instance differences on the shared test set (same instance order
    in every row). Also the sign count: seeds whose difference is > 0 ("positive") of n."""
    d = np.asarray(seed_diffs, dtype=float)
    n = len(d)
    out = {"diff": float(d.mean()) if n else math.nan, "positive": int((d > 0).sum()), "negative": int((d < 0).sum())}
    D = None if instance_diffs is None else np.asarray(instance_diffs, dtype=float)
    m = 0 if D is None else D.shape[1]
    kind = SEEDS_AND_INSTANCES if D is not None and m > 1 else SEEDS_ONLY
    if n < 2:
        return {**out, **_nan_result(n, m, kind)}
    v_seed = float(d.var(ddof=1)) / n
    v_inst = float(D.mean(axis=0).var(ddof=1)) / m if kind == SEEDS_AND_INSTANCES else 0.0
    var = v_seed + v_inst
    if kind == SEEDS_AND_INSTANCES:
        den = v_seed ** 2 / (n - 1) + v_inst ** 2 / (m - 1)
        df = var ** 2 / den if den > 0 else float(n - 1)
    else:
        df = float(n - 1)
    se = math.sqrt(var)
    if se == 0.0:      # every seed and instance equal: no noise to speak of
        lo = hi = out["diff"]
        p = 1.0 if out["diff"] == 0 else 0.0
    else:
        half = float(stats.t.ppf(0.5 + level / 2, df)) * se
        lo, hi = out["diff"] - half, out["diff"] + half
        p = float(2 * stats.t.sf(abs(out["diff"]) / se, df))
    return {**out, "se": se, "df": float(df), "ci_lo": lo, "ci_hi": hi, "p_value": p, "n": n, "m": m,
            "v_seed": v_seed, "v_inst": v_inst, "interval": kind}


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
