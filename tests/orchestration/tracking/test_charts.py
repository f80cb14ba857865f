"""The chart view `poxm ui` opens on (tracking/charts.py): the selection's estimate first, every metric of
the sweep in the section of its prefix (no second 'val' or 'test' of MLflow's own beside the renamed
ones), curves for per-epoch metrics and bars for final ones, units in the headers; the metrics read
from the store's tables."""
from __future__ import annotations

import sqlite3

from orchestration.tracking.charts import chart_view, default_keys, store_keys
from orchestration.tracking.ui import view_state

KEYS = {"train/loss": 6, "train/gpu_memory_estimate_mb": 0, "val/IS": 6, "val/SNIS": 6, "val/SNIS-LB": 6,
        "val/ESS": 6, "val/DR": 5, "test/R_at_5": 0, "test/truncated_mass": 0, "val_truth/V_true": 5,
        "time/extra": 0}


def test_every_metric_in_the_section_of_its_prefix_selection_first():
    sections, charts = chart_view("SNIS", 5, KEYS)
    names = [s["name"] for s in sections]
    assert names == ["selection: val/SNIS against p (reward per slate, 0–5)", "train",
                     "val: per epoch (reward per slate, 0–5; ESS in instances)",
                     "test: ×100 (R_at_5 = 23.40 is 23.40 %)", "val_truth", "time", "Model metrics", "System metrics"]
    unfolded = {s["name"].split(":")[0] for s in sections if s["display"]}
    assert unfolded == {"selection", "train", "val", "time"}                 # test and MLflow's own: folded
    by_uuid = {s["uuid"]: s["name"].split(":")[0] for s in sections}
    place = {c.get("metricKey"): (by_uuid[c["metricSectionId"]], c["type"]) for c in charts if c["type"] != "SCATTER"}
    assert place.pop("val/SNIS") == ("selection", "LINE")                    # the criterion's curve, once
    assert place == {"train/loss": ("train", "LINE"), "train/gpu_memory_estimate_mb": ("train", "BAR"),
                     "val/IS": ("val", "LINE"), "val/SNIS-LB": ("val", "LINE"), "val/ESS": ("val", "LINE"),
                     "val/DR": ("val", "LINE"), "test/R_at_5": ("test", "BAR"), "test/truncated_mass": ("test", "BAR"),
                     "val_truth/V_true": ("val_truth", "LINE"), "time/extra": ("time", "BAR")}
    scatter = charts[0]
    assert scatter["type"] == "SCATTER" and scatter["xaxis"] == {"key": "p", "type": "PARAM"}
    assert scatter["yaxis"] == {"key": "val/SNIS", "type": "METRIC"} and by_uuid[scatter["metricSectionId"]] == "selection"
    assert len({c["uuid"] for c in charts}) == len(charts)


def test_without_the_store_the_sweep_metrics_a_sweep_logs():
    keys = default_keys("IS")
    assert keys["train/loss"] == 1 and keys["val/IS_se"] == 1 and keys["test/R_at_5"] == 0
    state = view_state("p", "IS", 1, 5)               # the runs page keeps this order of sections
    assert state["isAccordionReordered"] and state["compareRunSections"][0]["name"].startswith("selection")


def test_store_keys_read_the_experiment_only(tmp_path):
    db = tmp_path / "mlflow.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE runs (run_uuid TEXT, experiment_id INTEGER)")
    con.execute("CREATE TABLE latest_metrics (key TEXT, value REAL, step INTEGER, run_uuid TEXT)")
    con.executemany("INSERT INTO runs VALUES (?, ?)", [("a", 1), ("b", 1), ("c", 2)])
    con.executemany("INSERT INTO latest_metrics VALUES (?, 0, ?, ?)",
                    [("val/IS", 3, "a"), ("val/IS", 5, "b"), ("test/R_at_5", 0, "a"), ("other", 2, "c")])
    con.commit()
    con.close()
    assert store_keys(db, "1") == {"val/IS": 5, "test/R_at_5": 0}
    (tmp_path / "bad.db").write_text("not a database")
    assert store_keys(tmp_path / "bad.db", "1") is None and store_keys(tmp_path / "none.db", "1") is None
