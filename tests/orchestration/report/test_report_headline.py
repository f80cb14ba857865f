"""The report's first screen and its consistency: the order of the sections (title, claims,
headline R@5 table, the paper's figures, the rest), the headline table, one value of the logging
policy's R@5 wherever it appears, the greedy logging row's name, and covering captions read from
the data (coinciding curves said)."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from orchestration.report.build import build_report
from orchestration.report import figures as F
from orchestration.report.aggregate import expected_from_rows, seed_stats
from orchestration.report.logging_table import logging_policy_values, logging_stats_table
from orchestration.report.tables import greedy_logging_name, headline_table, metric_table
from orchestration.selection import select, selected_rows
from poxm_core.common.results import make_row, to_frame


def _rows(specs):
    """specs: (variant, method, seed, p, lam, {metric: value}, snis)."""
    out = []
    for v, m, s, p, lam, vals, snis in specs:
        kw = dict(dataset="d", variant=v, method=m, p=p, lam=lam, seed=s, epoch=2, final=True)
        out += [make_row(split="test", metric=k, value=x, **kw) for k, x in vals.items()]
        if snis is not None:
            out += [make_row(split="val", metric=c, value=snis, **kw) for c in ("IS", "SNIS")]
    return to_frame(out)


def test_headline_table_rows_methods_columns_variants_hand_values():
    df = _rows([(v, "logging", s, None, None, {"R@5": r}, None)
                for v, base in (("A", 0.06), ("B", 0.03)) for s, r in ((0, base), (1, base + 0.02))]
               + [(v, "poxm", s, p, 0.9, {"R@5": r}, sn)
                  for v in ("A", "B") for s in (0, 1)
                  for p, r, sn in ((10, 0.10 + 0.01 * s, 1.0), (20, 0.30, 0.5))]       # IS picks p = 10
               + [(v, "dm", s, None, None, {"P@5": 0.2}, None) for v in ("A", "B") for s in (0, 1)])
    sel = select(df, "IS")
    stats = seed_stats(selected_rows(df, sel, "is"))
    t = headline_table("d", ["A", "B"], stats, expected_from_rows(df), "IS",
                       {("d", "A"): {"alpha": 0.2, "beta": 0.0, "T": 2.0}})
    assert t.columns == ["Method", "variant A", "variant B"]
    cells = {r[0]: r[1:] for r in t.rows}
    assert cells["Logging policy"] == ["7.00 ± 1.41", "4.00 ± 1.41"]     # mean of (6, 8) and (3, 5), sample std
    assert cells["POXM"] == ["10.50 ± 0.71", "10.50 ± 0.71"]             # p = 10 (IS), not the test's best p = 20
    assert cells["Direct Method†"] == ["20.00 ± 0.00", "20.00 ± 0.00"]   # greedy: its P@5, marked †
    i_dm = [r[0] for r in t.rows].index("Direct Method†")
    assert (i_dm, 1) in t.bold and (0, 1) not in t.bold                  # the logging policy is never bold
    assert "A (α 0.2, β 0.0, T 2.0)" in " ".join(t.notes)


def test_greedy_logging_row_is_the_model_for_beta0_and_the_policy_otherwise():
    assert greedy_logging_name({"beta": 0.0, "T": 2}).startswith("Logging model")
    assert greedy_logging_name({"beta": 1.5, "T": 5}).startswith("Logging policy ρ")
    assert "β = 1.5" in greedy_logging_name({"beta": 1.5})
    assert greedy_logging_name(None) == "Logging policy ρ (its top-k)"
    df = _rows([("B", "logging", 0, None, None, {"P@5": 0.1, "R@5": 0.05}, None)])
    sel = select(df, "IS")
    stats = seed_stats(selected_rows(df, sel, "is"))
    exp = expected_from_rows(df)
    greedy = metric_table("greedy", "d", "B", stats, exp, sel, criterion="IS", params={"beta": 1.5})
    results = metric_table("results", "d", "B", stats, exp, sel, criterion="IS", params={"beta": 1.5})
    assert greedy.rows[0][0].startswith("Logging policy ρ") and results.rows[0][0] == "Logging policy"


def _prep(values):
    return pd.DataFrame([{"dataset": "d", "variant": v, "seed": s, "metric": m, "value": x}
                         for (v, s, m), x in values.items()])


def test_logging_r5_comes_from_the_logging_trial_everywhere():
    # prepare.csv's estimate of seed 0 differs from the trial's (e.g. an older Monte-Carlo estimate)
    prep = _prep({("A", 0, "logging_policy/R@5"): 0.0689, ("A", 1, "logging_policy/R@5"): 0.0693,
                  ("A", 0, "logging_policy/R@1"): 0.074, ("A", 0, "rho/top1_mass"): 0.06,
                  ("A", 0, "covering@1"): 0.2, ("A", 1, "covering@1"): 0.2,
                  ("A", 0, "variant/T"): 0.84, ("A", 1, "variant/T"): 0.86})
    df = _rows([("A", "logging", 0, None, None, {"R@5": 0.0681}, None),
                ("A", "logging", 1, None, None, {"R@5": 0.0693}, None)])
    fixed = logging_policy_values(prep, df).set_index(["seed", "metric"])["value"]
    assert fixed[(0, "logging_policy/R@5")] == pytest.approx(0.0681)   # the trial's value
    assert fixed[(0, "logging_policy/R@1")] == pytest.approx(0.074)    # no trial row: prepare's
    assert fixed[(0, "rho/top1_mass")] == pytest.approx(0.06)
    _, r5 = F.covering_data(prep, df, "d")
    assert r5.iloc[0]["mean"] == pytest.approx((0.0681 + 0.0693) / 2)
    _, r5_prep_only = F.covering_data(prep, df.iloc[:0], "d")             # no trial rows: prepare's
    assert r5_prep_only.iloc[0]["mean"] == pytest.approx((0.0689 + 0.0693) / 2)
    cells = {r[0]: r[1] for r in logging_stats_table("d", prep, df).rows}
    sel = select(df, "IS")
    stats = seed_stats(selected_rows(df, sel, "is"))
    table = headline_table("d", ["A"], stats, expected_from_rows(df), "IS")
    assert cells["logging_policy/R@5"].split(" ± ")[0] == table.rows[0][1].split(" ± ")[0] == "6.87"
    assert cells["variant/T"].split(" ± ")[0] == "0.85"       # a temperature in (0, 1) is not a rate: not x100


def test_covering_caption_says_which_lines_coincide_and_reads_values():
    prep = _prep({(v, s, f"covering@{k}"): val
                  for s in (0, 1)
                  for v, curve in (("A", (0.2, 0.5)), ("T1", (0.2, 0.5)), ("C", (0.05, 0.15)))
                  for k, val in zip((5, 10), curve)})
    curve, _ = F.covering_data(prep, _rows([]), "d")
    groups = F.coinciding_groups(curve)
    assert groups == [["A", "T1"], ["C"]]
    cap = F.covering_caption(curve, groups)
    assert "A = T1 50 %" in cap and "C 15 %" in cap and "Lines coincide for A, T1" in cap
    alone = F.covering_caption(curve[curve["variant"] != "T1"], F.coinciding_groups(curve[curve["variant"] != "T1"]))
    assert "coincide" not in alone


def _sections(index: str) -> list[str]:
    """The index's headings and bold titles (tables, figures), in order."""
    return [ln for ln in index.splitlines() if re.match(r"^(#+ |\*\*[^*])", ln)]


@pytest.mark.slow
def test_report_order_and_one_logging_value(tmp_path):
    run = tmp_path / "run"
    (run / "results").mkdir(parents=True)
    specs = []
    for v in ("A", "B"):
        for s in (0, 1, 2):
            specs.append((v, "logging", s, None, None, {"R@5": 0.0681 + 0.001 * s, "P@5": 0.19}, None))
            specs += [(v, "poxm", s, p, 0.9, {"R@5": 0.15 + 0.01 * s, "P@5": 0.16}, 1.0 + p / 100)
                      for p in (10, 20)]
    rows = _rows(specs)
    rows = pd.concat([rows, rows[rows["split"] == "val"].assign(split="val_truth", metric="V_true")])
    rows.to_csv(run / "results" / "rows.csv", index=False)
    prep = {(v, s, f"covering@{k}"): k / 20 for v in ("A", "B") for s in (0, 1, 2) for k in range(1, 11)}
    prep.update({(v, s, "logging_policy/R@5"): 0.0700 for v in ("A", "B") for s in (0, 1, 2)})
    _prep(prep).to_csv(run / "results" / "prepare.csv", index=False)
    (run / "config.yaml").write_text("name: t\nseeds: [0, 1, 2]\ndatasets:\n  - name: d\n    variants:\n"
                                     "      - {name: A, alpha: 0.2, beta: 0.0, T: 2}\n"
                                     "      - {name: B, alpha: 0.2, beta: 1.5, T: 5}\n")
    out = build_report(run)
    index = (out / "index.md").read_text()
    heads = _sections(index)
    pos = {key: next(i for i, h in enumerate(heads) if key in h)
           for key in ("# poxm report", "**Claims", "**Test R@5 per method and variant", "**Covering",
                       "**Robustness", "## Run", "## Coverage of the sweep", "## Dataset d",
                       "**Stochastic policies", "**Logging policy statistics", "## Selection")}
    order = sorted(pos, key=pos.get)
    assert order == ["# poxm report", "**Claims", "**Test R@5 per method and variant", "**Covering",
                     "**Robustness", "## Run", "## Coverage of the sweep", "## Dataset d",
                     "**Stochastic policies", "**Logging policy statistics", "## Selection"]
    # the logging policy's R@5 on A: the trial's mean 6.91 in every table, prepare's 7.00 nowhere
    headline = (out / "tables" / "headline_d.md").read_text()
    results = (out / "tables" / "results_d_A.md").read_text()
    logging = (out / "tables" / "logging_d.md").read_text()
    assert "| Logging policy | 6.91 ± 0.10 |" in headline
    assert "| Logging policy | — | 6.91 ± 0.10 [" in results
    assert "| logging_policy/R@5 | 6.91 ± 0.10 |" in logging
    assert "7.00" not in headline + logging
    greedy_b = (out / "tables" / "greedy_d_B.md").read_text()
    assert "| Logging policy ρ (its top-k, reordered by noise, β = 1.5) |" in greedy_b
    assert "| Logging model" in (out / "tables" / "greedy_d_A.md").read_text()
