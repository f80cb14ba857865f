"""The logging-quality landscape (each method's test metric minus the logging model's greedy P@5 over α × T
at β = 0): its cells, table, sentence and figure on hand-built rows with hand-computed answers."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from orchestration.report import landscape as L
from orchestration.report.claims import instance_key
from orchestration.selection import select
from poxm_core.common.results import make_row, to_frame

T_975_2 = 4.302652729911275     # t quantile, 2 degrees of freedom (scipy.stats.t.ppf(0.975, 2))

CONFIG = {"datasets": [{"name": "d", "variants": [
    {"name": "a1", "alpha": 0.1, "beta": 0.0, "T": 1.0},
    {"name": "a2", "alpha": 0.1, "beta": 0.0, "T": 2.0},
    {"name": "m", "alpha": 0.4, "beta": 0.0, "match": {"logging_to_skyline_R@5": 0.5}},
    {"name": "B", "alpha": 0.2, "beta": 1.5, "T": 5.0}]}]}     # β > 0: not in the landscape
PREPARE = pd.DataFrame([{"dataset": "d", "variant": "m", "seed": s, "metric": "variant/T", "value": t}
                        for s, t in enumerate((1.4, 1.6, 1.5))])


def _head(method, variant, seed, values, p=None, lam=None, val=None):
    kw = dict(dataset="d", variant=variant, method=method, p=p, lam=lam, seed=seed, epoch=3, final=True)
    out = [make_row(split="test", metric=m, value=v, **kw) for m, v in values.items()]
    return out + [make_row(split="val", metric=c, value=v, **kw) for c, v in (val or {}).items()]


def _rows(poxm_p5=None, logging_p5=(0.30, 0.32, 0.34), variants=("a1", "a2", "m", "B")):
    """Per variant and seed: logging (bar P@5, its ρ's R@5), DM (deterministic: R@5 = P@5), POXM with two
    heads, IS choosing p = 20 (greedy P@5 `poxm_p5`, R@5 0.05 below it), the other head 0.2 higher."""
    poxm_p5 = poxm_p5 or {"a1": (0.33, 0.34, 0.38)}
    rows = []
    for v in variants:
        for s, bar in enumerate(logging_p5):
            rows += _head("logging", v, s, {"P@5": bar, "R@5": bar - 0.1})
            rows += _head("dm", v, s, {"P@5": bar - 0.02, "R@5": bar - 0.02})
            px = poxm_p5.get(v, (bar - 0.01,) * 3)[s]
            rows += _head("poxm", v, s, {"P@5": px, "R@5": px - 0.05}, p=20, lam=0.9, val={"IS": 2.0})
            rows += _head("poxm", v, s, {"P@5": px + 0.2, "R@5": px + 0.2}, p=50, lam=0.9, val={"IS": 1.0})
    return to_frame(rows)


def _data(rows, config=CONFIG, prepare=PREPARE, instances=None):
    return L.landscape_data(rows, select(rows, "IS"), "IS", config, prepare, instances)


def test_variants_read_from_the_config_and_the_solved_T_from_prepare():
    v = L.landscape_variants(CONFIG, PREPARE, "d")
    assert v["variant"].tolist() == ["a1", "a2", "m"]                       # β = 1.5 left out; α, then T
    assert v["alpha"].tolist() == [0.1, 0.1, 0.4] and v["matched"].tolist() == [False, False, True]
    assert v["T"].tolist() == pytest.approx([1.0, 2.0, 1.5])                # matched: mean of 1.4, 1.6, 1.5
    assert L.spans_landscape(v) and not L.spans_landscape(v.iloc[:1])
    same = pd.DataFrame({"variant": ["x", "y"], "alpha": [0.2, 0.2], "T": [2.0, 2.0], "matched": [False, False]})
    assert not L.spans_landscape(same)                                       # one α, one T: no landscape
    assert L.spans_landscape(same.assign(matched=[False, True]))            # a matched T is a T of its own


def test_cells_hand_computed():
    f = _data(_rows())
    assert set(f["variant"]) == {"a1", "a2", "m"} and list(f.columns) == L.LANDSCAPE_COLUMNS
    # logging: stochastic only (its greedy ranking is the bar); DM deterministic: greedy only
    kinds = {(m, p) for m, p in zip(f["method"], f["policy"])}
    assert kinds == {("logging", "stochastic"), ("dm", "greedy"), ("poxm", "greedy"), ("poxm", "stochastic")}
    r = f.set_index(["variant", "method", "policy"]).loc[("a1", "poxm", "greedy")]
    # IS's head p = 20: (0.33, 0.34, 0.38) − (0.30, 0.32, 0.34) = (3, 2, 4) ×100; mean 3, s² = 1, se = √(1/3)
    half = T_975_2 * math.sqrt(1 / 3)
    assert r["diff"] == pytest.approx(3.0) and (r["ci_lo"], r["ci_hi"]) == pytest.approx((3 - half, 3 + half))
    assert r["bar"] == pytest.approx(32.0) and r["value"] == pytest.approx(35.0) and r["positive"] == 3
    s = f.set_index(["variant", "method", "policy"]).loc[("a1", "poxm", "stochastic")]
    assert s["diff"] == pytest.approx(-2.0) and s["metric"] == "R@5"       # 5 points below the greedy
    lg = f.set_index(["variant", "method", "policy"]).loc[("m", "logging", "stochastic")]
    assert lg["diff"] == pytest.approx(-10.0) and lg["T"] == pytest.approx(1.5) and lg["matched"]
    assert L.landscape_data(_rows(variants=("a1", "B")), select(_rows(variants=("a1", "B")), "IS"), "IS",
                            CONFIG, PREPARE).empty                          # one β = 0 variant: no landscape


def test_bar_falls_back_to_prepare_without_a_logging_trial():
    rows = _rows()
    rows = rows[rows["method"] != "logging"]
    prep = pd.concat([PREPARE, pd.DataFrame([{"dataset": "d", "variant": v, "seed": s, "metric": "logging_model/P@5",
                                              "value": 0.30} for v in ("a1", "a2", "m") for s in range(3)])])
    f = _data(rows, prepare=prep).set_index(["variant", "method", "policy"])
    # (0.33, 0.34, 0.38) − 0.30: (3, 4, 8), mean 5
    assert f.loc[("a1", "poxm", "greedy"), "diff"] == pytest.approx(5.0)
    assert f.loc[("a1", "poxm", "greedy"), "interval"] == "t (seeds)"


def test_per_instance_values_add_the_test_set_term():
    rows = _rows()
    sel = select(rows, "IS")
    inst = {}
    for s in range(3):
        for v in ("a1", "a2", "m"):
            inst[instance_key("d", v, s, "logging", -1, math.nan, "P@5")] = np.array([0.0, 1.0, 0.0, 0.0])
            for m in ("P@5", "R@5"):
                inst[instance_key("d", v, s, "poxm", 20, 0.9, m)] = np.array([1.0, 1.0, 0.0, 0.0])
    f = L.landscape_data(rows, sel, "IS", CONFIG, PREPARE, inst).set_index(["variant", "method", "policy"])
    r = f.loc[("a1", "poxm", "greedy")]
    assert r["interval"] == "t (seeds + test instances)" and r["diff"] == pytest.approx(3.0)
    # the instance term: seed-averaged per-instance differences (100, 0, 0, 0): variance 2500 / 4 instances
    v = 1 / 3 + 2500 / 4
    df = v ** 2 / ((1 / 3) ** 2 / 2 + (2500 / 4) ** 2 / 3)
    from scipy import stats
    assert r["ci_hi"] - r["diff"] == pytest.approx(stats.t.ppf(0.975, df) * math.sqrt(v))
    assert f.loc[("a1", "dm", "greedy"), "interval"] == "t (seeds)"         # DM kept no values here


def test_table_marks_the_cells_above_the_bar():
    t = L.landscape_table(_data(_rows()), "d")
    assert t.columns == ["Method", "Policy (metric)", "α 0.1, T 1", "α 0.1, T 2", "α 0.4, matched T 1.5"]
    assert t.rows[0] == ["Logging model (the bar)", "greedy (P@5), ×100", "32.00", "32.00", "32.00"]
    names = [(r[0], r[1]) for r in t.rows]
    i = names.index(("POXM", "greedy (P@5 − bar)"))
    assert t.rows[i][2] == "+3.00 [+0.52, +5.48]" and t.rows[i][3] == "-1.00 [-1.00, -1.00]"
    assert (i, 2) in t.bold and (i, 3) not in t.bold and len(t.bold) == 1


def test_sentence_names_where_and_by_how_much_or_says_nowhere():
    text = L.landscape_sentence(_data(_rows()))
    assert "in 1 of 3 (dataset, α, T) cells" in text
    assert "By the greedy ranking (P@5): POXM in 1 cell (most: d at α 0.1, T 1, +3.00 [+0.52, +5.48])." in text
    assert "stochastic" not in text.split("Elsewhere")[0].split("cells")[1]   # no stochastic cell beats it
    none = L.landscape_sentence(_data(_rows(poxm_p5={"a1": (0.31, 0.33, 0.30)})))
    assert none.startswith("Nowhere in this landscape") and "in none of 3" in none
    # closest: POXM's greedy at a1, (1, 1, −4) → mean −0.67 beats DM's −2 and POXM elsewhere's −1
    assert "Closest: POXM's greedy ranking on d at α 0.1, T 1, -0.67" in none
    two = _rows(logging_p5=(0.30, 0.32))
    few = L.landscape_sentence(_data(two[two["seed"] < 2]))
    assert few.startswith("With 2 seeds no cell has an interval") and "POXM in 1 cell" in few


def test_figure_draws_one_panel_per_dataset_and_learner(tmp_path):
    from orchestration.report.landscape_figure import landscape_figure
    fig = landscape_figure(_data(_rows()), tmp_path, "IS")
    assert fig is not None and fig.paths[0].name == "landscape.png" and fig.paths[0].stat().st_size > 10_000
    assert "95 % intervals" in fig.caption and "3 seeds" in fig.caption
    assert landscape_figure(pd.DataFrame(columns=L.LANDSCAPE_COLUMNS), tmp_path, "IS") is None
