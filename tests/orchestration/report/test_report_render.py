"""The report renders everywhere (MLflow's sandboxed frame included) and its aggregates: bootstrap
interval over seeds, bold rules, counts, error-bar captions, the estimator caption read from the data,
a self-contained index.html; and, where Debian's chromium is installed, the page rendered headless."""
from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from scipy.stats import bootstrap

from orchestration.report.accuracy_figure import bias_trend, target_note
from orchestration.report.aggregate import bootstrap_ci, expected_from_grid, seed_stats
from orchestration.report.figure_common import spread_note
from orchestration.report.index import render_html
from orchestration.report.logging_table import logging_stats_table
from orchestration.report.tables import metric_table
from orchestration.selection import select, selected_rows
from poxm_core.common.results import make_row, to_frame


# ---- bootstrap interval over seeds --------------------------------------------------------------

def test_bootstrap_ci_hand_values():
    assert all(math.isnan(v) for v in bootstrap_ci([0.3]))          # one seed: no interval
    assert all(math.isnan(v) for v in bootstrap_ci([0.3, math.nan]))
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)
    # 3 seeds: 27 equally likely resamples; the all-1 and all-6 resamples have 1/27 = 3.7 % > 2.5 %
    # each, so the percentile interval is exactly [min, max]
    assert bootstrap_ci([1.0, 2.0, 6.0]) == (1.0, 6.0)
    assert bootstrap_ci([1.0, 2.0, 6.0], seed=0) == bootstrap_ci([1.0, 2.0, 6.0], seed=0)   # seeded


def test_bootstrap_ci_agrees_with_scipy_percentile_bootstrap():
    v = np.random.default_rng(4).normal(0.4, 0.05, size=25)
    lo, hi = bootstrap_ci(v)
    ref = bootstrap((v,), np.mean, method="percentile", n_resamples=20000, random_state=1).confidence_interval
    assert lo == pytest.approx(ref.low, abs=0.003) and hi == pytest.approx(ref.high, abs=0.003)
    assert lo < v.mean() < hi


# ---- tables -------------------------------------------------------------------------------------

def _rows(values: dict[str, list[float]]):
    rows = []
    for m, vals in values.items():
        for s, v in enumerate(vals):
            kw = dict(dataset="d", variant="A", method=m, p=None, lam=None, seed=s, epoch=2, final=True)
            rows += [make_row(split="test", metric=k, value=v, **kw) for k in ("R@3", "R@5")]
    df = to_frame(rows)
    exp = expected_from_grid([{"dataset": "d", "variant": "A", "method": m, "p": -1, "lam": None, "seed": s}
                              for m, vals in values.items() for s in range(len(vals))])
    sel = select(df)
    return seed_stats(selected_rows(df, sel)), exp, sel


def _bold_methods(t) -> set[str]:
    return {t.rows[i][0] for i, j in t.bold if j == 2}   # column 2 = R@5


def test_logging_policy_never_bold_and_trained_ties_all_bold():
    # logging ties poxm: only poxm (trained) is bold; banditnet ties poxm: both bold
    stats, exp, sel = _rows({"logging": [0.4], "poxm": [0.4], "banditnet": [0.4], "dm": [0.1]})
    assert _bold_methods(metric_table("results", "d", "A", stats, exp, sel)) == {"POXM", "BanditNet"}
    # logging above every trained method: the best trained one is bold, logging is not
    stats, exp, sel = _rows({"logging": [0.6], "poxm": [0.4], "dm": [0.1]})
    t = metric_table("results", "d", "A", stats, exp, sel)
    assert _bold_methods(t) == {"POXM"}
    assert "never bold" in t.notes[0] and "one seed" in t.notes[0]     # one seed: no interval promised
    # the CSV carries the interval; with three seeds it is exactly [min, max] (see above)
    stats, exp, sel = _rows({"poxm": [0.4, 0.5, 0.9]})
    rec = metric_table("results", "d", "A", stats, exp, sel).frame.set_index("method").loc["poxm"]
    assert (rec["R@5_ci_lo"], rec["R@5_ci_hi"]) == pytest.approx((40.0, 90.0))
    assert rec["p"] == "—" and rec["lam"] == "—"


def test_logging_table_prints_counts_as_integers():
    prep = pd.DataFrame([{"dataset": "d", "variant": "A", "seed": s, "metric": m, "value": v}
                         for s in (0, 1) for m, v in (("data/n_train", 20000.0), ("data/avg_labels", 5.37),
                                                      ("logging_policy/R@5", 0.2 + 0.01 * s))])
    t = logging_stats_table("d", prep)
    cells = {r[0]: r[1] for r in t.rows}
    assert cells["data/n_train"] == "20000"
    assert cells["data/avg_labels"] == "5.37 ± 0.00"
    assert cells["logging_policy/R@5"] == "20.50 ± 0.71"


# ---- figure captions ----------------------------------------------------------------------------

def test_spread_note_promises_bars_only_with_two_samples():
    assert spread_note([1, 1]) == "One seed per point: no error bars."
    assert spread_note([1, 3, 3]).startswith("n = 1–3 seeds per point; error bars/bands: ±1 std where n ≥ 2")
    assert spread_note([]) == "One seed per point: no error bars."


def test_estimator_caption_reads_the_bias_direction_from_the_data():
    data = pd.DataFrame({"estimator": ["IS", "IS", "sIS", "sIS", "PIS"], "p": [5, 50, 5, 50, 5],
                         "bias": [0.1, 0.4, -0.3, 0.1, 0.0], "sd": 0.0, "rmse": 0.0, "n": 2})
    txt = bias_trend(data, ["IS", "sIS", "PIS"])
    assert txt == "Bias at p = 5 → 50: IS +0.10 → +0.40, sIS -0.30 → +0.10. "
    assert "PIS" not in txt   # one p only: no trend claimed
    other = pd.concat([data, pd.DataFrame({"estimator": ["PIS"], "p": [20], "bias": [0.2], "sd": 0.0,
                                           "rmse": 0.0, "n": 2})])
    assert "PIS +0.00 (p = 5) → +0.20 (p = 20)" in bias_trend(other, ["IS", "sIS", "PIS"])  # spans differ
    same = data.assign(bias=[0.1, 0.4, 0.1, 0.4, 0.0])
    assert bias_trend(same, ["IS", "sIS"]) == "Bias at p = 5 → 50: IS = sIS +0.10 → +0.40. "   # equal: named together
    note = target_note(["IS", "sIS", "PIS"])
    assert note == "IS, sIS target a prefix-from-ρ slate, not V_true; PIS targets V_true. "


# ---- self-contained HTML ------------------------------------------------------------------------

def _png(path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1])
    fig.savefig(path)
    plt.close(fig)


def test_index_html_embeds_figures_and_has_no_links(tmp_path):
    (tmp_path / "figures").mkdir()
    _png(tmp_path / "figures" / "f.png")
    blocks = [("h1", "r"), ("links", [("CSV", "tables/t.csv")]),
              ("figure", "figures/f.png", "F", "cap", [("PNG", "figures/f.png"), ("PDF", "figures/f.pdf")])]
    html = render_html(blocks, "t", tmp_path)
    assert html.count('src="data:image/png;base64,iVBORw0KGgo') == 1   # the PNG signature, base64
    assert "<a " not in html and "href" not in html and "<code>tables/t.csv</code>" in html


CHROMIUM = shutil.which("chromium")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_chromium_renders_the_tables_and_figures(tmp_path):
    (tmp_path / "figures").mkdir()
    _png(tmp_path / "figures" / "f.png")
    stats, exp, sel = _rows({"logging": [0.4, 0.41], "poxm": [0.45, 0.47]})
    t = metric_table("results", "d", "A", stats, exp, sel)
    page = tmp_path / "index.html"
    page.write_text(render_html([("h1", "r"), ("table", t), ("figure", "figures/f.png", "F", "cap", [])], "t", tmp_path))
    (tmp_path / "figures" / "f.png").unlink()   # the page must not need the file any more
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    dom = out.stdout
    assert "46.00 ± 1.41" in dom and "[45.00, 47.00]" not in dom and "Logging policy" in dom and "data:image/png;base64" in dom
