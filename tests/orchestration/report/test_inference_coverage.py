"""The claims' interval (orchestration/report/inference.py) covers a known truth: simulated benchmarks,
each with its own test set (instance effects shared by its seeds), seed effects and noise. Measured
coverages are in docs/report.md ("Coverage, checked by simulation"); a case that falls short of 95 % is
asserted at what it measures, not tuned to pass."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from orchestration.report.inference import paired_inference


def _draw(rng, kind: str, size):
    """Mean 0, variance 1: normal, or a gamma(4) shifted and scaled (skewness 1)."""
    if kind == "normal":
        return rng.standard_normal(size)
    return (rng.gamma(4.0, 1.0, size) - 4.0) / 2.0


def _coverage(kind: str, n: int, seed_sd: float, inst_sd: float, m: int = 200, reps: int = 2000) -> float:
    """Share of `reps` simulated benchmarks whose 95 % interval covers the true mean difference 1.0:
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


# (seed sd, instance sd): the test-set term dominant, comparable, and the seed term dominant (as in most
# cells of the published real-data run: docs/report.md, "How large each term is")
@pytest.mark.parametrize("kind, n, seed_sd, inst_sd", [
    ("normal", 5, 1.0, 12.0), ("normal", 5, 1.0, 6.0), ("normal", 5, 1.0, 2.0),
    ("normal", 10, 1.0, 12.0), ("normal", 10, 1.0, 2.0),
    ("skewed", 5, 1.0, 12.0), ("skewed", 5, 1.0, 6.0),
    ("skewed", 10, 1.0, 12.0), ("skewed", 10, 1.0, 2.0)])
def test_coverage_within_two_points_of_nominal(kind, n, seed_sd, inst_sd):
    """Monte-Carlo error of a coverage over 2,000 replicates: sd 0.5 points (measured 93.8–95.5 %). Not
    listed: skewed seed differences that dominate the test-set term at 5 seeds cover 93.4 % (the
    t-interval's small-sample skew error), one reason the benchmark publishes at ten seeds."""
    assert abs(_coverage(kind, n, seed_sd, inst_sd) - 0.95) <= 0.02


def _outlier_coverage(mu: float, outlier: float, exactly_one: bool, n: int = 10, m: int = 200,
                      reps: int = 2000) -> float:
    """Seed-dominated benchmarks (seed sd 1, instance sd 2, noise 3 over 200 instances) whose seeds come
    from a distribution with a far tail of the opposite sign: a seed's difference is `outlier` with
    probability 1/n (one seed in n, on average), else normal around `mu`. The truth is that
    distribution's mean, mu + (outlier − mu)/n. `exactly_one`: every benchmark holds exactly one such
    seed (the shape as seen in one cell, taken as given)."""
    rng = np.random.default_rng(zlib.crc32(f"outlier/{mu}/{outlier}/{exactly_one}/{n}".encode()))
    truth = mu + (outlier - mu) / n
    hit = 0
    for _ in range(reps):
        d = mu + rng.standard_normal(n)
        far = np.arange(n) == 0 if exactly_one else rng.random(n) < 1.0 / n
        d[far] = outlier
        D = d[:, None] + 2.0 * rng.standard_normal(m)[None, :] + 3.0 * rng.standard_normal((n, m))
        r = paired_inference(D.mean(1), D)
        hit += r["ci_lo"] <= truth <= r["ci_hi"]
    return hit / reps


@pytest.mark.parametrize("mu, outlier, measured", [
    (2.5, -1.0, 0.920),     # the outlier 3.5 sd below the other seeds (Bibtex's POXM − BanditNet at P: 3.6)
    (1.0, -4.0, 0.902)])    # 5 sd below
def test_one_far_outlier_seed_of_the_opposite_sign_undercovers(mu, outlier, measured):
    """Ten seeds, one in ten an outlier of the opposite sign: the interval covers below 95 % (measured
    92.0 % and 90.2 %; at five seeds 91.4 % and 85.9 %; asserted within 2 points of the ten-seed values,
    and below nominal): the benchmarks without an outlier (a third of them) give a narrow interval
    around a mean the tail pulls down."""
    c = _outlier_coverage(mu, outlier, exactly_one=False)
    assert abs(c - measured) <= 0.02 and c < 0.95


def test_exactly_one_outlier_seed_overcovers():
    """Given exactly one such seed in every benchmark, its spread inflates s² far more than it moves the
    mean: the interval covers nearly always (measured 100 %; 99.6 % with the outlier 3.5 sd out), wider
    than it needs to be."""
    assert _outlier_coverage(1.0, -4.0, exactly_one=True) >= 0.99


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
