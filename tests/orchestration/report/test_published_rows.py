"""A published folder keeps the final rows its tables read (orchestration.report.instances.kept_rows): every
validation row, test R@5 at every grid point, every test row of a selected head; a report built from those
equals the one built from every row."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from orchestration.report import instances as I
from orchestration.report.build import build_report
from orchestration.report.instances import as_published, kept_rows, read_rows
from orchestration.selection import select_run
from poxm_core.common.results import make_row, to_frame

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "docs" / "results"
TEST_METRICS = [f"{m}@{k}" for m in ("R", "P", "nDCR", "nDCG", "PSR", "PSP") for k in (1, 3, 5)] + ["truncated_mass"]
VAL = ["IS", "sIS", "SNIS", "SNIS-LB", "PIS", "DR", "ESS"]
SEEDS = (0, 1, 2, 3)
PL = [(p, lam) for p in (2, 5, 10) for lam in (0.5, 1.0)]
GRIDS = {"logging": [(None, None)], "dm": [(None, None)], "skyline": [(None, None)],
         "banditnet": [(None, lam) for lam in (0.5, 1.0, 1.5)], "poxm": PL, "wpoxm": PL,
         "dr_poxm": [(p, None) for p in (2, 5, 10)]}
CONFIG = {"name": "toy-run", "seeds": list(SEEDS), "methods": list(GRIDS),
          "datasets": [{"name": "toy", "variants": [{"name": "A", "alpha": 0.2, "beta": 0.0, "T": 2},
                                                    {"name": "B", "alpha": 0.2, "beta": 0.0, "T": 8}]}]}


def _rows() -> pd.DataFrame:
    """Every final row of a small run: random values (4 decimals), so that IS, SNIS and test R@5 choose
    different heads."""
    rng = np.random.default_rng(7)
    out = []
    for v in ("A", "B"):
        for s in SEEDS:
            for m, grid in GRIDS.items():
                for p, lam in grid:
                    kw = dict(dataset="toy", variant=v, method=m, p=p, lam=lam, seed=s, epoch=3, final=True)
                    out += [make_row(split="val", metric=e, value=round(rng.uniform(0.1, 2), 4), **kw) for e in VAL]
                    out.append(make_row(split="val_truth", metric="V_true", value=round(rng.uniform(0.1, 2), 4), **kw))
                    out += [make_row(split="test", metric=t, value=round(rng.uniform(0.05, 0.6), 4), **kw)
                            for t in TEST_METRICS]
    return to_frame(out)


def _keys(frame: pd.DataFrame) -> pd.Series:
    """Each row's grid point as one string (a NaN λ as 'nan'), aligned with `frame`."""
    pts = I._points(frame)
    return pd.Series(["|".join(map(repr, pt)) for pt in zip(*(pts[c].tolist() for c in pts.columns))],
                     index=frame.index, dtype=object)


def _point_set(frame: pd.DataFrame) -> set[str]:
    return set(_keys(frame))


def test_kept_rows_keep_validation_selected_heads_and_r5_and_drop_the_rest():
    rows = as_published(_rows())
    sel = select_run(rows, "IS").frame()
    assert set(sel["selection"]) == {"is", "oracle", "snis"}
    kept = kept_rows(rows, sel)
    assert list(kept.columns) == list(rows.columns) and kept.index.is_monotonic_increasing     # the rows' order
    # every row outside split 'test', and test R@5 at every grid point
    for split in ("val", "val_truth"):
        assert len(kept[kept["split"] == split]) == len(rows[rows["split"] == split])
    r5 = (rows["split"] == "test") & (rows["metric"] == "R@5")
    assert len(kept[(kept["split"] == "test") & (kept["metric"] == "R@5")]) == int(r5.sum())
    # every test row of every head a selection chose (each label: the criterion's, the paper's, the oracle's)
    test = rows[rows["split"] == "test"]
    for label in ("is", "snis", "oracle"):
        heads = _point_set(sel[sel["selection"] == label])
        at = test[_keys(test).isin(heads)]
        assert len(at) == len(heads) * len(TEST_METRICS)
        assert at.index.isin(kept.index).all(), label
    # at a grid point no selection chose, test P@5 (which no table reads there) is dropped
    chosen = _point_set(sel)
    free = [pt for pt in _point_set(rows) if pt not in chosen]
    assert len(free) > 50
    kept_free = kept[~_keys(kept).isin(chosen)]
    assert set(kept_free[kept_free["split"] == "test"]["metric"]) == {"R@5"}
    assert len(kept) == len(rows) - len(free) * (len(TEST_METRICS) - 1)     # nothing else dropped
    # as_published with the criterion: the same rows, selected on the rows as rounded
    assert as_published(_rows(), "IS").equals(kept.reset_index(drop=True))


def test_a_point_with_nothing_else_kept_keeps_its_rows():
    rows = as_published(_rows())
    sel = select_run(rows, "IS").frame()
    # a grid point with test rows only (no validation rows, no R@5), chosen by no selection
    lone = rows[(rows["method"] == "poxm") & (rows["p"] == 2) & (rows["lam"] == 0.5) & (rows["seed"] == 0)
                & (rows["variant"] == "A") & (rows["split"] == "test") & (rows["metric"] != "R@5")].assign(p=3)
    kept = kept_rows(pd.concat([rows, lone], ignore_index=True), sel)
    assert len(kept[kept["p"] == 3]) == len(TEST_METRICS) - 1


def test_nothing_to_drop_returns_the_rows():
    rows = as_published(_rows())
    only = rows[rows["split"] != "test"]
    assert kept_rows(only, select_run(rows, "IS").frame()) is only


def _report(tmp: Path, rows: pd.DataFrame) -> Path:
    run = tmp / "toy-run"
    (run / "results").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    rows.to_csv(run / "results" / "rows.csv", index=False)
    pd.DataFrame([{"dataset": "toy", "variant": v, "seed": s, "metric": f"covering@{k}", "value": k / 12}
                  for v in ("A", "B") for s in SEEDS for k in range(1, 11)]).to_csv(run / "results" / "prepare.csv",
                                                                                   index=False)
    return build_report(run)


def _files(report: Path) -> dict[str, bytes]:
    """The report's tables (CSV, Markdown, LaTeX), figures (PNG), selection and index.md, the last with its
    count of the rows it read left out (the one thing that differs)."""
    out = {f.relative_to(report).as_posix(): f.read_bytes() for f in sorted(report.rglob("*"))
           if f.suffix in (".csv", ".md", ".tex", ".png")}
    out["index.md"] = re.sub(rb"\d+ result rows, \d+ final", b"N result rows, N final", out["index.md"])
    out["selection.csv"] = (report.parent / "results" / "selection.csv").read_bytes()
    return out


@pytest.mark.slow       # builds three small reports: about 15 s on 2 cores
def test_a_report_from_the_kept_rows_equals_the_one_from_every_row(tmp_path, monkeypatch):
    every = as_published(_rows())
    kept = as_published(_rows(), "IS")
    assert len(kept) < 0.8 * len(every)
    full, pruned = _files(_report(tmp_path / "full", every)), _files(_report(tmp_path / "kept", kept))
    assert any(k.startswith("tables/spearman_") for k in full) and any(k.startswith("tables/landscape_") for k in full)
    assert sorted(full) == sorted(pruned)
    assert [k for k in full if full[k] != pruned[k]] == []
    # the comparison sees a table or figure that reads more than the rows kept: without test R@5 at every
    # grid point, the rank correlations and the robustness figure change
    monkeypatch.setattr(I, "GRID_TEST_METRICS", ())
    less = _files(_report(tmp_path / "less", as_published(_rows(), "IS")))
    differ = {k for k in full if full[k] != less.get(k)}
    assert {"tables/spearman_toy.csv", "figures/robustness_toy.png"} <= differ


def test_the_published_folders_keep_only_what_their_tables_read():
    """Every published folder with rows and a selection holds no row kept_rows would drop (a folder written
    before the rows were kept to what the tables read would fail here)."""
    folders = [f for f in sorted(RESULTS.iterdir()) if (f / "selection.csv").is_file() and I.row_files(f)
               and not any(p.is_symlink() for p in I.row_files(f))]
    assert RESULTS / "examples-eurlex-partial" in folders
    for f in folders:
        rows = read_rows(f)
        sel = pd.read_csv(f / "selection.csv")
        assert len(kept_rows(rows, sel)) == len(rows), f.name
