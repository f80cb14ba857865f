"""Cross-fitted selection (`selection.cross_fit: K`, poxm_core/training/crossfit.py): folds of the whole
log, the averaged estimates by hand, and a trial whose selection rows are the mean of K fold trials run
independently here, while its test rows and curves stay the plain trial's."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import yaml

from orchestration.report.build import build_report
from poxm_core.config.schema import config_hash, load_config, resolved_dict
from poxm_core.common.errors import PoxmInputError
from poxm_core.training.command import pick_trial
from poxm_core.training.crossfit import average_val_rows, fold_view, folds, whole_log
from poxm_core.training.trainer import run_trial
from tests.trial_fixtures import tiny_config, tiny_prepared

PREP = tiny_prepared(n_tr=90, L=20, K=8)
METHODS = {"logging": {}, "dm": {"lr": 0.01}, "poxm": {"p": [4, 8], "lam": [0.5], "lr": 0.01}}


def test_folds_partition_the_log_and_are_seeded():
    parts = folds(23, 5, seed=3)
    assert sorted(np.concatenate(parts).tolist()) == list(range(23))
    assert sorted(len(f) for f in parts) == [4, 4, 5, 5, 5]
    assert all(np.array_equal(a, b) for a, b in zip(parts, folds(23, 5, seed=3)))
    assert not all(np.array_equal(a, b) for a, b in zip(parts, folds(23, 5, seed=4)))
    with pytest.raises(PoxmInputError, match=r"selection.cross_fit=4: expected 2 <= K <= 3"):
        folds(3, 4, seed=0)


def test_a_fold_view_trains_on_the_other_folds_and_estimates_on_its_own():
    whole = whole_log(PREP)
    assert whole.n == PREP.log_train.n + PREP.log_val.n
    held = set()
    for k in range(3):
        v = fold_view(PREP, 3, k)
        tr, va = set(v.log_train.instance.tolist()), set(v.log_val.instance.tolist())
        assert not tr & va and tr | va == set(whole.instance.tolist())
        assert not held & va
        held |= va
        # rows keep their slates: the instance's logged actions and rewards travel with it
        i = int(v.log_val.instance[0])
        j = int(np.flatnonzero(whole.instance == i)[0])
        assert np.array_equal(v.log_val.actions[0], whole.actions[j]) and v.log_val.q[0, 0] == whole.q[j, 0]
    assert held == set(whole.instance.tolist())


def test_the_logging_models_rows_are_never_estimated_on(tmp_path):
    whole = whole_log(PREP)
    alpha = np.sort(whole.instance[::4])                        # as if the logging model had seen these
    (tmp_path / "model").mkdir()
    np.save(tmp_path / "model" / "alpha_rows.npy", alpha)
    prep = replace(PREP, meta={**PREP.meta, "dirs": {"model": str(tmp_path / "model")}})
    held = set()
    for k in range(3):
        v = fold_view(prep, 3, k)
        va = set(v.log_val.instance.tolist())
        assert not va & set(alpha.tolist()) and set(alpha.tolist()) <= set(v.log_train.instance.tolist())
        held |= va
    assert held == set(whole.instance.tolist()) - set(alpha.tolist())


def _frame(values, ses, metric="IS"):
    return pd.DataFrame({"dataset": "d", "variant": "A", "method": ["poxm", "logging"], "p": [4, -1],
                         "lam": [0.5, math.nan], "seed": 0, "split": "val", "metric": metric,
                         "value": values, "stderr": ses, "epoch": 3, "final": True})


def test_average_by_hand():
    rows = average_val_rows([_frame([1.0, 0.2], [0.3, 0.1]), _frame([3.0, 0.4], [0.4, 0.1])], epoch=3)
    got = {(r["method"], r["p"]): (r["value"], r["stderr"]) for r in rows}
    assert got[("poxm", 4)] == pytest.approx((2.0, 0.25))                  # sqrt(0.09 + 0.16) / 2
    assert got[("logging", -1)] == pytest.approx((0.3, math.sqrt(0.02) / 2))
    assert all(r["final"] and r["split"] == "val" and r["epoch"] == 3 for r in rows)
    assert math.isnan(next(r for r in rows if r["method"] == "logging")["lam"])
    with pytest.raises(ValueError, match="reported by 1 of 2 folds"):
        average_val_rows([_frame([1.0, 0.2], [0.3, 0.1]), _frame([1.0, 0.2], [0.3, 0.1], metric="SNIS")], epoch=3)


def test_config_key():
    cfg = tiny_config(METHODS)
    assert "cross_fit" not in resolved_dict(cfg)["selection"]        # unset: configs and run ids as before
    on = load_config(data={**resolved_dict(cfg), "selection": {"cross_fit": 3}})
    assert on.selection.cross_fit == 3 and resolved_dict(on)["selection"]["cross_fit"] == 3
    assert config_hash(on) != config_hash(cfg)
    with pytest.raises(PoxmInputError, match="cross_fit"):
        load_config(data={**resolved_dict(cfg), "selection": {"cross_fit": 1}})


@pytest.mark.slow
def test_a_cross_fitted_trial(tmp_path):
    cfg = tiny_config(METHODS, epochs=2)
    crossed = load_config(data={**resolved_dict(cfg), "selection": {"cross_fit": 2}})
    spec = pick_trial(cfg)
    plain = run_trial(cfg, spec, PREP, tmp_path / "plain", progress=False)
    got = run_trial(crossed, spec, PREP, tmp_path / "crossed", progress=False)
    # the selection rows: the mean of two fold trials run here on their own
    folds_df = [run_trial(cfg, spec, fold_view(PREP, 2, k), tmp_path / f"fold{k}", progress=False) for k in (0, 1)]
    key = ["method", "p", "lam", "metric"]

    def final_of(df, split="val"):
        f = df[df["final"] & (df["split"] == split)].copy()
        f["lam"] = f["lam"].fillna(-1)
        return f.set_index(key)["value"].sort_index()

    for split in ("val", "val_truth"):     # the estimates, and the truth about the same (fold) heads
        want = (final_of(folds_df[0], split) + final_of(folds_df[1], split)) / 2
        assert len(want) and final_of(got, split).index.equals(want.index)
        pd.testing.assert_series_equal(final_of(got, split), want, check_exact=False, rtol=1e-12)
    assert not np.allclose(final_of(got).values, final_of(plain).values)          # not the plain estimates
    # everything else is the plain trial's: test metrics, per-epoch curves
    crossed_rows = ["val", "val_truth"]
    rest = ~(got["final"] & got["split"].isin(crossed_rows))
    rest_plain = ~(plain["final"] & plain["split"].isin(crossed_rows))
    pd.testing.assert_frame_equal(got[rest].reset_index(drop=True), plain[rest_plain].reset_index(drop=True))
    # the fold trials keep their own outputs (and checkpoints: a resumed trial does not retrain them)
    assert (tmp_path / "crossed" / "cross_fit" / "K2" / "fold1" / "rows.csv").is_file()
    again = run_trial(crossed, spec, PREP, tmp_path / "crossed", progress=False)
    pd.testing.assert_frame_equal(again, got)
    # another K in the same trial folder trains its own folds (K2's checkpoints hold other rows)
    three = load_config(data={**resolved_dict(cfg), "selection": {"cross_fit": 3}})
    in_place = run_trial(three, spec, PREP, tmp_path / "crossed", progress=False)
    fresh = run_trial(three, spec, PREP, tmp_path / "fresh3", progress=False)
    pd.testing.assert_series_equal(final_of(in_place), final_of(fresh))
    # the report says which estimates chose the heads
    run = tmp_path / "run"
    (run / "results").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(resolved_dict(crossed)))
    got.to_csv(run / "results" / "rows.csv", index=False)
    pd.DataFrame(columns=["dataset", "variant", "seed", "metric", "value"]).to_csv(run / "results" / "prepare.csv",
                                                                                 index=False)
    index = (build_report(run) / "index.md").read_text()
    assert "Selection criterion: **IS** (cross-fitted over 2 folds of the whole log)" in index
