"""The claims table (paired differences over seeds and test instances, t-interval, Holm verdicts) and selection
stability, on hand-built rows and selection frames."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from orchestration.report import claims as C
from orchestration.report.stability import stability, stability_table
from orchestration.selection import select
from poxm_core.common.results import make_row, to_frame


def _point(method, seed, r5, p=None, lam=None, variant="A", val=None, psr5=None, dataset="d"):
    kw = dict(dataset=dataset, variant=variant, method=method, p=p, lam=lam, seed=seed, epoch=2, final=True)
    out = [make_row(split="test", metric="R@5", value=r5, **kw)]
    if psr5 is not None:
        out.append(make_row(split="test", metric="PSR@5", value=psr5, **kw))
    for crit, v in (val or {}).items():
        out.append(make_row(split="val", metric=crit, value=v, **kw))
    return out


def _rows(poxm_r5=(0.30, 0.25, 0.40), logging_r5=(0.20, 0.20, 0.20), variant="A", p_best=20):
    """Per seed: logging (one point), POXM with two heads. IS prefers p = `p_best` (R@5 `poxm_r5`), SNIS
    the other head (R@5 0.5 higher: only the criterion's choice may count)."""
    rows = []
    other = 10 if p_best != 10 else 50
    for s, (a, b) in enumerate(zip(poxm_r5, logging_r5)):
        rows += _point("logging", s, b, variant=variant)
        rows += _point("poxm", s, a, p=p_best, lam=0.9, variant=variant, val={"IS": 2.0, "SNIS": 1.0})
        rows += _point("poxm", s, a + 0.5, p=other, lam=0.9, variant=variant, val={"IS": 1.0, "SNIS": 2.0})
    return to_frame(rows)


def _claims(rows, criterion="IS"):
    return C.claims(rows, select(rows, criterion), criterion)


def test_paired_difference_hand_computed_and_t_interval_matches_scipy():
    f = _claims(_rows())
    assert list(f.columns) == C.CLAIM_COLUMNS
    assert f["claim"].tolist() == ["poxm_vs_logging"]     # no DM, BanditNet, ...: those rows are omitted
    r = f.set_index("claim").loc["poxm_vs_logging"]
    d = np.array([10.0, 5.0, 20.0])                       # (0.30, 0.25, 0.40) - 0.20, x100, at IS's p = 20
    assert r["diff"] == pytest.approx(35.0 / 3) and r["n"] == 3 and r["seeds"] == "0 1 2" and r["signs"] == "3/3"
    # no per-instance values here: the paired t-interval over seeds, as scipy computes it
    t = stats.ttest_1samp(d, 0.0)
    lo, hi = t.confidence_interval(0.95)
    assert (r["ci_lo"], r["ci_hi"]) == pytest.approx((lo, hi)) and r["p_value"] == pytest.approx(t.pvalue)
    assert r["interval"] == "t (seeds)" and r["df"] == 2
    assert r["p_holm"] == pytest.approx(t.pvalue)        # a family of one
    assert r["verdict"] == ("holds" if t.pvalue < 0.05 else "undecided") and not r["paper_criterion"]
    s = _claims(_rows(), "SNIS").iloc[0]                  # SNIS chose the other head: +50 everywhere
    assert s["diff"] == pytest.approx(35.0 / 3 + 50) and s["paper_criterion"]


@pytest.mark.parametrize("poxm, verdict", [((0.10, 0.15, 0.12), "fails"),     # every seed below logging
                                           ((0.30, 0.15, 0.25), "undecided"),  # one seed below
                                           ((0.25, 0.26, 0.27), "holds")])
def test_verdict_from_the_holm_adjusted_test(poxm, verdict):
    assert _claims(_rows(poxm_r5=poxm)).iloc[0]["verdict"] == verdict


def test_too_few_seeds_gives_no_verdict():
    one = _claims(_rows(poxm_r5=(0.30,), logging_r5=(0.20,))).iloc[0]
    assert one["n"] == 1 and math.isnan(one["ci_lo"]) and one["verdict"] == "too few seeds"
    assert C.cell_text(one) == "+10.00"
    two = _claims(_rows(poxm_r5=(0.30, 0.40), logging_r5=(0.20, 0.20))).iloc[0]
    assert two["n"] == 2 and two["verdict"] == "too few seeds" and math.isnan(two["p_holm"])
    assert math.isfinite(two["ci_lo"])          # an interval (df 1: wide), but no verdict


def test_instance_term_widens_the_interval_and_holm_spans_the_family():
    rows = to_frame(sum((_point("logging", s, 0.2, variant=v, dataset=ds) + _point("poxm", s, 0.25 + 0.01 * s,
                         p=10, lam=0.9, variant=v, dataset=ds, val={"IS": 1.0})
                         for s in range(4) for v in ("A", "B") for ds in ("d", "e")), []))
    rng = np.random.default_rng(0)
    inst = {}
    for ds in ("d", "e"):
        for v in ("A", "B"):
            shared = rng.random(50)                          # the test set's instances, shared by every seed
            for s in range(4):
                x = shared + 0.1 * rng.random(50)
                x = x - x.mean() + 0.25 + 0.01 * s          # per-instance values whose mean is the row's
                inst[C.instance_key(ds, v, s, "poxm", 10, 0.9, "R@5")] = x.astype(np.float32)
                inst[C.instance_key(ds, v, s, "logging", -1, math.nan, "R@5")] = np.full(50, 0.2, np.float32)
    sel = select(rows, "IS")
    without = C.claims(rows, sel, "IS").set_index(["dataset", "variant", "claim"])
    withi = C.claims(rows, sel, "IS", inst).set_index(["dataset", "variant", "claim"])
    a, b = without.loc[("d", "A", "poxm_vs_logging")], withi.loc[("d", "A", "poxm_vs_logging")]
    assert a["diff"] == pytest.approx(b["diff"], abs=1e-4) and b["interval"] == "t (seeds + test instances)"
    assert b["ci_hi"] - b["ci_lo"] > a["ci_hi"] - a["ci_lo"] and b["m"] == 50
    # hand-computed: seed term from the rows' per-seed differences, instance term from the seed means,
    # interaction from the residuals of the two-way layout, summed over every (seed, instance)
    d = np.array([5.0, 6.0, 7.0, 8.0])
    D = np.stack([100 * (inst[C.instance_key("d", "A", s, "poxm", 10, 0.9, "R@5")].astype(float) - 0.2)
                  for s in range(4)])
    v1, v2 = d.var(ddof=1) / 4, D.mean(0).var(ddof=1) / 50
    rm, cm, g = D.mean(1), D.mean(0), D.mean()
    v3 = sum((D[s, i] - rm[s] - cm[i] + g) ** 2 for s in range(4) for i in range(50)) / (3 * 49) / 200
    assert (b["v_seed"], b["v_inst"], b["v_int"]) == pytest.approx((v1, v2, v3))
    var = v1 + v2 - v3
    df = var ** 2 / (v1 ** 2 / 3 + v2 ** 2 / 49 + v3 ** 2 / (3 * 49))
    half = stats.t.ppf(0.975, df) * math.sqrt(var)
    assert (b["ci_lo"], b["ci_hi"]) == pytest.approx((b["diff"] - half, b["diff"] + half), rel=1e-6)
    assert b["p_sign"] == pytest.approx(2 / 16) and b["test"] == "crossed_t"      # 4 of 4 seeds > 0
    # Holm over the whole family: here the 4 cells (2 datasets x 2 variants) of the one claim the rows have
    fam = withi.xs("poxm_vs_logging", level="claim")
    p = np.sort(fam["p_value"].to_numpy())
    expect = np.maximum.accumulate(np.minimum(1, (4 - np.arange(4)) * p))
    assert np.sort(fam["p_holm"].to_numpy()) == pytest.approx(expect)


def test_every_pair_its_metric_and_p_grows_from_a_to_c():
    rows = []
    for v, p in (("A", 10), ("C", 50)):
        for s in (0, 1, 2):
            rows += _point("logging", s, 0.1, variant=v)
            rows += _point("dm", s, 0.3, variant=v)
            rows += _point("poxm", s, 0.2 + 0.01 * s, p=p, lam=0.9, variant=v, val={"IS": 1.0}, psr5=0.5)
            rows += _point("poxm", s, 0.9, p=20, lam=0.9, variant=v, val={"IS": 0.5}, psr5=0.9)
            rows += _point("wpoxm", s, 0.1, p=p, lam=0.9, variant=v, val={"IS": 1.0}, psr5=0.6 + 0.02 * s)
            rows += _point("wpoxm", s, 0.1, p=20, lam=0.9, variant=v, val={"IS": 0.5}, psr5=0.0)
    f = _claims(to_frame(rows)).set_index(["claim", "variant"])
    assert set(f.index) == {(k, v) for k in ("poxm_vs_logging", "poxm_vs_dm", "wpoxm_vs_poxm", "dm_vs_logging")
                            for v in "AC"} | {("p_grows", "A→C")}
    assert f.loc[("poxm_vs_dm", "A"), "diff"] == pytest.approx(-9.0)           # (-10, -9, -8) x100
    assert f.loc[("dm_vs_logging", "A"), "diff"] == pytest.approx(20.0)
    w = f.loc[("wpoxm_vs_poxm", "C")]
    assert w["metric"] == "PSR@5" and w["diff"] == pytest.approx(12.0)          # (0.6, 0.62, 0.64) - 0.5
    p = f.loc[("p_grows", "A→C")]
    assert p["metric"] == "p" and p["diff"] == pytest.approx(40.0) and p["n"] == 3 and p["test"] == "sign"
    assert (p["ci_lo"], p["ci_hi"]) == (40.0, 40.0)                            # no spread at all, but
    # its verdict is the exact sign test's: 3 of 3 seeds up is p = 2/8, no verdict however large the steps
    assert p["p_value"] == p["p_sign"] == pytest.approx(0.25) and p["verdict"] == "undecided"
    only_a = to_frame([r for r in rows if r["variant"] == "A"])
    assert "p_grows" not in set(_claims(only_a)["claim"])                      # needs both A and C


def test_poxm_against_the_logging_policys_greedy_ranking():
    rows = []
    for s in range(3):
        rows += _point("logging", s, 0.2) + [make_row(dataset="d", variant="A", method="logging", p=None, lam=None,
                                                      seed=s, epoch=0, final=True, split="test", metric="P@5",
                                                      value=0.35)]
        rows += _point("poxm", s, 0.30 + 0.01 * s, p=10, lam=0.9, val={"IS": 1.0})
    r = _claims(to_frame(rows)).set_index("claim").loc["poxm_vs_logging_greedy"]
    assert r["metric"] == "R@5 vs P@5" and r["diff"] == pytest.approx(-4.0) and r["signs"] == "0/3"


def test_table_summary_and_mlflow_names():
    f = pd.concat([_claims(_rows()), _claims(_rows(), "SNIS")], ignore_index=True)
    t = C.claims_table(f, ["IS", "SNIS"])
    assert t.name == "claims" and t.columns[3:8] == ["IS: Δ [95 % CI]", "IS: seeds > 0", "IS: sign p", "IS: Holm p",
                                                      "IS: verdict"]
    r = f[(f["criterion"] == "IS")].iloc[0]
    assert t.rows[0][:8] == ["POXM > logging policy", "A", "R@5 ×100", C.cell_text(r), "3/3", "0.25",
                             f"{r['p_holm']:.3g}", r["verdict"]]
    assert t.rows[0][-2] == "exploratory"                  # SNIS, beside the run's criterion: no verdict
    assert C._p_text(0.0504) == "0.0504" and C._p_text(0.0004) == "<0.001" and C._p_text(math.nan) == "—"
    text = C.summary_text(f, ["IS", "SNIS"])
    assert "under IS" in text and "+11.67 " in text and "too few seeds" in text
    m = C.mlflow_metrics(f)
    assert m["claims/IS/d/poxm_vs_logging/A/diff"] == pytest.approx(35.0 / 3)
    assert m["claims/IS/d/poxm_vs_logging/A/p_holm"] == pytest.approx(r["p_holm"])
    assert not any(ch in k for k in m for ch in "@=")


def _sel(choices, method="poxm", label="is", n_points=4):
    return pd.DataFrame([{"dataset": "d", "variant": "A", "method": method, "seed": s, "selection": label,
                          "p": p, "lam": lam, "n_points": n_points} for s, (p, lam) in enumerate(choices)])


def test_stability_modal_point_share_and_ties():
    sel = pd.concat([_sel([(20, 0.9), (10, 0.8), (20, 0.9), (20, 0.9)]),
                     _sel([(50, 0.9), (10, 0.9)], method="wpoxm"),               # a tie: smaller p wins
                     _sel([(-1, 0.9), (-1, 0.9), (-1, math.nan)], method="banditnet"),
                     _sel([(-1, math.nan)], method="logging", n_points=1),       # no grid: not shown
                     _sel([(10, 0.8)] * 4, label="oracle")], ignore_index=True)
    st = stability(sel, "IS").set_index("method")
    assert st.loc["poxm", ["p", "lam", "n_modal", "n_seeds", "n_distinct"]].tolist() == [20, 0.9, 3, 4, 2]
    assert st.loc["poxm", "share"] == pytest.approx(0.75)
    assert st.loc["wpoxm", ["p", "lam", "share"]].tolist() == [10, 0.9, 0.5]
    assert st.loc["banditnet", "p"] == -1 and st.loc["banditnet", "n_modal"] == 2
    assert "logging" not in st.index
    t = stability_table([stability(sel, "IS")], ["IS"])
    assert [r[2:] for r in t.rows] == [["BanditNet", "λ 0.9", "2/3 (2 points)"],
                                       ["POXM", "p 20, λ 0.9", "3/4 (2 points)"],
                                       ["wPOXM", "p 10, λ 0.9", "1/2 (2 points)"]]


@pytest.mark.slow
def test_report_opens_with_the_claims_table_under_is_and_snis(tmp_path):
    from orchestration.report.build import build_report
    from orchestration.report.claims import read_claims, summary_from_report
    run = tmp_path / "run"
    (run / "results").mkdir(parents=True)
    _rows().to_csv(run / "results" / "rows.csv", index=False)
    (run / "config.yaml").write_text("name: tiny\nseeds: [0, 1, 2]\n")      # no criterion: the default, IS
    out = build_report(run)
    index = (out / "index.md").read_text()
    first_table = index.index("\n| ")
    assert index.index("**Claims: what this benchmark says") < first_table < index.index("Selection criterion: **IS**")
    assert index[first_table:].split("\n")[1].startswith("| Claim | Variant | Metric | IS: Δ")
    f = read_claims(out)
    assert set(f["criterion"]) == {"IS", "SNIS"} and (out / "tables" / "claims.tex").is_file()
    assert "+11.67 ?/e" in summary_from_report(out)        # IS: d (10, 5, 20), p 0.14; SNIS: exploratory
    for name in ("results_d_A", "results_snis_d_A", "selection_snis_d_A", "selection_stability"):
        assert (out / "tables" / f"{name}.csv").is_file()      # SNIS's tables stay beside IS's
    sel = pd.read_csv(out.parent / "results" / "selection.csv")
    assert set(sel["selection"]) == {"is", "snis", "oracle"}
    assert "**Selection stability across seeds" in index.split("## Selection")[1]


def test_cli_prints_the_claims_of_a_built_report(tmp_path, capsys):
    from orchestration.cli import _print_claims
    f = pd.concat([_claims(_rows()), _claims(_rows(), "SNIS")], ignore_index=True)
    (tmp_path / "tables").mkdir()
    f.to_csv(tmp_path / "tables" / "claims.csv", index=False)
    _print_claims(tmp_path)
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("claims: ") and "verdicts IS/SNIS" in out[1]
    assert out[3].startswith("POXM > logging policy (R@5)") and out[3].endswith("+11.67 ?/e")   # d (10, 5, 20): p 0.14 under IS; SNIS exploratory
    _print_claims(tmp_path / "nothing-here")          # a report without claims: nothing printed
    assert capsys.readouterr().out == ""


def test_gap_share_hand_computed():
    from orchestration.report.gap_share import gap_shares, gap_table
    rows = []
    for s, (lg, px, sk) in enumerate([(0.20, 0.30, 0.60), (0.20, 0.40, 0.40)]):
        rows += _point("logging", s, lg) + _point("skyline_e2e", s, sk) + _point("skyline", s, 0.9)
        rows += _point("poxm", s, px, p=10, lam=0.9, val={"IS": 1.0})
    rows = to_frame(rows)
    g = gap_shares(rows, select(rows, "IS"), "IS").set_index("method")
    assert list(g.index) == ["poxm"] and g.loc["poxm", "skyline"] == "skyline_e2e"   # the paper's skyline first
    assert g.loc["poxm", "share"] == pytest.approx((0.25 + 1.0) / 2)               # 0.1/0.4 and 0.2/0.2
    assert (g.loc["poxm", "share_min"], g.loc["poxm", "share_max"]) == pytest.approx((0.25, 1.0))
    assert gap_table(g.reset_index()).rows == [["d", "A", "62 [25, 100]"]]


def test_grid_edges_counts_points_and_edge_choices():
    from orchestration.report.grid_edges import grid_edges, grid_edges_table
    rows = []
    for s, best in enumerate([(10, 0.9), (20, 0.8), (50, 0.8)]):
        for p in (10, 20, 50):
            for lam in (0.8, 0.9):
                rows += _point("poxm", s, 0.3, p=p, lam=lam, val={"IS": 1.0 if (p, lam) == best else 0.0})
        rows += _point("logging", s, 0.2)
    rows = to_frame(rows)
    e = grid_edges(rows, select(rows, "IS"), "IS").set_index("method")
    assert list(e.index) == ["poxm"]                          # logging has no grid
    r = e.loc["poxm"]
    assert (r["points"], r["p_values"], r["lam_values"], r["choices"]) == (6, "10 20 50", "0.8 0.9", 3)
    # p edges: 10 and 50 (2 of 3); λ edges: both values of a two-value axis are edges (3 of 3)
    assert (r["p_edge"], r["lam_edge"], r["any_edge"]) == pytest.approx((2 / 3, 1.0, 1.0))
    t = grid_edges_table([e.reset_index()], ["IS"])
    assert t.rows[0][:5] == ["POXM", "6", "10 20 50", "0.8 0.9", "67 %"]
    assert "Searched less than the paper's grid: POXM" in t.notes[-1]
    from orchestration.report.grid_edges import paper_grid
    assert paper_grid("10 20 50 100", "0.7 0.8 0.9 1") and paper_grid("", "0.7 0.8 0.9 1")   # BanditNet: λ only
    assert not paper_grid("10 50", "0.7 0.8 0.9 1") and paper_grid("10 20 50 100", "")


def test_published_instances_keep_the_selected_heads_per_dataset_and_variant(tmp_path):
    from orchestration.report.instances import read_published_instances, write_selected
    sel = pd.DataFrame([{"dataset": d, "variant": "A", "seed": 0, "method": "poxm", "p": p, "lam": 0.9, "selection": s}
                        for d, p, s in (("d", 10, "is"), ("d", 10, "snis"), ("e", 20, "is"), ("e", 50, "oracle"))])
    full = tmp_path / "all.npz"
    arrays = {C.instance_key(d, "A", 0, "poxm", p, 0.9, m): np.linspace(0, 1, 7, dtype=np.float32) * p
              for d in ("d", "e") for p in (10, 20, 50) for m in ("R@5", "PSR@5", "P@5")}
    np.savez(full, **arrays)
    n = write_selected(full, sel, tmp_path / "instances")
    assert sorted(p.name for p in (tmp_path / "instances").iterdir()) == ["d_A.npz", "e_A.npz"]
    back = read_published_instances(tmp_path)
    # the honest choices' heads only (d's p 10 once though two criteria chose it; not the oracle's p 50)
    assert n == len(back) == 6 and all("|50|" not in k for k in back)
    k = C.instance_key("e", "A", 0, "poxm", 20, 0.9, "R@5")
    assert back[k].dtype == np.float16 and np.allclose(back[k], arrays[k], rtol=1e-3)


def test_two_seeds_give_no_verdict_and_no_interval_anywhere():
    """Below the seeds a verdict needs, neither the report's claims table (cells, legend) nor the
    terminal's summary names a verdict or shows an interval of two numbers."""
    import re
    f = pd.concat([_claims(_rows(poxm_r5=(0.30, 0.40), logging_r5=(0.20, 0.20))),
                   _claims(_rows(poxm_r5=(0.30, 0.40), logging_r5=(0.20, 0.20)), "SNIS")], ignore_index=True)
    assert set(f["verdict"]) == {"too few seeds"} and set(f["n"]) == {2}
    t = C.claims_table(f, ["IS", "SNIS"])
    text = " ".join(str(x) for row in t.rows for x in row) + " " + " ".join(t.notes)
    assert not re.search(r"\b(holds|fails)\b", text), text
    assert "[" not in " ".join(str(row[3]) for row in t.rows)        # Δ alone, no [lo, hi]
    summary = C.summary_text(f, ["IS", "SNIS"])
    assert not re.search(r"\b(holds|fails)\b", summary) and "too few seeds" in summary
