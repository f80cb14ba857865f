"""Selection regimes of studies/selection_known_answer.py: folds, cross-fitted criteria, batched heads."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from poxm_core.bandit import fold_assignment, fold_splits
from poxm_core.bandit.known_answer import make_world, sample_contexts, simulate_log, subset_log
from poxm_core.estimators import validation_estimates
from poxm_core.estimators.validation import crossfit_values

ROOT = Path(__file__).resolve().parents[3]


def _bench():
    sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("selection_known_answer_bench",
                                                  ROOT / "studies" / "selection_known_answer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fold_assignment_is_a_balanced_deterministic_partition():
    f = fold_assignment(103, 5, seed=3)
    assert f.shape == (103,) and f.dtype == np.int64
    assert set(np.unique(f)) == set(range(5))
    sizes = np.bincount(f, minlength=5)
    assert sizes.sum() == 103 and sizes.max() - sizes.min() <= 1
    np.testing.assert_array_equal(fold_assignment(103, 5, seed=3), f)
    assert not np.array_equal(fold_assignment(103, 5, seed=4), f)
    assert not np.array_equal(f, np.arange(103) % 5)              # shuffled, not dealt in row order
    with pytest.raises(ValueError, match="k"):
        fold_assignment(10, 1, 0)
    with pytest.raises(ValueError, match="n must be"):
        fold_assignment(3, 5, 0)


def test_fold_splits_validate_each_row_once_and_train_on_the_rest():
    splits = fold_splits(50, 4, seed=1)
    assert len(splits) == 4
    vals = np.concatenate([v for _, v in splits])
    np.testing.assert_array_equal(np.sort(vals), np.arange(50))   # every row validates exactly once
    for fit, val in splits:
        assert np.intersect1d(fit, val).size == 0
        np.testing.assert_array_equal(np.union1d(fit, val), np.arange(50))
        assert np.all(np.diff(fit) > 0) and np.all(np.diff(val) > 0)


def test_crossfit_values_is_the_mean_of_hand_computed_fold_estimates():
    # one position per instance; fold A: w = 0.5/0.25 = 2, 0.2/0.4 = 0.5, r = 1, 0
    #   IS = (2*1 + 0.5*0) / 2 = 1.0, SNIS = 2 / 2.5 = 0.8
    # fold B: w = 0.3/0.3 = 1, 0.6/0.2 = 3, r = 1, 1: IS = (1 + 3) / 2 = 2.0, SNIS = 4 / 4 = 1.0
    def est(pi, q, r):
        lp = np.log(np.asarray(pi, float))[:, None]
        return validation_estimates({"policy": lp, "selector": lp}, np.asarray(q, float)[:, None],
                                    np.asarray(r, float)[:, None])
    a, b = est([0.5, 0.2], [0.25, 0.4], [1, 0]), est([0.3, 0.6], [0.3, 0.2], [1, 1])
    cv = crossfit_values([a, b])
    assert cv["IS"] == pytest.approx(1.5) and cv["sIS"] == pytest.approx(1.5)
    assert cv["SNIS"] == pytest.approx(0.9)
    assert cv["PIS"] == pytest.approx(1.5)                       # one position: prefix product = IS
    assert "DR" not in cv                                         # no reward model given
    one = crossfit_values([a])
    assert one["IS"] == pytest.approx(1.0) and one["SNIS"] == pytest.approx(0.8)
    with pytest.raises(ValueError, match="at least one fold"):
        crossfit_values([])


def test_subset_log_takes_the_rows():
    w = make_world(temperature=1.0, seed=0)
    log = simulate_log(w, sample_contexts(w, 30, seed=1), seed=2)
    rows = np.array([4, 0, 17])
    sub = subset_log(log, rows)
    np.testing.assert_array_equal(sub.actions, log.actions[rows])
    np.testing.assert_array_equal(sub.q, log.q[rows])
    np.testing.assert_array_equal(sub.contexts.X, log.contexts.X[rows])
    np.testing.assert_array_equal(sub.contexts.cand, log.contexts.cand[rows])


def test_batched_heads_equal_heads_trained_one_by_one():
    bench = _bench()
    from poxm_core.bandit.known_answer_learners import train_poxm
    w = make_world(temperature=0.5, seed=1)
    log = simulate_log(w, sample_contexts(w, 40, seed=2), seed=3)
    splits = [np.arange(40), fold_splits(40, 2, seed=0)[0][0]]
    shifts = [0.3, 0.0]
    heads = bench.train_poxm_grid(log, splits, 10, shifts, epochs=2, lr=0.1)
    for s, rows in enumerate(splits):
        for k, shift in enumerate(shifts):
            one = train_poxm(subset_log(log, rows), 10, shift, epochs=2, lr=0.1)
            np.testing.assert_allclose(heads[s][k].theta, one.theta, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(heads[s][k].b, one.b, rtol=1e-9, atol=1e-12)
    assert not np.allclose(heads[0][0].theta, heads[0][1].theta)   # the shift matters


def test_bad_fraction_is_one_line_and_exit_2(capsys):
    bench = _bench()
    with pytest.raises(SystemExit) as e:
        bench.main(["--val-fractions", "1.5"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--val-fractions" in err and "(0, 1)" in err


@pytest.mark.slow
def test_benchmark_runs_end_to_end(tmp_path, capsys):
    bench = _bench()
    out = tmp_path / "rows.csv"
    rc = bench.main(["--seeds", "1", "--temperatures", "1", "--n", "60", "--ps", "5", "--lams", "0.9", "1.0",
                     "--epochs", "3", "--n-eval", "20", "--val-fractions", "0.2", "--folds", "2", "--out", str(out)])
    assert rc == 0 and out.exists()
    import pandas as pd
    rows = pd.read_csv(out)
    assert set(rows["regime"]) == {"20%", "K=2"}
    cv = rows[rows["regime"] == "K=2"]
    assert np.allclose(cv["V"], cv["V_all"])                      # cross-fit: the retrained-on-all head counts
    assert not math.isnan(rows["DR"].iloc[0])


def test_choices_and_paired_by_hand():
    bench = _bench()
    import pandas as pd
    # one (T, seed), two regimes, two heads each; IS prefers head b in "10%" (V 0.5, best 0.7: regret 0.2)
    # and head a in "K=5" (V 0.8 = the best: regret 0)
    rows = pd.DataFrame({
        "T": 1.0, "seed": 0, "regime": ["10%", "10%", "K=5", "K=5"], "p": [5, 10, 5, 10], "lam": 1.0,
        "V": [0.7, 0.5, 0.8, 0.6], "V_all": [0.8, 0.6, 0.8, 0.6], "V_rho": 0.55, "IS": [0.1, 0.9, 0.9, 0.1]})
    ch = bench.choices(rows, ["IS"]).set_index("regime")
    assert ch.loc["10%", "regret"] == pytest.approx(0.2) and ch.loc["K=5", "regret"] == pytest.approx(0.0)
    assert ch.loc["10%", "below_logging"] == 1.0 and ch.loc["K=5", "below_logging"] == 0.0
    assert ch.loc["10%", "V_sel_all"] == pytest.approx(0.6)
    assert ch.loc["10%", "spearman"] == pytest.approx(-1.0) and ch.loc["K=5", "spearman"] == pytest.approx(1.0)
    p = bench.paired(ch.reset_index(), "10%")
    assert p.loc["IS", ("K=5", "diff")] == pytest.approx(0.3) and p.loc["IS", ("K=5", "better")] == 1.0
    p_all = bench.paired(ch.reset_index(), "10%", "V_sel_all")
    assert p_all.loc["IS", ("K=5", "diff")] == pytest.approx(0.2)
