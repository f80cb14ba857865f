"""The claims' inference (orchestration/report/inference.py): the interval against scipy.stats, the
crossed variance against a hand-computed two-way layout and a simulation, the sign test against
scipy's binomial test, Holm against a hand-computed family. The interval's coverage by simulation is
test_inference_coverage.py."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from orchestration.report.inference import (MIN_SEEDS, TOO_FEW, crossed_terms, crossed_variance, holm,
                                            paired_inference, sign_test, verdict_of)


def test_seed_term_alone_is_scipys_paired_t_interval():
    d = np.array([1.5, -0.3, 2.2, 0.9, 1.1])
    r = paired_inference(d)
    t = stats.ttest_1samp(d, 0.0)
    assert (r["ci_lo"], r["ci_hi"]) == pytest.approx(tuple(t.confidence_interval(0.95)))
    assert r["p_value"] == pytest.approx(t.pvalue) and r["df"] == 4 and r["interval"] == "t (seeds)"
    assert (r["positive"], r["negative"], r["n"]) == (4, 1, 5)
    assert r["p_sign"] == pytest.approx(stats.binomtest(4, 5, 0.5).pvalue)      # 2 * 6/32


@pytest.mark.parametrize("pos, neg", [(9, 1), (10, 0), (5, 5), (3, 0), (7, 2), (0, 6), (12, 8), (1, 1)])
def test_sign_test_is_scipys_two_sided_binomial_test(pos, neg):
    assert sign_test(pos, neg) == pytest.approx(stats.binomtest(pos, pos + neg, 0.5).pvalue, rel=1e-12)


def test_sign_test_drops_ties_and_hand_computed():
    r = paired_inference([1.0, 2.0, 0.0, 0.0, 3.0, -1.0])        # 3 up, 1 down, 2 ties dropped
    assert (r["positive"], r["negative"]) == (3, 1)
    assert r["p_sign"] == pytest.approx(2 * (1 + 4) / 16)         # 2 P(X <= 1), X ~ Bin(4, 1/2)
    assert sign_test(0, 0) == 1.0 and sign_test(10, 0) == pytest.approx(2 / 1024)


# the two-way layout by hand: D = [[1, 2, 3], [2, 4, 3]], n = 2 seeds, m = 3 instances
#   seed means 2, 3; instance means 1.5, 3, 3; grand mean 2.5
#   residuals D - row - col + grand: [[0, -0.5, 0.5], [0, 0.5, -0.5]]: SS_res 1, df (1)(2) = 2, MS_res 0.5
#   v_seed = s²(2, 3) / 2 = 0.25;  v_inst = s²(1.5, 3, 3) / 3 = 0.75 / 3 = 0.25;  v_int = 0.5 / 6
#   V = 0.25 + 0.25 - 1/12 = 5/12;  df = V² / (0.25²/1 + 0.25²/2 + (1/12)²/2)
HAND_D = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 3.0]])


def test_crossed_terms_hand_computed():
    v_seed, v_inst, v_int = crossed_terms(HAND_D.mean(1), HAND_D)
    assert (v_seed, v_inst, v_int) == pytest.approx((0.25, 0.25, 1 / 12))
    var, df = crossed_variance(v_seed, v_inst, v_int, 2, 3)
    assert var == pytest.approx(5 / 12)
    assert df == pytest.approx((5 / 12) ** 2 / (0.25 ** 2 + 0.25 ** 2 / 2 + (1 / 12) ** 2 / 2))
    r = paired_inference(HAND_D.mean(1), HAND_D)
    assert r["se"] == pytest.approx(math.sqrt(5 / 12)) and r["df"] == pytest.approx(df) and r["v_int"] == pytest.approx(1 / 12)
    half = stats.t.ppf(0.975, df) * math.sqrt(5 / 12)
    assert (r["ci_lo"], r["ci_hi"]) == pytest.approx((2.5 - half, 2.5 + half))
    assert r["p_value"] == pytest.approx(2 * stats.t.sf(2.5 / math.sqrt(5 / 12), df))


def test_interaction_is_the_anova_residual_mean_square():
    """MS_res by another route: SS_total − SS_seeds − SS_instances of the two-way layout."""
    rng = np.random.default_rng(4)
    D = rng.normal(size=(5, 40)) + rng.normal(size=40)[None, :]
    n, m = D.shape
    g = D.mean()
    ss_res = ((D - g) ** 2).sum() - m * ((D.mean(1) - g) ** 2).sum() - n * ((D.mean(0) - g) ** 2).sum()
    assert crossed_terms(D.mean(1), D)[2] == pytest.approx(ss_res / ((n - 1) * (m - 1)) / (n * m))


def test_a_main_effect_estimated_below_zero_floors_at_the_larger_term():
    # v_inst < v_int: the instance component is noise alone; the seed term (which holds the interaction once)
    assert crossed_variance(0.5, 0.1, 0.2, 5, 100) == (0.5, 4.0)
    assert crossed_variance(0.1, 0.5, 0.2, 5, 100) == (0.5, 99.0)       # the seed component below zero
    assert crossed_variance(0.1, 0.15, 0.2, 5, 100) == (0.15, 99.0)


def test_crossed_variance_is_unbiased_where_the_plain_sum_is_not():
    """Simulated two-way layouts with a known Var(d) = σ_a²/n + σ_b²/m + σ_e²/(nm): the mean of
    v_seed + v_inst − v_int over 4,000 layouts is within 3 % of it (Monte-Carlo sd about 1 %), the plain
    sum v_seed + v_inst is above it by σ_e²/(nm), and the spread of d itself agrees with the truth."""
    rng = np.random.default_rng(7)
    n, m, sa, sb, se = 5, 20, 0.6, 1.0, 3.0
    truth = sa ** 2 / n + sb ** 2 / m + se ** 2 / (n * m)           # 0.072 + 0.05 + 0.09 = 0.212
    unbiased, plain, ds = [], [], []
    for _ in range(4000):
        D = sa * rng.standard_normal(n)[:, None] + sb * rng.standard_normal(m)[None, :] + se * rng.standard_normal((n, m))
        v_seed, v_inst, v_int = crossed_terms(D.mean(1), D)
        unbiased.append(v_seed + v_inst - v_int)
        plain.append(v_seed + v_inst)
        ds.append(D.mean())
    assert np.mean(unbiased) == pytest.approx(truth, rel=0.03)
    assert np.mean(plain) == pytest.approx(truth + se ** 2 / (n * m), rel=0.03)
    assert np.var(ds) == pytest.approx(truth, rel=0.06)


def test_no_spread_and_one_seed():
    r = paired_inference([2.0, 2.0, 2.0])
    assert (r["ci_lo"], r["ci_hi"], r["p_value"]) == (2.0, 2.0, 0.0)
    one = paired_inference([2.0])
    assert math.isnan(one["ci_lo"]) and math.isnan(one["p_value"]) and one["n"] == 1
    assert one["p_sign"] == 1.0                                   # one seed: a sign test of one cannot reject


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
    assert verdict_of(1.0, 0.03, 10, alpha=0.01) == "undecided"
