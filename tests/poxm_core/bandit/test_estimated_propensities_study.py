"""studies/estimated_propensities.py: the loss table of two runs, on hand-made result rows."""
from __future__ import annotations

import pandas as pd
import pytest

from poxm_core.common.results import make_row, to_frame
from studies.estimated_propensities import loss_table, pivot_markdown


def _rows(points) -> pd.DataFrame:
    """points: (seed, p, IS on validation, test R@5) of method poxm (lam 0.9)."""
    rows = []
    for seed, p, val, test in points:
        for split, metric, v in (("val", "IS", val), ("val", "SNIS", val), ("test", "R@5", test)):
            rows.append(make_row(dataset="d", variant="P", method="poxm", p=p, lam=0.9, seed=seed, split=split,
                                 metric=metric, value=v, final=True))
    return to_frame(rows)


def test_loss_table_by_hand():
    # recorded: seed 0 picks p=10 (test .30), seed 1 picks p=50 (.20); estimated: p=50 (.25), p=50 (.22)
    rec = _rows([(0, 10, 0.9, 0.30), (0, 50, 0.8, 0.25), (1, 10, 0.5, 0.10), (1, 50, 0.6, 0.20)])
    est = _rows([(0, 10, 0.7, 0.30), (0, 50, 0.8, 0.25), (1, 10, 0.5, 0.12), (1, 50, 0.6, 0.22)])
    t = loss_table(rec, est).set_index("criterion")
    r = t.loc["IS"]
    assert r["seeds"] == 2 and r["recorded"] == pytest.approx(25.0) and r["estimated"] == pytest.approx(23.5)
    assert r["diff"] == pytest.approx(-1.5) and r["diff_sd"] == pytest.approx(pd.Series([-5.0, 2.0]).std())
    assert r["same_point"] == pytest.approx(0.5)
    o = t.loc["oracle (test)"]                        # best on test: .30 and .20 recorded, .30 and .22 estimated
    assert o["diff"] == pytest.approx(1.0) and o["same_point"] == pytest.approx(1.0)
    assert list(t.index) == ["IS", "SNIS", "oracle (test)"]
    assert "| poxm | -1.50 | -1.50 | +1.00 |" in pivot_markdown(t.reset_index())
