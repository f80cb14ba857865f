"""Selection (SNIS, the paper's criterion, on most rows here; IS is the default) and the oracle on
hand-built result rows (docs/protocol.md)."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from orchestration.selection import SELECTION_COLUMNS, select as select_by, selected_rows
from poxm_core.common.results import make_row, to_frame

GRID = [(10, 0.7), (20, 0.8), (50, 0.9), (100, 1.0)]


def select(rows, criterion="SNIS"):
    """Selection by SNIS, the criterion these rows carry (the default, IS: test_default_criterion_is_is)."""
    return select_by(rows, criterion)


def _point(method, p, lam, seed, snis, r5, final=True, dataset="d", variant="A"):
    kw = dict(dataset=dataset, variant=variant, method=method, p=p, lam=lam, seed=seed, epoch=3, final=final)
    out = [make_row(split="test", metric="R@5", value=r5, **kw),
           make_row(split="test", metric="P@5", value=r5 + 0.01, **kw)]
    if snis is not None:
        out.append(make_row(split="val", metric="SNIS", value=snis, **kw))
    return out


def _rows(snis=(0.5, 0.9, 0.7, 0.6), r5=(0.30, 0.20, 0.40, 0.10), seed=0):
    rows = []
    for (p, lam), s, r in zip(GRID, snis, r5):
        rows += _point("poxm", p, lam, seed, s, r)
    rows += _point("logging", None, None, seed, None, 0.25)
    return to_frame(rows)


def _pick(sel, method="poxm", which="snis", seed=0):
    r = sel[(sel["method"] == method) & (sel["selection"] == which) & (sel["seed"] == seed)]
    assert len(r) == 1
    return int(r["p"].iloc[0]), float(r["lam"].iloc[0])


def test_snis_argmax_and_oracle_differs():
    sel = select(_rows())
    assert list(sel.columns) == SELECTION_COLUMNS
    assert _pick(sel) == (20, 0.8)  # highest SNIS 0.9
    assert _pick(sel, which="oracle") == (50, 0.9)  # highest test R@5 0.40
    r = sel[(sel["method"] == "poxm") & (sel["selection"] == "snis")].iloc[0]
    assert r["val_SNIS"] == pytest.approx(0.9) and r["test_R@5"] == pytest.approx(0.20)
    assert r["n_points"] == 4


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_test_metrics_never_move_the_snis_choice(seed):
    rows = _rows()
    base = _pick(select(rows))
    rng = np.random.default_rng(seed)
    perturbed = rows.copy()
    is_test = perturbed["split"] == "test"
    perturbed.loc[is_test, "value"] = rng.uniform(0, 1, int(is_test.sum())) * 10
    assert _pick(select(perturbed)) == base
    assert _pick(select(rows[~is_test])) == base  # no test rows at all


def test_non_final_rows_do_not_choose():
    rows = _rows()
    extra = to_frame(_point("poxm", 100, 1.0, 0, 5.0, 0.9, final=False))
    assert _pick(select(pd.concat([rows, extra], ignore_index=True))) == (20, 0.8)


def test_ties_go_to_smaller_p_then_smaller_lam_whatever_the_row_order():
    rows = []
    for p, lam, s in [(50, 0.7, 0.8), (20, 0.9, 0.8), (20, 0.8, 0.8), (10, 0.7, 0.5)]:
        rows += _point("poxm", p, lam, 0, s, 0.3)
    df = to_frame(rows)
    for perm in (list(range(len(df))), list(reversed(range(len(df))))):
        sel = select(df.iloc[perm])
        assert _pick(sel) == (20, 0.8)
        assert _pick(sel, which="oracle") == (10, 0.7)  # all R@5 tied -> smallest p, lam


def test_single_point_methods_are_selected_trivially_without_snis():
    sel = select(_rows())
    for which in ("snis", "oracle"):
        r = sel[(sel["method"] == "logging") & (sel["selection"] == which)].iloc[0]
        assert r["p"] == -1 and math.isnan(r["lam"]) and math.isnan(r["val_SNIS"])
        assert r["test_R@5"] == pytest.approx(0.25)


def test_groups_are_per_dataset_variant_method_seed():
    df = pd.concat([_rows(seed=0), _rows(snis=(0.9, 0.1, 0.1, 0.1), seed=1)], ignore_index=True)
    sel = select(df)
    assert _pick(sel, seed=0) == (20, 0.8)
    assert _pick(sel, seed=1) == (10, 0.7)


def test_group_without_any_snis_is_not_selected_and_warns():
    rows = []
    for p, lam in GRID[:2]:
        rows += _point("banditnet", p, lam, 0, None, 0.3)
    with pytest.warns(UserWarning, match="no finite validation SNIS"):
        sel = select(to_frame(rows))
    assert sel[sel["selection"] == "snis"].empty
    assert len(sel[sel["selection"] == "oracle"]) == 1


def test_selected_rows_are_the_chosen_points_test_rows():
    rows = _rows()
    sel = select(rows)
    got = selected_rows(rows, sel, "snis")
    assert set(got["split"]) == {"test"}
    poxm = got[got["method"] == "poxm"]
    assert set(zip(poxm["p"], poxm["lam"])) == {(20, 0.8)}
    assert set(poxm["metric"]) == {"R@5", "P@5"}
    log = got[got["method"] == "logging"]  # nan lambda matched to nan lambda
    assert len(log) == 2 and log["value"].min() == pytest.approx(0.25)
    oracle = selected_rows(rows, sel, "oracle")
    assert set(zip(oracle[oracle["method"] == "poxm"]["p"], oracle[oracle["method"] == "poxm"]["lam"])) == {(50, 0.9)}


def test_bad_inputs():
    with pytest.raises(TypeError, match="rows must be a pandas DataFrame"):
        select([{"a": 1}])
    with pytest.raises(ValueError, match="lacks result columns"):
        select(_rows().drop(columns=["final"]))
    with pytest.raises(ValueError, match="which must be"):
        selected_rows(_rows(), select(_rows()), "best")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert select(_rows().iloc[:0]).empty


def test_non_default_criterion_picks_its_own_argmax_and_labels_it():
    from orchestration.selection import val_criteria
    rows = _rows()
    pis = []
    for (p, lam), v in zip(GRID, (0.2, 0.1, 0.4, 0.3)):  # PIS argmax: (50, 0.9); SNIS argmax (20, 0.8)
        kw = dict(dataset="d", variant="A", method="poxm", p=p, lam=lam, seed=0, epoch=3, final=True)
        pis += [make_row(split="val", metric="PIS", value=v, **kw),
                make_row(split="val", metric="PIS_se", value=9.0, **kw),
                make_row(split="val", metric="ESS", value=100.0 * v, **kw)]
    rows = pd.concat([rows, to_frame(pis)], ignore_index=True)
    assert val_criteria(rows) == ["SNIS", "PIS"]  # ESS and *_se are not criteria
    sel = select(rows, criterion="PIS")
    assert list(sel.columns) == SELECTION_COLUMNS
    assert set(sel["selection"]) == {"pis", "oracle"} and set(sel["criterion"]) == {"PIS"}
    assert _pick(sel, which="pis") == (50, 0.9)
    r = sel[(sel["method"] == "poxm") & (sel["selection"] == "pis")].iloc[0]
    assert r["val_criterion"] == pytest.approx(0.4) and r["val_SNIS"] == pytest.approx(0.7)
    got = selected_rows(rows, sel, "pis")
    assert set(zip(got[got["method"] == "poxm"]["p"], got[got["method"] == "poxm"]["lam"])) == {(50, 0.9)}
    assert _pick(select(rows, "SNIS"), which="snis") == (20, 0.8)  # SNIS's choice is unchanged


def test_snis_selection_keeps_snis_label_and_columns():
    sel = select(_rows())
    assert set(sel["selection"]) == {"snis", "oracle"} and set(sel["criterion"]) == {"SNIS"}
    r = sel[(sel["method"] == "poxm") & (sel["selection"] == "snis")].iloc[0]
    assert r["val_criterion"] == r["val_SNIS"] == pytest.approx(0.9)


def test_default_criterion_is_is_and_val_snis_stays_the_papers():
    from orchestration.selection import DEFAULT_CRITERION, PAPER_CRITERION
    assert (DEFAULT_CRITERION, PAPER_CRITERION) == ("IS", "SNIS")
    rows = _rows()   # SNIS argmax (20, 0.8)
    is_rows = [make_row(split="val", metric="IS", value=v, dataset="d", variant="A", method="poxm", p=p, lam=lam,
                        seed=0, epoch=3, final=True) for (p, lam), v in zip(GRID, (0.3, 0.1, 0.2, 0.5))]
    rows = pd.concat([rows, to_frame(is_rows)], ignore_index=True)
    sel = select_by(rows)
    assert set(sel["selection"]) == {"is", "oracle"} and set(sel["criterion"]) == {"IS"}
    assert _pick(sel, which="is") == (100, 1.0)   # the IS argmax 0.5, not SNIS's (20, 0.8)
    r = sel[(sel["method"] == "poxm") & (sel["selection"] == "is")].iloc[0]
    assert r["val_criterion"] == pytest.approx(0.5) and r["val_SNIS"] == pytest.approx(0.6)
    got = selected_rows(rows, sel)    # the default label is the default criterion's
    assert set(zip(got[got["method"] == "poxm"]["p"], got[got["method"] == "poxm"]["lam"])) == {(100, 1.0)}


def test_criterion_without_rows_warns_and_bad_criteria_are_rejected():
    with pytest.warns(UserWarning, match="no finite validation DR"):
        sel = select(_rows(), criterion="DR")
    assert sel[(sel["selection"] == "dr") & (sel["method"] == "poxm")].empty
    for bad in ("ESS", "SNIS_se", "", None, "oracle"):
        with pytest.raises(ValueError, match="criterion"):
            select(_rows(), criterion=bad)
