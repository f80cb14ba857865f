"""A report true to its run: only the methods the sweep ran are rows; captions say "one seed" where
there is one; no interval below 3 seeds (the claims' rule); the robustness figure's star hides no
point; `poxm report` prints the headline `poxm run` prints."""
from __future__ import annotations

import argparse
import math

import pandas as pd

from orchestration.report import figures as F
from orchestration.report.aggregate import expected_from_rows, seed_stats
from orchestration.report.tables import headline_table, method_list, metric_table, selection_table
from orchestration.selection import select, selected_rows
from poxm_core.common.results import make_row, to_frame


def _rows(seeds, methods=("logging", "poxm")):
    """logging (no grid) and poxm at p in (10, 20), λ 0.9; IS picks p = 10; test R@5 and R@3."""
    out = []
    for s in seeds:
        for m in methods:
            pts = [(None, None, 0.05 + 0.01 * s, None)] if m == "logging" else \
                  [(10, 0.9, 0.10 + 0.01 * s, 1.0), (20, 0.9, 0.30, 0.5)]
            for p, lam, r, val in pts:
                kw = dict(dataset="d", variant="A", method=m, p=p, lam=lam, seed=s, epoch=2, final=True)
                out += [make_row(split="test", metric=k, value=r, **kw) for k in ("R@5", "R@3")]
                if val is not None:
                    out += [make_row(split="val", metric=c, value=val, **kw) for c in ("IS", "SNIS")]
    return to_frame(out)


def _tables(seeds):
    df = _rows(seeds)
    sel = select(df, "IS")
    stats = seed_stats(selected_rows(df, sel, "is"))
    exp = expected_from_rows(df)
    return (metric_table("results", "d", "A", stats, exp, sel, criterion="IS"),
            headline_table("d", ["A"], stats, exp, "IS"), selection_table("d", "A", sel, exp, criterion="IS"))


def test_only_the_methods_the_sweep_ran_are_rows():
    assert method_list(["poxm", "zeta", "logging"]) == ["logging", "poxm", "zeta"]
    results, head, _ = _tables([0])
    for t in (results, head):
        assert [r[0] for r in t.rows] == ["Logging policy", "POXM"]      # no BanditNet, DM, skyline rows of "—"
        assert set(t.frame["method"]) == {"logging", "poxm"}


def test_a_method_the_sweep_expects_but_has_no_result_stays_as_missing():
    df = _rows([0])
    sel = select(df, "IS")
    stats = seed_stats(selected_rows(df, sel, "is"))
    exp = pd.concat([expected_from_rows(df), pd.DataFrame([{"dataset": "d", "variant": "A", "method": "dm",
                                                            "seed": 0}])], ignore_index=True)
    t = headline_table("d", ["A"], stats, exp, "IS")
    assert [r[0] for r in t.rows] == ["Logging policy", "Direct Method", "POXM"]
    assert t.rows[1][1] == "—"


def test_captions_at_one_seed_promise_no_std_and_no_interval():
    for t in _tables([0]):
        note = t.notes[0]
        assert "one seed" in note and "±" not in note and "bootstrap" not in note, note
        assert all("±" not in c and "[" not in c for r in t.rows for c in r[1:])


def test_two_seeds_show_mean_and_std_but_no_interval():
    results, head, sel = _tables([0, 1])
    poxm = next(r for r in results.rows if r[0] == "POXM")
    assert poxm[1] == "10.50 ± 0.71" and "[" not in " ".join(poxm)
    assert "over 2 seeds" in results.notes[0] and "no interval below 3 seeds" in results.notes[0]
    assert "bootstrap" not in results.notes[0]
    assert results.frame["R@5_ci_lo"].isna().all() and results.frame["R@5_ci_hi"].isna().all()
    assert "over 2 seeds" in head.notes[0] and "intervals: the results tables" not in head.notes[0]
    assert "over 2 seeds" in sel.notes[0]


def test_three_seeds_show_the_interval():
    results, head, _ = _tables([0, 1, 2])
    poxm = next(r for r in results.rows if r[0] == "POXM")
    assert poxm[1].startswith("11.00 ± 1.00 [")
    assert "bootstrap 95 % interval" in results.notes[0] and "over 3 seeds" in results.notes[0]
    assert results.frame["R@5_ci_lo"].notna().all()
    assert "intervals: the results tables below" in head.notes[0]


def test_the_selected_point_stays_visible_under_its_star(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(F, "save", lambda fig, out_dir, name: drawn.append(fig) or (tmp_path / f"{name}.png",))
    df = _rows([0])
    sel = select(df, "IS")
    fig = F.robustness_figure(df, sel, pd.DataFrame(columns=["dataset", "variant", "seed", "metric", "value"]),
                              "d", tmp_path)
    assert fig is not None and "Hollow star" in fig.caption
    for ax in drawn[0].axes[1:3]:
        stars = [ln for ln in ax.get_lines() if ln.get_marker() == "*"]
        points = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
        assert len(stars) == 1 and points
        star = stars[0]
        assert star.get_markerfacecolor() == "none"                     # hollow: what is under it shows
        x, y = star.get_xdata()[0], star.get_ydata()[0]
        assert any(math.isclose(px, x) and math.isclose(py, y)
                   for ln in points for px, py in zip(ln.get_xdata(), ln.get_ydata()))


def test_poxm_report_prints_the_headline_poxm_run_prints(tmp_path, monkeypatch, capsys):
    from orchestration import cli
    from orchestration.stages import sweep
    (tmp_path / "results").mkdir()
    pd.DataFrame([{"dataset": "d", "variant": "A", "method": m, "seed": 0, "selection": "is", "criterion": "IS",
                   "test_R@5": r} for m, r in (("logging", 0.1), ("poxm", 0.25))]).to_csv(
        tmp_path / "results" / "selection.csv", index=False)
    monkeypatch.setattr(sweep, "plan_from_run_dir", lambda d: None)
    monkeypatch.setattr(sweep, "report_only", lambda plan, log_mlflow=True: tmp_path / "report")
    assert cli.cmd_report(argparse.Namespace(run_dir=[str(tmp_path)], out=None, no_mlflow=True)) == 0
    out = capsys.readouterr().out
    assert cli.headline(tmp_path) in out and "POXM" in out


def test_gap_share_caption_at_one_seed_promises_no_range():
    from orchestration.report.gap_share import GAP_COLUMNS, gap_table

    def frame(n):
        row = {c: None for c in GAP_COLUMNS}
        row.update(dataset="d", variant="A", method="poxm", share=0.5, share_min=0.4, share_max=0.6, n=n,
                   skyline="skyline_e2e")
        return pd.DataFrame([row])
    assert "at one seed" in gap_table(frame(1)).notes[0] and "[min, max]" not in gap_table(frame(1)).notes[0]
    assert "[min, max]" in gap_table(frame(3)).notes[0]


def test_claims_sentence_below_three_seeds_promises_no_interval(tmp_path):
    from orchestration.report.blocks import claims_blocks as _claims_blocks
    from orchestration.report.claims import CLAIM_COLUMNS

    def blocks(n):
        row = {c: None for c in CLAIM_COLUMNS}
        row.update(criterion="IS", dataset="d", variant="A", claim="poxm_vs_logging", claim_text="POXM > logging",
                   source="paper", metric="R@5", diff=1.0, n=n, ci_lo=0.5, ci_hi=1.5, p_holm=0.01,
                   verdict="too few seeds" if n < 3 else "holds", signs=f"{n}/{n}")
        return _claims_blocks(pd.DataFrame([row]), ["IS"], tmp_path, tmp_path, None)[0][1]
    assert "no interval and no verdict below 3 seeds" in blocks(2) and "95 % interval" not in blocks(2)
    assert "95 % interval" in blocks(10)
