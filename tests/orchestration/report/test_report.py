"""Aggregation, tables, figure data and build_report on hand-built rows (docs/report.md)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import numpy as np
import pytest

from orchestration.report.build import build_report
from orchestration.report import figures as F
from orchestration.report import paper
from orchestration.report.aggregate import (Cell, best_cells, cell_grid, expected_from_config,
                                            expected_from_grid, lam_set, p_set, seed_stats)
from orchestration.report.tables import metric_table, tex_escape, to_latex, to_markdown
from orchestration.selection import select, selected_rows
from poxm_core.common.errors import PoxmInputError
from poxm_core.common.results import make_row, to_frame

STOCH = ["R@3", "R@5", "nDCR@3", "nDCR@5", "PSR@3", "PSR@5"]


def _test_rows(method, seed, values, p=None, lam=None, dataset="d", variant="A", snis=None):
    kw = dict(dataset=dataset, variant=variant, method=method, p=p, lam=lam, seed=seed, epoch=2, final=True)
    out = [make_row(split="test", metric=m, value=v, **kw) for m, v in values.items()]
    if snis is not None:
        out.append(make_row(split="val", metric="SNIS", value=snis, **kw))
    return out


# ---- aggregation ------------------------------------------------------------------------------

def test_mean_and_sample_std_hand_computed():
    rows = []
    for seed, v in enumerate([0.1, 0.2, 0.4]):
        rows += _test_rows("poxm", seed, {"R@5": v})
    st = seed_stats(to_frame(rows))
    r = st.iloc[0]
    # mean = 0.7/3; deviations -0.1333, -0.0333, 0.1667: sum of squares 0.046667 / 2 -> sqrt = 0.152753
    assert r["mean"] == pytest.approx(0.233333, abs=1e-6)
    assert r["std"] == pytest.approx(0.152753, abs=1e-6)
    assert r["n"] == 3 and r["seeds"] == (0, 1, 2)
    assert Cell(r["mean"], r["std"], 3, 3).text() == "23.33 ± 15.28"


def test_cell_text_partial_missing_single():
    assert Cell(0.5, 0.01, 2, 3).text() == "50.00 ± 1.00 (n=2/3)"
    assert Cell(0.5, math.nan, 1, 1).text() == "50.00"
    assert Cell(n_expected=3).text() == "—" and Cell(n_expected=3).status == "missing"
    assert Cell().status == "not_run"
    assert Cell(0.5, 0.01, 2, 3).status == "partial"


def test_partial_seed_and_missing_method_are_marked_not_dropped():
    rows = []
    for s in (0, 1):
        rows += _test_rows("poxm", s, {m: 0.4 + 0.01 * s for m in STOCH})
    for s in (0, 1, 2):
        rows += _test_rows("logging", s, {m: 0.3 for m in STOCH})
    df = to_frame(rows)
    expected = expected_from_grid([{"dataset": "d", "variant": "A", "method": m, "p": -1, "lam": None, "seed": s}
                                   for m in ("logging", "poxm", "banditnet") for s in (0, 1, 2)])
    sel = select(df)
    stats = seed_stats(selected_rows(df, sel))
    cells = cell_grid(stats, expected, "d", "A", ["logging", "poxm", "banditnet"], ["R@5"])
    assert cells[("poxm", "R@5")].status == "partial"
    assert cells[("banditnet", "R@5")].status == "missing"
    t = metric_table("results", "d", "A", stats, expected, sel)
    labels = [r[0] for r in t.rows]
    # the methods the sweep ran or expects, in the paper's order; none it never ran
    assert labels == ["Logging policy", "BanditNet", "POXM"]
    # two seeds 0.40, 0.41: mean ± std, no interval (below 3 seeds it would be their min–max)
    assert t.rows[labels.index("POXM")][2] == "40.50 ± 0.71 (n=2/3)"
    assert t.rows[labels.index("BanditNet")][1:7] == ["—"] * 6
    md = to_markdown(t)
    assert "(n=2/3)" in md and "| BanditNet | — |" in md


def test_best_is_bold_with_ties_and_skyline_excluded():
    cells = {("a", "R@5"): Cell(0.41234, 0, 1, 1), ("b", "R@5"): Cell(0.41229, 0, 1, 1),  # both 41.23
             ("c", "R@5"): Cell(0.30, 0, 1, 1), ("skyline", "R@5"): Cell(0.9, 0, 1, 1),
             ("a", "R@3"): Cell(n_expected=1), ("c", "R@3"): Cell(0.2, 0, 1, 1)}
    best = best_cells(cells, ["R@5", "R@3"], eligible=["a", "b", "c"])
    assert best == {("a", "R@5"), ("b", "R@5"), ("c", "R@3")}


def test_p_and_lam_sets():
    assert p_set([20, 10, 20]) == "10/20" and p_set([-1, -1]) == "—"
    assert lam_set([0.8, 0.8]) == "0.8" and lam_set([1.0, 0.7]) == "0.7/1.0" and lam_set([math.nan]) == "—"


def test_expected_from_config():
    e = expected_from_config({"seeds": [0, 1], "methods": {"poxm": {}, "dm": {}},
                              "datasets": [{"name": "d", "variants": [{"name": "A"}, {"name": "B"}]}]})
    assert len(e) == 2 * 2 * 2
    assert expected_from_config({"name": "x"}) is None


# ---- tables ------------------------------------------------------------------------------------

def test_latex_and_markdown_carry_bold_numbers_and_paper_block():
    rows = _test_rows("poxm", 0, {m: 0.5 for m in STOCH}, dataset="eurlex-4k") + \
        _test_rows("logging", 0, {m: 0.25 for m in STOCH}, dataset="eurlex-4k")
    df = to_frame(rows)
    sel = select(df)
    stats = seed_stats(selected_rows(df, sel))
    exp = expected_from_grid([{"dataset": "eurlex-4k", "variant": "A", "method": m, "p": -1, "lam": None, "seed": 0}
                              for m in ("poxm", "logging")])
    t = metric_table("results", "eurlex-4k", "A", stats, exp, sel, show_paper=True)
    tex, md = to_latex(t), to_markdown(t)
    assert r"\toprule" in tex and r"\bottomrule" in tex and r"\textbf{50.00}" in tex
    assert "**50.00**" in md and "| 25.00 |" in md.replace("Logging policy | 25.00", "| 25.00")
    # the paper's POXM and AttentionXML rows for EUR-Lex (Table 2, tex lines 287-288)
    assert "52.38" in md and r"\textit{73.08}" in tex and "AttentionXML" in md
    assert r"$\pm$" not in tex.split(r"\midrule")[0]
    assert tex_escape("a_b & 1 ± 2 — λ") == r"a\_b \& 1 $\pm$ 2 -- $\lambda$"


def test_paper_matching_by_logging_parameters():
    assert paper.matches_paper("eurlex-4k", "A", None)
    assert not paper.matches_paper("eurlex-4k", "B", None)
    assert paper.matches_paper("eurlex-4k", "base", {"alpha": 0.2, "beta": 0.0, "T": 2.0})
    assert not paper.matches_paper("eurlex-4k", "A", {"alpha": 0.2, "beta": 1.5, "T": 5.0})
    assert paper.matches_paper("wiki10-31k", "default", None)
    assert not paper.matches_paper("bibtex", "A", None)
    assert paper.paper_row("amazon-670k", "poxm")["R@5"] == 23.72


def test_greedy_method_falls_back_to_its_greedy_twin_with_a_dagger():
    df = to_frame(_test_rows("dm", 0, {"P@3": 0.3, "P@5": 0.2, "nDCG@3": 0.31, "nDCG@5": 0.25,
                                       "PSP@3": 0.1, "PSP@5": 0.12}))
    sel = select(df)
    stats = seed_stats(selected_rows(df, sel))
    t = metric_table("results", "d", "A", stats, pd.DataFrame(columns=["dataset", "variant", "method", "seed"]), sel)
    dm = next(r for r in t.rows if r[0].startswith("Direct Method"))
    assert dm[0] == "Direct Method†" and dm[1:3] == ["30.00", "20.00"]


# ---- figure data -------------------------------------------------------------------------------

def test_per_p_data_picks_lambda_by_snis_not_test():
    rows = []
    # p=10: lam 0.7 has higher SNIS but lower R@5 -> R@5 reported must be 0.2
    rows += _test_rows("poxm", 0, {"R@5": 0.2}, p=10, lam=0.7, snis=0.9)
    rows += _test_rows("poxm", 0, {"R@5": 0.6}, p=10, lam=0.8, snis=0.5)
    rows += _test_rows("poxm", 0, {"R@5": 0.3}, p=20, lam=0.7, snis=0.4)
    d = F.per_p_data(to_frame(rows), "d", criterion="SNIS").set_index("p")
    assert d.loc[10, "R5_mean"] == pytest.approx(0.2) and d.loc[10, "val_mean"] == pytest.approx(0.9)
    assert d.loc[20, "R5_mean"] == pytest.approx(0.3)


def test_estimator_error_data_hand_computed():
    rows = []
    for seed, (truth, est) in enumerate([(1.0, 1.5), (2.0, 1.5)]):  # errors +0.5, -0.5
        kw = dict(dataset="d", variant="A", method="poxm", p=10, lam=0.8, seed=seed, final=True, epoch=1)
        rows += [make_row(split="val_truth", metric="V_true", value=truth, **kw),
                 make_row(split="val", metric="IS", value=est, **kw)]
    d = F.estimator_error_data(to_frame(rows), "d", "A").iloc[0]
    assert d["estimator"] == "IS" and d["p"] == 10 and d["n"] == 2
    assert d["bias"] == pytest.approx(0.0) and d["rmse"] == pytest.approx(0.5)
    assert d["sd"] == pytest.approx(math.sqrt(0.5))  # sample std of (+0.5, -0.5)


def test_covering_data_mean_over_seeds_and_logging_r5():
    prep = pd.DataFrame([{"dataset": "d", "variant": "A", "seed": s, "metric": f"covering@{k}", "value": v}
                         for s, vals in enumerate([(0.2, 0.5), (0.4, 0.7)]) for k, v in zip((1, 2), vals)]
                        + [{"dataset": "d", "variant": "A", "seed": 0, "metric": "logging_policy/R@5", "value": 0.1}])
    curve, r5 = F.covering_data(prep, to_frame([]), "d")
    assert list(curve.sort_values("k")["mean"]) == pytest.approx([0.3, 0.6])
    assert r5.iloc[0]["mean"] == pytest.approx(0.1)


# ---- build_report ------------------------------------------------------------------------------

def _run_dir(tmp: Path, with_sweep: bool = True) -> Path:
    run = tmp / "run"
    (run / "results").mkdir(parents=True)
    rows, grid, prep = [], [], []
    for d, variants in (("eurlex-4k", ("A", "B")), ("toy", ("A",))):
        for v in variants:
            for s in (0, 1, 2):
                for k in range(1, 11):
                    prep.append({"dataset": d, "variant": v, "seed": s, "metric": f"covering@{k}", "value": k / 12})
                prep += [{"dataset": d, "variant": v, "seed": s, "metric": "logging_policy/R@5", "value": 0.2},
                         {"dataset": d, "variant": v, "seed": s, "metric": "rho/top1_mass", "value": 0.4}]
                for m in ("logging", "poxm", "banditnet"):
                    pts = [(None, None)] if m == "logging" else [(10, 0.8), (20, 0.8)]
                    for p, lam in pts:
                        grid.append({"dataset": d, "variant": v, "method": m, "p": p if p else -1, "lam": lam, "seed": s})
                        if m == "banditnet" and d == "toy":
                            continue  # a whole method missing
                        if m == "poxm" and d == "eurlex-4k" and v == "A" and s == 2:
                            continue  # a missing seed
                        base = {"logging": 0.2, "poxm": 0.45, "banditnet": 0.1}[m] + 0.01 * s + (0.05 if p == 20 else 0)
                        kw = dict(p=p, lam=lam, dataset=d, variant=v, snis=base * 5)
                        rows += _test_rows(m, s, {**{k: base for k in STOCH}, "P@1": base, "P@3": base, "P@5": base}, **kw)
                        if p is not None:
                            rkw = dict(dataset=d, variant=v, method=m, p=p, lam=lam, seed=s, final=True, epoch=2)
                            rows += [make_row(split="val", metric=e, value=base * 5 + 0.1, **rkw) for e in ("IS", "sIS", "DR")]
                            rows.append(make_row(split="val_truth", metric="V_true", value=base * 5, **rkw))
    to_frame(rows).to_csv(run / "results" / "rows.csv", index=False)
    pd.DataFrame(prep).to_csv(run / "results" / "prepare.csv", index=False)
    (run / "config.yaml").write_text("name: tiny\nseeds: [0, 1, 2]\n")
    if with_sweep:
        (run / "sweep.json").write_text(json.dumps(grid))
    return run


@pytest.fixture(scope="module")
def one_process_report(tmp_path_factory):
    """_run_dir's report built once, its figures drawn in this process (POXM_REPORT_PROCS=1): what the
    report holds, and the reference the report drawn by worker processes must equal byte for byte.
    Returns (run dir, build_report's answer, the FigurePool that drew it)."""
    from orchestration.report import figure_pool
    pools = []
    init = figure_pool.FigurePool.__init__

    def spy(self, *a, **kw):
        init(self, *a, **kw)
        pools.append(self)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(figure_pool, "MIN_FIGURES", 1)
        mp.setattr(figure_pool.FigurePool, "__init__", spy)
        mp.setenv(figure_pool.ENV, "1")
        run = _run_dir(tmp_path_factory.mktemp("one-process"))
        out = build_report(run)
    return run, out, pools[0]


@pytest.mark.slow
def test_build_report_writes_every_file_and_shows_partial_cells(one_process_report):
    run, out, _ = one_process_report
    assert out == run / "report"
    for d, v in (("eurlex-4k", "A"), ("eurlex-4k", "B"), ("toy", "A")):
        for kind in ("results", "greedy", "selection"):
            for ext in ("csv", "md", "tex"):
                assert (out / "tables" / f"{kind}_{d}_{v}.{ext}").stat().st_size > 0
        assert (out / "figures" / f"estimators_{d}_{v}.png").exists()
    for d in ("eurlex-4k", "toy"):
        for fig in ("covering", "robustness"):
            for ext in ("png", "pdf"):
                assert (out / "figures" / f"{fig}_{d}.{ext}").stat().st_size > 1000
        assert (out / "tables" / f"logging_{d}.md").exists()
    for f in ("index.md", "index.html", "../results/selection.csv"):
        assert (out / f).stat().st_size > 0
    md = (out / "tables" / "results_eurlex-4k_A.md").read_text()
    # poxm seeds 0, 1 at p=20 (IS-selected; IS = SNIS + 0.1 here): 0.50, 0.51 -> 50.50 ± 0.71 (n=2/3),
    # no interval at two seeds
    assert "50.50 ± 0.71 (n=2/3)" in md and "[50.00, 51.00]" not in md and "52.38" in md
    tex = (out / "tables" / "results_eurlex-4k_A.tex").read_text()
    assert r"\textbf{50.50 $\pm$ 0.71 (n=2/3)}" in tex
    assert "52.38" not in (out / "tables" / "results_eurlex-4k_B.md").read_text()  # B is not the paper's policy
    toy = (out / "tables" / "results_toy_A.md").read_text()
    assert "| BanditNet | — | — |" in toy
    index = (out / "index.md").read_text()
    assert "missing: toy / A / banditnet" in index and "partial: eurlex-4k / A / poxm" in index
    assert "figures/covering_toy.png" in index and "tables/results_toy_A.tex" in index
    sel = pd.read_csv(out.parent / "results" / "selection.csv")
    assert set(sel[(sel["method"] == "poxm") & (sel["selection"] == "snis")]["p"]) == {20}
    html = (out / "index.html").read_text()
    # self-contained: figures inline, no anchors, nothing fetched from a relative or remote URL
    assert "<table>" in html and html.count('src="data:image/png;base64,') >= 4
    assert "<a " not in html and 'src="figures/' not in html and "http" not in html.replace("http-equiv", "")
    assert "<code>figures/robustness_eurlex-4k.pdf</code>" in html

    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    build_report(run)  # a rebuild swaps the report in and leaves no temporary directories
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml", "report", "results", "sweep.json"]
    assert sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file()) == sorted(before)


@pytest.mark.slow
def test_build_report_without_sweep_json_and_bad_inputs(tmp_path):
    run = _run_dir(tmp_path, with_sweep=False)
    (run / "results" / "prepare.csv").unlink()
    out = build_report(run)
    assert "taken from the results themselves" in (out / "index.md").read_text()
    with pytest.raises(PoxmInputError, match="rows.csv: result rows not found"):
        build_report(tmp_path)
    (run / "sweep.json").write_text("{not json")
    with pytest.raises(PoxmInputError, match="sweep.json:1: not valid JSON"):
        build_report(run)
    assert (run / "report" / "index.md").exists()  # the old report survives a failed build


# ---- selection criteria: Spearman table, criterion from config, protocol, sharpness figure ------

def _grid_point(method, p, lam, seed, r5, val, dataset="d", variant="A"):
    """Final rows of one grid point: test R@5 and the validation metrics `val` {metric: value}."""
    kw = dict(dataset=dataset, variant=variant, method=method, p=p, lam=lam, seed=seed, epoch=2, final=True)
    return [make_row(split="test", metric="R@5", value=r5, **kw)] + \
        [make_row(split="val", metric=m, value=v, **kw) for m, v in val.items()]


def test_spearman_hand_computed_monotone_reversed_and_too_few_points():
    from orchestration.report.spearman import spearman_data, spearman_table
    from orchestration.report.tables import to_latex, to_markdown
    rows = []
    r5 = [0.1, 0.2, 0.3, 0.4]
    for i, (p, lam) in enumerate([(10, 0.7), (10, 0.8), (20, 0.7), (20, 0.8)]):
        rows += _grid_point("poxm", p, lam, 0, r5[i], {
            "SNIS": 1.0 + i,                         # same order as R@5 -> +1
            "IS": 5.0 - i,                           # reversed -> -1
            "DR": [1.0, 3.0, 2.0, 4.0][i],           # one swap: 1 - 6*2/(4*15) = 0.8
            "ESS": 10.0 + i, "SNIS_se": 0.1})        # never criteria
        rows += _grid_point("poxm", p, lam, 0, r5[i], {"PIS": 0.5} if i < 2 else {}, variant="B")
    rows += _test_rows("logging", 0, {"R@5": 0.9})   # no grid: never in the correlation
    d = spearman_data(to_frame(rows), "d")
    assert set(d["criterion"]) == {"IS", "SNIS", "DR", "PIS"}  # ESS and *_se are not criteria
    a = d[(d["variant"] == "A") & (d["scope"] == "pooled")].set_index("criterion")
    assert a.loc["SNIS", "rho"] == pytest.approx(1.0) and a.loc["IS", "rho"] == pytest.approx(-1.0)
    assert a.loc["DR", "rho"] == pytest.approx(0.8) and a.loc["SNIS", "n"] == 4
    b = d[(d["variant"] == "B") & (d["criterion"] == "PIS")]
    assert b["n"].tolist() == [2, 2] and b["rho"].isna().all()  # 2 points: NaN (pooled and poxm)
    assert set(d["scope"]) == {"pooled", "poxm"}
    t = spearman_table("d", d, "SNIS")
    assert t.columns == ["Grid points", "points", "IS", "SNIS (selection, paper's)", "DR", "PIS"]
    assert spearman_table("d", d).columns[2:4] == ["IS (selection)", "SNIS (paper's)"]   # IS: the default
    row = t.rows[0]
    assert row[:2] == ["all grid methods, seed 0", "4"] and row[2:5] == ["-1.00", "+1.00", "+0.80"] and row[5] == "—"
    assert t.sections[0] == "variant A"
    assert "Selection reads only the validation log" in " ".join(t.notes)
    assert "+0.80" in to_markdown(t) and r"\toprule" in to_latex(t)


def test_spearman_pooled_across_methods_and_mean_over_seeds():
    from orchestration.report.spearman import spearman_data, spearman_table
    rows = []
    for seed in (0, 1):
        # poxm and banditnet together: criterion order equals R@5 order over all 4 points -> +1 pooled
        for m, lam, r5, v in (("poxm", 0.7, 0.1, 1.0), ("poxm", 0.8, 0.3, 3.0),
                              ("banditnet", 0.7, 0.2, 2.0), ("banditnet", 0.8, 0.4, 4.0)):
            rows += _grid_point(m, 10 if m == "poxm" else None, lam, seed, r5, {"SNIS": v if seed == 0 else -v})
    d = spearman_data(to_frame(rows), "d")
    pooled = d[d["scope"] == "pooled"].set_index("seed")["rho"]
    assert pooled[0] == pytest.approx(1.0) and pooled[1] == pytest.approx(-1.0)
    assert d[d["scope"] == "banditnet"]["n"].tolist() == [2, 2]  # 2 points per method: NaN
    t = spearman_table("d", d)
    mean_row = next(r for r in t.rows if r[0] == "all grid methods, mean over seeds")
    assert mean_row[2] == "0.00 ± 1.41"  # mean of (+1, -1), sample std sqrt(2)


def test_estimator_error_data_takes_every_val_estimator_including_pis():
    rows = []
    kw = dict(dataset="d", variant="A", method="poxm", p=10, lam=0.8, seed=0, final=True, epoch=1)
    rows += [make_row(split="val_truth", metric="V_true", value=1.0, **kw)]
    rows += [make_row(split="val", metric=m, value=v, **kw)
             for m, v in (("IS", 1.5), ("PIS", 1.1), ("NEW", 0.7), ("ESS", 40.0), ("PIS_se", 0.2))]
    d = F.estimator_error_data(to_frame(rows), "d", "A").set_index("estimator")
    assert sorted(d.index) == ["IS", "NEW", "PIS"]
    assert d.loc["PIS", "bias"] == pytest.approx(0.1) and d.loc["NEW", "bias"] == pytest.approx(-0.3)


def test_sharpness_data_uses_beta0_variants_only():
    rows = []
    for v in ("A", "B", "C"):
        for s, val in ((0, 0.2), (1, 0.4)):
            rows += _test_rows("poxm", s, {"R@5": val + (0.1 if v == "B" else 0)}, variant=v)
        rows += _test_rows("dm", 0, {"P@5": 0.3}, variant=v)  # greedy only: falls back to P@5
    df = to_frame(rows)
    params = {("d", "A"): {"name": "A", "alpha": 0.2, "beta": 0.0, "T": 2},
              ("d", "B"): {"name": "B", "alpha": 0.2, "beta": 0, "T": 8},
              ("d", "C"): {"name": "C", "alpha": 0.2, "beta": 1.5, "T": 5}}
    data = F.sharpness_data(selected_rows(df, select(df)), params, "d")
    assert set(data["variant"]) == {"A", "B"}
    px = data[data["method"] == "poxm"].set_index("variant")
    assert px.loc["A", "mean"] == pytest.approx(0.3) and px.loc["B", "mean"] == pytest.approx(0.4)
    assert px.loc["A", "sd"] == pytest.approx(math.sqrt(0.02)) and px.loc["B", "T"] == 8
    assert data[data["method"] == "dm"]["greedy"].all()


def _config_run(tmp: Path, config: str) -> Path:
    run = _run_dir(tmp)
    rows = pd.read_csv(run / "results" / "rows.csv")
    # a PIS row per grid point that orders the grid against SNIS: PIS prefers p = 10, SNIS p = 20
    val = rows[(rows["split"] == "val") & (rows["metric"] == "SNIS") & (rows["p"] >= 0)].copy()
    val["metric"] = "PIS"
    val["value"] = -val["value"]
    pd.concat([rows, val], ignore_index=True).to_csv(run / "results" / "rows.csv", index=False)
    (run / "config.yaml").write_text(config)
    return run


CONFIG_DATASETS = """datasets:
  - name: eurlex-4k
    variants:
      - {name: A, alpha: 0.2, beta: 0.0, T: 2}
      - {name: B, alpha: 0.2, beta: 0.0, T: 8}
  - name: toy
    variants:
      - {name: A, alpha: 0.2, beta: 0.0, T: 2}
"""


@pytest.mark.slow
def test_build_report_criterion_protocol_spearman_and_sharpness_from_config(tmp_path):
    run = _config_run(tmp_path, "name: tiny\nseeds: [0, 1, 2]\nselection: {criterion: PIS}\n"
                                "training: {epochs: 2, protocol: paper+init=logging}\n" + CONFIG_DATASETS)
    out = build_report(run)
    sel = pd.read_csv(out.parent / "results" / "selection.csv")
    assert set(sel["selection"]) == {"pis", "snis", "oracle"}        # SNIS, the paper's, beside the run's PIS
    assert set(sel[sel["selection"] != "snis"]["criterion"]) == {"PIS"}
    assert set(sel[(sel["selection"] == "snis") & (sel["method"] == "poxm")]["p"]) == {20}
    honest = sel[(sel["selection"] == "pis") & (sel["method"] == "poxm")]
    assert set(honest["p"]) == {10}  # the PIS argmax, not SNIS's p = 20
    assert (honest["val_criterion"] == -honest["val_SNIS"]).all()
    index = (out / "index.md").read_text()
    assert "protocol: **paper+init=logging**" in index and "Selection criterion: **PIS**" in index
    md = (out / "tables" / "results_eurlex-4k_B.md").read_text()
    assert "(protocol: paper+init=logging)" in md.splitlines()[0] and "validation-log PIS" in md
    assert "(p, λ) by PIS" in md.splitlines()[0]
    assert "(p, λ) by SNIS (the paper's criterion)" in (out / "tables" / "results_snis_eurlex-4k_B.md").read_text()
    assert "protocol" in pd.read_csv(out / "tables" / "results_eurlex-4k_B.csv").columns
    for d in ("eurlex-4k", "toy"):
        for ext in ("csv", "md", "tex"):
            assert (out / "tables" / f"spearman_{d}.{ext}").stat().st_size > 0
        assert f"tables/spearman_{d}.md" in index
    sp = pd.read_csv(out / "tables" / "spearman_eurlex-4k.csv")
    assert {"IS", "sIS", "SNIS", "DR", "PIS"} <= set(sp["criterion"])
    assert "PIS (selection)" in (out / "tables" / "spearman_eurlex-4k.md").read_text()
    # only eurlex-4k has two beta = 0 variants
    assert (out / "figures" / "sharpness_eurlex-4k.png").stat().st_size > 1000
    assert (out / "figures" / "sharpness_eurlex-4k.pdf").exists()
    assert not (out / "figures" / "sharpness_toy.png").exists()
    assert "figures/sharpness_eurlex-4k.png" in index
    # estimator figure: every criterion present, and what each one targets
    assert "Bias at p = 10 → 20: IS " in index and ", PIS " in index
    assert "IS, sIS, SNIS, DR target a prefix-from-ρ slate, not V_true" in index and "PIS targets V_true" in index


@pytest.mark.slow
def test_build_report_no_sharpness_figure_without_two_beta0_variants(tmp_path):
    cfg = CONFIG_DATASETS.replace("{name: B, alpha: 0.2, beta: 0.0, T: 8}", "{name: B, alpha: 0.2, beta: 1.5, T: 5}")
    run = _config_run(tmp_path, "name: tiny\nseeds: [0, 1, 2]\n" + cfg)
    out = build_report(run)
    assert not list((out / "figures").glob("sharpness_*"))
    index = (out / "index.md").read_text()
    assert "Selection criterion: **IS**" in index and "protocol: not recorded" in index   # IS: the default
    sel = pd.read_csv(out.parent / "results" / "selection.csv")
    assert set(sel["selection"]) == {"is", "snis", "oracle"}
    assert set(sel[(sel["selection"] == "is") & (sel["method"] == "poxm")]["p"]) == {20}


def test_bad_selection_criterion_in_config_is_an_input_error(tmp_path):
    run = _config_run(tmp_path, "name: tiny\nselection: {criterion: ESS}\n")
    with pytest.raises(PoxmInputError, match="selection.criterion"):
        build_report(run)


def test_run_selects_once_and_the_report_uses_that_selection(tmp_path, monkeypatch):
    """The run's selection (its typed criterion, here SNIS) is the report's: the report neither selects
    again nor reads the criterion from config.yaml (which says IS here); results/selection.csv is the run's
    one selection file (the report keeps none of its own and links to it)."""
    import orchestration.report.build as B
    from orchestration.stages.gather import select_and_report
    from orchestration.rundir import RunDir

    run = tmp_path / "run"
    (run / "results").mkdir(parents=True)
    rows = []
    for s in (0, 1):
        for p, is_v, snis_v, r5 in ((10, 0.2, 0.9, 0.40), (20, 0.8, 0.1, 0.50)):   # IS picks 20, SNIS picks 10
            kw = dict(dataset="d", variant="A", method="poxm", p=p, lam=0.8, seed=s, epoch=2, final=True)
            rows += [make_row(split="test", metric=m, value=r5, **kw) for m in STOCH]
            rows += [make_row(split="val", metric="IS", value=is_v, **kw),
                     make_row(split="val", metric="SNIS", value=snis_v, **kw)]
    frame = to_frame(rows)
    frame.to_csv(run / "results" / "rows.csv", index=False)
    (run / "config.yaml").write_text("name: tiny\nseeds: [0, 1]\nselection: {criterion: IS}\n")

    def no_second_selection(*a, **k):
        raise AssertionError("the report selected a second time")
    monkeypatch.setattr(B, "select_run", no_second_selection)
    out = select_and_report(RunDir(run), "SNIS", B.read_rows(run / "results" / "rows.csv"), print)
    assert out == run / "report"
    assert "Selection criterion: **SNIS**" in (out / "index.md").read_text()
    res = pd.read_csv(run / "results" / "selection.csv")
    assert set(res["selection"]) == {"snis", "oracle"} and set(res[res["selection"] == "snis"]["p"]) == {10}
    assert set(res["criterion"]) == {"SNIS"} and not (out / "selection.csv").exists()
    assert "[selection.csv](../results/selection.csv)" in (out / "index.md").read_text()


@pytest.mark.slow
def test_figures_drawn_by_worker_processes_equal_those_drawn_in_one(one_process_report, tmp_path, monkeypatch):
    """POXM_REPORT_PROCS=2: the figures and each dataset's tables come from a pool of spawned
    processes; the report (index.md, every PNG and table file byte for byte) is the one built in this
    process (one_process_report, from the same rows), in the same order."""
    from orchestration.report import figure_pool
    monkeypatch.setattr(figure_pool, "MIN_FIGURES", 1)
    pools = [one_process_report[2]]
    init = figure_pool.FigurePool.__init__

    def spy(self, *a, **kw):
        init(self, *a, **kw)
        pools.append(self)
    monkeypatch.setattr(figure_pool.FigurePool, "__init__", spy)
    monkeypatch.setenv(figure_pool.ENV, "2")
    reports = {}
    for procs, out in (("1", one_process_report[1]), ("2", build_report(_run_dir(tmp_path / "2")))):
        reports[procs] = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*")
                          if p.is_file() and p.suffix in (".md", ".png", ".csv", ".tex")}
    one, two = reports["1"], reports["2"]
    assert pools[0].drawn_by_pool == 0 and pools[1].drawn_by_pool >= 7     # drawn here, then by the pool
    assert sorted(one) == sorted(two) and sum(k.endswith(".png") for k in one) >= 7
    assert sum(k.startswith("tables/results_") for k in one) >= 3        # the datasets' tables, from the pool too
    assert [k for k in one if one[k] != two[k]] == []


def test_report_procs_setting():
    from orchestration.report.figure_pool import FigurePool, report_procs
    assert report_procs({"POXM_REPORT_PROCS": "3"}) == 3
    assert 1 <= report_procs({}) <= 8
    for bad in ("0", "two"):
        with pytest.raises(PoxmInputError, match="POXM_REPORT_PROCS"):
            report_procs({"POXM_REPORT_PROCS": bad})
    with FigurePool(expected=2, procs=4) as pool:       # too few figures for a pool: drawn here, in order
        assert pool.pool is None
        calls = []
        r = [pool.submit(calls.append, i) for i in range(2)]
        assert calls == [] and [x.result() for x in r] == [None, None] and calls == [0, 1]


def _exit_in_a_worker(parent_pid: int) -> str:
    import os
    if os.getpid() != parent_pid:
        os._exit(3)            # a worker killed mid-figure (out of memory, a signal)
    return "drawn here"


@pytest.mark.slow
def test_a_broken_figure_pool_falls_back_to_this_process(capsys):
    import os

    from orchestration.report.figure_pool import FigurePool
    with FigurePool(expected=8, procs=2) as pool:
        assert pool.pool is not None
        out = [pool.submit(_exit_in_a_worker, os.getpid()) for _ in range(3)]
        assert [r.result() for r in out] == ["drawn here"] * 3
    assert pool.drawn_by_pool == 0
    assert capsys.readouterr().err.count("figure processes stopped") == 1


def _pid() -> int:
    import os
    return os.getpid()


@pytest.mark.slow
def test_prestarted_drawing_processes_are_taken_by_the_next_pool_once():
    """prestart: the processes start before the report; the report's pool takes them (whatever the
    number of figures), the next pool does not find them again, and discard_prestarted shuts down
    processes no report took."""
    import os

    from orchestration.report import figure_pool as fp
    assert fp.prestart(procs=1) is False and fp._prestarted is None      # one process: nothing to start
    assert fp.prestart(procs=2) is True
    started = fp._prestarted
    assert fp.prestart(procs=2) is False and fp._prestarted is started  # not twice
    with fp.FigurePool(expected=2, procs=2) as pool:     # too few figures to start a pool, but one is there
        assert pool.pool is started and fp._prestarted is None
        pids = {f.result() for f in [pool.submit(_pid) for _ in range(4)]}
        assert os.getpid() not in pids and pool.drawn_by_pool == 4
    with fp.FigurePool(expected=2, procs=2) as pool:
        assert pool.pool is None                          # taken once
    assert fp.prestart(procs=2) is True
    fp.discard_prestarted()
    assert fp._prestarted is None


def test_spearman_matches_scipy_with_ties_constants_and_missing():
    """The report's own Spearman (no p-value: thousands of calls a report) against scipy's statistic."""
    import warnings

    from scipy.stats import spearmanr

    from orchestration.report.spearman import _spearman
    rng = np.random.default_rng(7)
    for trial in range(400):
        n = int(rng.integers(3, 40))
        x = rng.integers(0, 6, n).astype(float) if trial % 2 else rng.normal(size=n)   # ties on odd trials
        y = rng.integers(0, 4, n).astype(float) if trial % 3 == 0 else rng.normal(size=n)
        if trial % 7 == 0:
            x[rng.integers(0, n)] = np.nan
        if trial % 11 == 0:
            y[:] = 1.0                                   # constant: no rank correlation
        ok = np.isfinite(x) & np.isfinite(y)
        rho, m = _spearman(x, y)
        assert m == int(ok.sum())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = spearmanr(x[ok], y[ok]).statistic
        if np.isnan(want) or m < 3:      # fewer than 3 points: no correlation reported (by design)
            assert np.isnan(rho)
        else:
            assert rho == pytest.approx(float(want), abs=1e-12)


def test_bootstrap_cis_on_threads_equal_one_call_per_group(monkeypatch):
    """Many cells of one length: their chunks go to threads, and each cell still gets its own
    bootstrap_ci, digit for digit."""
    import orchestration.report.aggregate as A
    monkeypatch.setattr(A, "_BOOT_THREADS", 4)
    rng = np.random.default_rng(5)
    groups = [rng.normal(size=5) for _ in range(3 * A._CHUNK_CELLS + 7)]      # 4 chunks of one length
    lo, hi = A.bootstrap_cis(groups)
    assert [(a, b) for a, b in zip(lo, hi)] == [A.bootstrap_ci(g) for g in groups]


def test_bootstrap_cis_equal_one_call_per_group():
    """Groups resampled together give each group's own bootstrap_ci, digit for digit."""
    from orchestration.report.aggregate import bootstrap_ci, bootstrap_cis
    rng = np.random.default_rng(3)
    groups = [rng.normal(size=int(n)) for n in rng.integers(0, 12, 150)]
    lo, hi = bootstrap_cis(groups)
    for g, a, b in zip(groups, lo, hi):
        want = bootstrap_ci(g)
        if len(g) < 2:
            assert np.isnan(a) and np.isnan(b) and all(np.isnan(w) for w in want)
        else:
            assert (a, b) == want
