"""The variance a re-drawn split adds (a dataset whose seeds re-draw the train/test split against the same
data on one fixed split): detection and pairing from the config, the variances, their ratio's interval and
the verdicts that change, on hand-made rows."""
from __future__ import annotations

import math

import pytest
from scipy import stats

from orchestration.report import claims as C
from orchestration.report import split_variance as S
from orchestration.report.aggregate import seed_stats
from orchestration.selection import select, selected_rows
from poxm_core.common.results import make_row, to_frame

FIXED_R5 = (0.30, 0.32, 0.34, 0.31)      # − logging 0.20: (10, 12, 14, 11) ×100, mean 11.75, s² = 8.75 / 3
REDRAWN_R5 = (0.25, 0.35, 0.45, 0.23)    # − logging 0.20: (5, 15, 25, 3), mean 12, s² = 308 / 3
CONFIG = {"datasets": [{"name": "c", "format": "npz", "train": "c.npz", "split": {"seed": 3}},
                       {"name": "c-redraw", "format": "npz", "train": "c.npz", "split": {"seed": "per_seed"}}]}


def _rows():
    rows = []
    for d, r5 in (("c", FIXED_R5), ("c-redraw", REDRAWN_R5)):
        for s, v in enumerate(r5):
            kw = dict(dataset=d, variant="A", seed=s, epoch=2, final=True)
            rows += [make_row(method="logging", p=None, lam=None, split="test", metric="R@5", value=0.20, **kw),
                     make_row(method="poxm", p=20, lam=0.9, split="test", metric="R@5", value=v, **kw)]
    return to_frame(rows)


def _frame():
    rows = _rows()
    sel = select(rows, "IS")
    return S.split_variance(C.claims(rows, sel, "IS"), seed_stats(selected_rows(rows, sel)),
                            S.split_pairs(CONFIG), "IS")


def test_redrawn_datasets_are_found_and_paired():
    assert S.split_pairs(CONFIG) == [("c-redraw", "c")]
    assert S.redraws_split({"name": "x", "resplit": {"seed": 7, "redraw_per_seed": True}})
    assert not S.redraws_split({"name": "x", "split": {"seed": 3}, "variants": [{"name": "per_seed", "seed": "seed"}]})
    # by the same data source when the names do not pair; a registry dataset named only by `name` pairs by name
    by_source = {"datasets": [{"name": "fresh", "format": "npz", "train": "c.npz", "split": {"redraw": True}},
                              {"name": "other", "format": "npz", "train": "o.npz"},
                              {"name": "kept", "format": "npz", "train": "c.npz", "split": {"seed": 1}}]}
    assert S.split_pairs(by_source) == [("fresh", "kept")]      # the split settings are not the source
    two = {"datasets": by_source["datasets"] + [{"name": "kept2", "format": "npz", "train": "c.npz"}]}
    assert S.split_pairs(two) == []                              # two twins by source: none chosen
    same = {"datasets": [{"name": "fresh", "format": "npz", "train": "c.npz", "redraw_split": True},
                         {"name": "kept", "format": "npz", "train": "c.npz"}, {"name": "corel5k"},
                         {"name": "corel5k_redraw", "split_seed": "per_seed"}]}
    assert S.split_pairs(same) == [("fresh", "kept"), ("corel5k_redraw", "corel5k")]
    assert S.split_pairs(same, pairs=[("a", "b")]) == [("a", "b")]


def test_variances_ratio_interval_and_the_verdict_that_changes():
    f = _frame()
    claim = f[f["kind"] == "claim"].iloc[0]
    assert claim["key"] == "poxm_vs_logging" and claim["variant"] == "A"
    assert claim["var_fixed"] == pytest.approx(8.75 / 3) and claim["var_redrawn"] == pytest.approx(308 / 3)
    assert claim["added"] == pytest.approx(308 / 3 - 8.75 / 3)
    ratio = 308 / 8.75
    assert claim["ratio"] == pytest.approx(ratio)
    assert (claim["ratio_lo"], claim["ratio_hi"]) == pytest.approx(
        (ratio / stats.f.ppf(0.975, 3, 3), ratio / stats.f.ppf(0.025, 3, 3)))
    assert math.isnan(claim["beyond_test"])            # no per-instance values: the test-set term is unknown
    # fixed: t = 11.75 / √(8.75/12) → holds; re-drawn: t = 12 / √(308/12) = 2.37, df 3 → undecided
    assert (claim["verdict_fixed"], claim["verdict_redrawn"], claim["changed"]) == ("holds", "undecided", True)
    metric = f[(f["kind"] == "metric") & (f["key"] == "poxm|R@5")].iloc[0]     # the method's own R@5: same s²
    assert metric["var_fixed"] == pytest.approx(8.75 / 3) and metric["var_redrawn"] == pytest.approx(308 / 3)
    assert f[(f["kind"] == "metric") & (f["key"] == "logging|R@5")]["ratio"].isna().all()   # 0 variance


def test_table_and_sentence():
    f = _frame()
    t = S.split_variance_table(f, "IS")
    assert t.sections == {0: "c-redraw (split re-drawn per seed) against c (one fixed split)"}
    row = t.rows[0]
    assert row[:5] == ["POXM > logging policy (R@5)", "A", "2.92 (4)", "103 (4)", "99.8"]
    assert row[6].startswith("35.20 [") and row[7] == "holds → undecided" and (0, 7) in t.bold
    text = S.split_variance_sentence(f, "IS")
    assert "a median 35.20× the fixed split's" in text and "1 with a 95 % interval above 1" in text
    assert "1 claim verdict change: POXM > logging policy (R@5), variant A, IS: holds → undecided." in text
    same = f.assign(changed=False)
    assert "No claim verdict changes between the two (1 claim cells)." in S.split_variance_sentence(same, "IS")


def test_no_pair_no_section(tmp_path):
    rows = _rows()
    sel = select(rows, "IS")
    blocks = S.split_variance_blocks(C.claims(rows, sel, "IS"), None, {"datasets": [{"name": "c"}]}, "IS", None,
                                     tmp_path, tmp_path)
    assert blocks == []
    blocks = S.split_variance_blocks(C.claims(rows, sel, "IS"), None, CONFIG, "IS", None, tmp_path, tmp_path)
    assert blocks[0] == ("h2", "Re-drawn splits: the variance a new training set adds")
    assert (tmp_path / "split_variance.csv").is_file()


def test_the_training_sample_share_subtracts_the_fixed_splits_test_set_term():
    """beyond the test-set term = (s² re-drawn − s² fixed) − (v_inst − v_int) of the fixed split's claim."""
    import pandas as pd
    base = {"criterion": "IS", "variant": "A", "claim": "poxm_vs_dm", "claim_text": "POXM > DM", "metric": "R@5",
            "verdict": "undecided", "interval": "t (seeds + test instances)"}
    claims = pd.DataFrame([{**base, "dataset": "c", "n": 5, "v_seed": 0.4, "v_inst": 0.5, "v_int": 0.1},
                           {**base, "dataset": "c-redraw", "n": 4, "v_seed": 1.5, "v_inst": 0.7, "v_int": 0.2}])
    r = S.split_variance(claims, None, [("c-redraw", "c")], "IS").iloc[0]
    # s² fixed 5 × 0.4 = 2, re-drawn 4 × 1.5 = 6; added 4; the fixed split's test-set term 0.5 − 0.1 = 0.4
    assert (r["var_fixed"], r["var_redrawn"], r["added"]) == pytest.approx((2.0, 6.0, 4.0))
    assert r["beyond_test"] == pytest.approx(3.6) and not r["changed"]
    assert (r["n_fixed"], r["n_redrawn"]) == (5, 4)
    assert r["ratio_hi"] == pytest.approx(3.0 / stats.f.ppf(0.025, 3, 4))
