"""The tuning-budget table's test-best (oracle) shares on an edge beside the honest ones, and the methods
whose test-best choice sits on an edge for more than a quarter of their choices, on hand-made rows."""
from __future__ import annotations

import pytest

from orchestration.report.grid_edges import (EDGE_COLUMNS, grid_edges, grid_edges_table, oracle_on_edge,
                                             wide_grid)
from orchestration.selection import ORACLE, select
from poxm_core.common.results import make_row, to_frame

# per seed: POXM's test-best (p, λ) on the grid p {10, 20, 50} × λ {0.8, 0.9, 1.0}; IS always picks (20, 0.9)
POXM_BEST = [(50, 1.0), (50, 0.9), (20, 1.0), (20, 0.9)]
# BanditNet (λ only, {0.8, 0.9, 1.0}): test-best 0.8 once of four, IS picks 1.0 every time
BANDITNET_BEST = [0.8, 0.9, 0.9, 0.9]


def _head(method, seed, p, lam, r5, is_value):
    kw = dict(dataset="d", variant="A", method=method, p=p, lam=lam, seed=seed, epoch=2, final=True)
    return [make_row(split="test", metric="R@5", value=r5, **kw), make_row(split="val", metric="IS", value=is_value, **kw)]


def _rows():
    rows = []
    for s in range(4):
        for p in (10, 20, 50):
            for lam in (0.8, 0.9, 1.0):
                rows += _head("poxm", s, p, lam, 0.5 if (p, lam) == POXM_BEST[s] else 0.3,
                              2.0 if (p, lam) == (20, 0.9) else 1.0)
        for lam in (0.8, 0.9, 1.0):
            rows += _head("banditnet", s, None, lam, 0.5 if lam == BANDITNET_BEST[s] else 0.3, 2.0 if lam == 1.0 else 1.0)
        rows += _head("logging", s, None, None, 0.2, 0.1)
    return to_frame(rows)


def test_oracle_shares_beside_the_honest_ones():
    rows = _rows()
    sel = select(rows, "IS")
    honest, oracle = grid_edges(rows, sel, "IS"), grid_edges(rows, sel, ORACLE)
    assert list(oracle.columns) == EDGE_COLUMNS and set(oracle["method"]) == {"poxm", "banditnet"}
    h, o = honest.set_index("method").loc["poxm"], oracle.set_index("method").loc["poxm"]
    assert (h["p_edge"], h["lam_edge"], h["any_edge"]) == (0.0, 0.0, 0.0)          # (20, 0.9): interior
    # test-best: p 50 twice (largest), λ 1.0 twice (largest); on an edge: seeds 0, 1, 2 (3 of 4)
    assert (o["p_high"], o["p_low"], o["lam_high"], o["lam_low"]) == (0.5, 0.0, 0.5, 0.0)
    assert (o["p_edge"], o["lam_edge"], o["any_edge"]) == (0.5, 0.5, 0.75)
    b = oracle.set_index("method").loc["banditnet"]
    assert (b["lam_low"], b["lam_high"], b["any_edge"]) == (0.25, 0.0, 0.25)
    assert honest.set_index("method").loc["banditnet", "lam_high"] == 1.0         # IS: always λ = 1.0
    t = grid_edges_table([honest, oracle], ["IS"])
    assert t.columns[-3:] == ["test-best (oracle): p on an edge", "test-best (oracle): λ on an edge",
                              "test-best (oracle): either"]
    by = {r[0]: r for r in t.rows}
    assert by["POXM"][4:] == ["0 %", "0 %", "0 %", "50 %", "50 %", "75 %"]
    assert by["BanditNet"][4:] == ["—", "100 %", "100 %", "—", "25 %", "25 %"]
    assert any(n.startswith("test-best (oracle)") for n in t.notes)
    assert "Searched less than the published wide grid: BanditNet, POXM." in t.notes
    # without the oracle's frame: the honest columns only, as before
    assert len(grid_edges_table([honest], ["IS"]).columns) == 7


def test_methods_whose_test_best_choice_sits_on_an_edge():
    rows = _rows()
    oracle = grid_edges(rows, select(rows, "IS"), ORACLE)
    named = oracle_on_edge(oracle)
    # POXM 75 % > 25 %; BanditNet exactly 25 % is not more than a quarter
    assert [n["method"] for n in named] == ["poxm"] and named[0]["share"] == pytest.approx(0.75)
    assert named[0]["reason"] == ("its test-best choice sat on an edge of the grid for 75 % of its choices (p at the "
                                  "largest value searched (50) for 50 %, λ at the largest value searched (1) for 50 % "
                                  "of them)")
    assert [n["method"] for n in oracle_on_edge(oracle, share=0.2)] == ["banditnet", "poxm"]
    b = oracle_on_edge(oracle, share=0.2)[0]["reason"]
    assert "λ at the smallest value searched (0.8) for 25 %" in b


def test_wide_grid_is_the_published_one():
    assert wide_grid("2 5 10 20 50 100", "0.5 0.7 0.8 0.9 1 1.2 1.5") and wide_grid("", "0.5 0.7 0.8 0.9 1 1.2 1.5")
    assert not wide_grid("10 20 50 100", "0.7 0.8 0.9 1")
