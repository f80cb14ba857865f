"""instance_moments: the claims' test-set term from sums equals the one from the per-instance matrix, and
a published folder's kept sums answer exactly what the report asked, in far less room than the arrays."""
from __future__ import annotations

import io

import numpy as np
import pytest

from orchestration.report.claims import instance_key
from orchestration.report.inference import CrossedMoments, crossed_terms, paired_inference
from orchestration.report.instance_moments import (ArrayMoments, StoredMoments, pair_moments, read_moments,
                                                   write_moments)

SEEDS, M, SCALE = 20, 400, 100.0


def _arrays(rng, dataset="d", variant="P"):
    """Per-instance values of two methods' selected heads, a different head (p) per seed, float16 as published."""
    out, heads = {}, {}
    for s in range(SEEDS):
        for method, base in (("poxm", 0.3), ("dm", 0.25)):
            p = int(rng.choice([10, 20, 50]))
            k = instance_key(dataset, variant, s, method, p, 0.9, "R@5")
            out[k] = np.clip(base + 0.1 * rng.standard_normal(M) + 0.05 * rng.standard_normal(), 0, 1).astype(np.float16)
            heads[(method, s)] = k
    return out, [heads[("poxm", s)] for s in range(SEEDS)], [heads[("dm", s)] for s in range(SEEDS)]


def _residual_terms(D):
    """v_int of the two-way layout by its definition (residuals), independently of the moments' identity."""
    n, m = D.shape
    resid = D - D.mean(1, keepdims=True) - D.mean(0)[None, :] + D.mean()
    return (resid ** 2).sum() / ((n - 1) * (m - 1)) / (n * m), D.mean(0).var(ddof=1) / m


def test_moments_of_a_matrix_give_the_residual_definition():
    D = np.random.default_rng(0).normal(size=(6, 9)) + np.arange(9)[None, :] * 0.1
    v_seed, v_inst, v_int = crossed_terms(D.mean(1), D)
    want_int, want_inst = _residual_terms(D)
    assert v_int == pytest.approx(want_int, rel=1e-10) and v_inst == pytest.approx(want_inst, rel=1e-12)
    assert v_seed == pytest.approx(D.mean(1).var(ddof=1) / 6)
    same = np.ones((4, 5)) * 2.5          # no residual at all: rounding must not leave a negative one
    assert crossed_terms(same.mean(1), same)[2] == 0.0


def test_pair_moments_equal_the_matrix_of_differences():
    arrays, xs, ys = _arrays(np.random.default_rng(1))
    got = pair_moments(ArrayMoments(arrays), xs, ys, SCALE)
    D = SCALE * (np.stack([arrays[k] for k in xs]).astype(float) - np.stack([arrays[k] for k in ys]).astype(float))
    want = CrossedMoments.of(D)
    assert (got.n, got.m) == (SEEDS, M)
    np.testing.assert_allclose(got.row_means, want.row_means, rtol=1e-12)
    np.testing.assert_allclose(got.col_means, want.col_means, rtol=1e-12, atol=1e-12)
    assert got.sumsq == pytest.approx(want.sumsq, rel=1e-12)
    a, b = paired_inference(D.mean(1), got), paired_inference(D.mean(1), D)
    for k in ("ci_lo", "ci_hi", "df", "p_value", "v_int", "v_inst"):
        assert a[k] == pytest.approx(b[k], rel=1e-9), k
    # a missing head, or heads of different lengths: no moments (the claim falls back to the seed term)
    assert pair_moments(ArrayMoments(arrays), xs[:-1] + ["d|P|19|poxm|-1|nan|R@5"], ys, SCALE) is None
    short = dict(arrays, **{xs[0]: arrays[xs[0]][:-1]})
    assert pair_moments(ArrayMoments(short), xs, ys, SCALE) is None


def test_a_published_folder_answers_exactly_what_was_asked_in_a_fraction_of_the_room(tmp_path):
    rng = np.random.default_rng(2)
    arrays, xs, ys = _arrays(rng)
    more, xs2, ys2 = _arrays(rng, variant="A")
    src = ArrayMoments({**arrays, **more})
    asked = pair_moments(src, xs, ys, SCALE)
    assert write_moments(src, tmp_path / "moments") == 2 * SEEDS
    assert [f.name for f in (tmp_path / "moments").iterdir()] == ["d_P.npz.xz"]   # nothing of A was asked
    kept = read_moments(tmp_path)
    again = pair_moments(kept, xs, ys, SCALE)
    # the same numbers, not nearly: a rebuilt report's tables equal the published ones byte for byte
    assert np.array_equal(again.row_means, asked.row_means) and np.array_equal(again.col_means, asked.col_means)
    assert again.sumsq == asked.sumsq
    assert pair_moments(kept, xs2, ys2, SCALE) is None and pair_moments(kept, xs[:10], ys[:10], SCALE) is None
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    assert (tmp_path / "moments" / "d_P.npz.xz").stat().st_size < len(buf.getvalue()) / 5


def test_kept_answers_join_new_arrays_and_are_kept_again(tmp_path):
    rng = np.random.default_rng(3)
    arrays, xs, ys = _arrays(rng)
    more, xs2, ys2 = _arrays(rng, dataset="e")
    first = ArrayMoments(arrays)
    want = pair_moments(first, xs, ys, SCALE)
    write_moments(first, tmp_path / "a" / "moments")
    joined = ArrayMoments(more, kept=read_moments(tmp_path / "a"))     # a stage's arrays join a folder's moments
    assert pair_moments(joined, xs, ys, SCALE).sumsq == want.sumsq
    assert pair_moments(joined, xs2, ys2, SCALE) is not None
    write_moments(joined, tmp_path / "b" / "moments")
    both = read_moments(tmp_path / "b")
    assert sorted(f.name for f in (tmp_path / "b" / "moments").iterdir()) == ["d_P.npz.xz", "e_P.npz.xz"]
    assert pair_moments(both, xs, ys, SCALE).sumsq == want.sumsq and pair_moments(both, xs2, ys2, SCALE) is not None
    assert not StoredMoments() and both
