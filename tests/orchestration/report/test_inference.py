"""The claims' inference (orchestration/report/inference.py): the interval against scipy.stats, Holm
against a hand-computed family, and the interval's coverage by simulation with a known truth."""
from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
from scipy import stats

from orchestration.report.inference import MIN_SEEDS, TOO_FEW, holm, paired_inference, verdict_of


def test_seed_term_alone_is_scipys_paired_t_interval():
    d = np.array([1.5, -0.3, 2.2, 0.9, 1.1])
    r = paired_inference(d)
    t = stats.ttest_1samp(d, 0.0)
    assert (r["ci_lo"], r["ci_hi"]) == pytest.approx(tuple(t.confidence_interval(0.95)))
    assert r["p_value"] == pytest.approx(t.pvalue) and r["df"] == 4 and r["interval"] == "t (seeds)"
    assert (r["positive"], r["negative"], r["n"]) == (4, 1, 5)


def test_two_terms_hand_computed():
    rng = np.random.default_rng(1)
    D = rng.normal(1.0, 3.0, size=(4, 30))
    d = D.mean(1)
    r = paired_inference(d, D)
    v1 = np.var(d, ddof=1) / 4
    v2 = np.var(D.mean(0), ddof=1) / 30
    df = (v1 + v2) ** 2 / (v1 ** 2 / 3 + v2 ** 2 / 29)
    se = math.sqrt(v1 + v2)
    assert r["se"] == pytest.approx(se) and r["df"] == pytest.approx(df)
    q = stats.t.ppf(0.975, df)
    assert (r["ci_lo"], r["ci_hi"]) == pytest.approx((d.mean() - q * se, d.mean() + q * se))
    assert r["p_value"] == pytest.approx(2 * stats.t.sf(abs(d.mean()) / se, df))


def test_no_spread_and_one_seed():
    r = paired_inference([2.0, 2.0, 2.0])
    assert (r["ci_lo"], r["ci_hi"], r["p_value"]) == (2.0, 2.0, 0.0)
    one = paired_inference([2.0])
    assert math.isnan(one["ci_lo"]) and math.isnan(one["p_value"]) and one["n"] == 1


def test_holm_hand_computed_and_nan_left_out():
    p = [0.01, 0.04, 0.03, math.nan, 0.20]
    # family of 4: sorted 0.01, 0.03, 0.04, 0.20 -> 4*0.01, 3*0.03, 2*0.04, 1*0.20, then running max
    assert holm(p)[[0, 2, 1, 4]] == pytest.approx([0.04, 0.09, 0.09, 0.20])
    assert math.isnan(holm(p)[3])
    assert np.isnan(holm([math.nan])).all()


def test_verdicts():
    assert verdict_of(1.0, 0.01, 10) == "holds" and verdict_of(-1.0, 0.01, 10) == "fails"
    assert verdict_of(1.0, 0.2, 10) == "undecided" and verdict_of(1.0, math.nan, 10) == "undecided"
    assert verdict_of(5.0, 0.0, MIN_SEEDS - 1) == TOO_FEW


def _draw(rng, kind: str, size):
    """Mean 0, variance 1: normal, or a gamma(4) shifted and scaled (skewness 1)."""
    if kind == "normal":
        return rng.standard_normal(size)
    return (rng.gamma(4.0, 1.0, size) - 4.0) / 2.0


def _coverage(kind: str, n: int, seed_sd: float, inst_sd: float, m: int = 200, reps: int = 2000) -> float:
    """Share of `reps` simulated benchmarks whose 95 % interval covers the true mean difference 1.0.
    Each draws its own test set (instance effects, shared by its n seeds), seed effects and noise:
    D_si = 1 + u_s + e_i + eps_si."""
    rng = np.random.default_rng(zlib.crc32(f"{kind}/{n}/{seed_sd}/{inst_sd}".encode()))
    hit = 0
    for _ in range(reps):
        u = seed_sd * _draw(rng, kind, n)
        e = inst_sd * _draw(rng, kind, m)
        D = 1.0 + u[:, None] + e[None, :] + 3.0 * _draw(rng, kind, (n, m))
        r = paired_inference(D.mean(1), D)
        hit += r["ci_lo"] <= 1.0 <= r["ci_hi"]
    return hit / reps


# (seed sd, instance sd): the test-set term dominant (as on the real datasets' thousands of test rows
# with per-instance R@5 differences of tens of points), comparable, and the seed term dominant
@pytest.mark.parametrize("kind, n, seed_sd, inst_sd", [
    ("normal", 5, 1.0, 12.0), ("normal", 5, 1.0, 6.0), ("normal", 5, 1.0, 2.0),
    ("normal", 10, 1.0, 12.0), ("normal", 10, 1.0, 2.0),
    ("skewed", 5, 1.0, 12.0), ("skewed", 5, 1.0, 6.0),
    ("skewed", 10, 1.0, 12.0), ("skewed", 10, 1.0, 2.0)])
def test_coverage_within_two_points_of_nominal(kind, n, seed_sd, inst_sd):
    """Monte-Carlo error of a coverage over 2,000 replicates: sd 0.5 points. Not listed: skewed seed
    differences that dominate the test-set term at 5 seeds cover about 92 % (the t-interval's small-
    sample skew error), one reason the benchmark publishes at ten seeds (docs/report.md)."""
    assert abs(_coverage(kind, n, seed_sd, inst_sd) - 0.95) <= 0.02


def test_leaving_out_the_test_set_term_undercovers():
    """The seed term alone (the earlier interval's blind spot: a shared test set) misses the truth far
    more often than 5 % when the test set's sampling noise is real: the check can fail."""
    rng = np.random.default_rng(3)
    hit = 0
    for _ in range(1000):
        e = 12.0 * rng.standard_normal(200)
        D = 1.0 + rng.standard_normal(5)[:, None] + e[None, :] + 3.0 * rng.standard_normal((5, 200))
        r = paired_inference(D.mean(1))
        hit += r["ci_lo"] <= 1.0 <= r["ci_hi"]
    assert hit / 1000 < 0.85
