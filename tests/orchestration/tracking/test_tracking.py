"""orchestration.tracking.runs without Ray: URIs, run identity, idempotent run creation, closing, the worker logger."""
from __future__ import annotations

import math
import time

import pandas as pd
import pytest

from orchestration.tracking import runs as tracking
from poxm_core.common.errors import PoxmInputError
from poxm_core.common.results import make_row, to_frame


def test_resolve_uri_precedence_and_absolute(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking.resolve_uri(tmp_path) == f"sqlite:///{tmp_path}/mlflow.db"      # 4 slashes: absolute
    assert tracking.resolve_uri(tmp_path, config_uri="http://cfg:1") == "http://cfg:1"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://env:2")
    assert tracking.resolve_uri(tmp_path, config_uri="http://cfg:1") == "http://env:2"
    assert tracking.resolve_uri(tmp_path, "http://cli:3", "http://cfg:1") == "http://cli:3"
    monkeypatch.chdir(tmp_path)
    assert tracking.resolve_uri(tmp_path, "sqlite:///rel/m.db") == f"sqlite:///{tmp_path}/rel/m.db"
    assert tracking.resolve_uri(tmp_path, "x/store.db") == f"sqlite:///{tmp_path}/x/store.db"
    with pytest.raises(PoxmInputError, match="file store"):
        tracking.resolve_uri(tmp_path, "./mlruns")


def test_point_key_and_name():
    p = {"dataset": "eurlex-4k", "variant": "A", "method": "poxm", "p": 10, "lam": 0.9, "seed": 1}
    assert tracking.point_key(p) == "eurlex-4k|A|poxm|10|0.9|1"
    # what differs first, short enough for the UI's run-name column (~25 characters)
    assert tracking.point_name(p) == "A s1 poxm p10 λ.9 eurlex-4k"
    assert tracking.point_name(dict(p, p=50, lam=0.05), with_dataset=False) == "A s1 poxm p50 λ.05"
    assert tracking.point_name(dict(p, lam=1.0, method="pm_banditnet"), with_dataset=False) == "A s1 pm_banditnet p10 λ1"
    q = dict(p, method="dm", p=None, lam=math.nan)
    assert tracking.point_key(q) == "eurlex-4k|A|dm|none|none|1"
    assert tracking.point_name(dict(q, lam=None)) == "A s1 dm eurlex-4k"
    assert tracking.point_name(q, with_dataset=False) == "A s1 dm"
    assert all(len(tracking.point_name(dict(p, p=pp, lam=lam), with_dataset=False)) <= 25
               for pp in (5, 10, 20, 50, 100) for lam in (0.0, 0.1, 0.5, 0.9, 0.99, 0.999))


def test_metric_names_carry_their_split():
    assert tracking.metric_name("loss") == "train/loss" and tracking.metric_name("loss_se") == "train/loss_se"
    assert tracking.metric_name("SNIS") == "val/SNIS" and tracking.metric_name("ESS_se") == "val/ESS_se"
    assert tracking.metric_name("R@5", "test") == "test/R_at_5" and tracking.metric_name("DR", "val") == "val/DR"


def test_flat_params_and_standard_tags():
    flat = tracking.flat_params({"a": {"b": 1, "c": None}, "ds": [{"n": "x", "v": [{"T": 2}]}], "seeds": [0, 1],
                                 "long": "y" * 7000})
    assert flat == {"a.b": "1", "a.c": "none", "ds.0.n": "x", "ds.0.v.0.T": "2", "seeds": "[0, 1]",
                    "long": "y" * 5997 + "..."}
    tags = tracking.standard_tags("abc123+dirty")
    assert tags["mlflow.source.git.commit"] == "abc123" and tags["mlflow.user"] and tags["mlflow.source.name"] == "poxm"
    assert "mlflow.source.git.commit" not in tracking.standard_tags("unknown")


@pytest.mark.slow
def test_run_dir_store_is_recorded_relatively_and_relocated(tmp_path, monkeypatch):
    """A copied run directory opens (and logs artifacts to) its own copy of the store."""
    import shutil
    orig = tmp_path / "orig"
    orig.mkdir()
    uri = tracking.resolve_uri(orig)
    assert tracking.record_uri(uri, orig) == tracking.RUN_DIR_STORE
    assert tracking.record_uri("http://h:1", orig) == "http://h:1"
    exp = tracking.init_store(uri, "e", orig / "mlartifacts")
    rid = tracking.ensure_parent(uri, exp, "e", {})
    shutil.copytree(orig, tmp_path / "copy")
    copy = tmp_path / "copy"
    got = tracking.stored_uri(copy, {"tracking_uri": tracking.RUN_DIR_STORE})
    assert got == f"sqlite:///{copy.resolve()}/mlflow.db"
    c = tracking.client(got)
    assert c.get_experiment(exp).artifact_location == (copy / "mlartifacts").resolve().as_uri()
    (tmp_path / "a.txt").write_text("x")
    c.log_artifact(rid, str(tmp_path / "a.txt"), "report")
    assert (copy / "mlartifacts").is_dir() and not (orig / "mlartifacts").exists()
    # another store than the run's own: used only when the user gives the same one, else one line
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(PoxmInputError, match="mlflow_runs.json: records the MLflow store http://h:1"):
        tracking.stored_uri(copy, {"tracking_uri": "http://h:1"})
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://h:1")
    assert tracking.stored_uri(copy, {"tracking_uri": "http://h:1"}) == "http://h:1"
    assert tracking.stored_uri(copy, {}) is None


CFG = {"device": "cpu", "group_by": "seed",
       "datasets": [{"name": "d", "val_fraction": 0.1, "synthetic": {"n_train": 10, "preset": None},
                     "variants": [{"name": "A", "alpha": 0.2, "beta": 0.0, "T": 2.0}]}],
       "methods": {"poxm": {"p": [5, 10], "lam": [0.9], "lr": None, "init": "logging"}, "dm": {"lr": 0.01}},
       "training": {"epochs": 3, "lr_is": 0.001, "lr_supervised": 0.002}, "model": {"dim": 8}}
GRID = [{"dataset": "d", "variant": "A", "method": "poxm", "p": p, "lam": 0.9, "seed": 0} for p in (5, 10)] + \
       [{"dataset": "d", "variant": "A", "method": "dm", "p": None, "lam": None, "seed": 0}]


def test_point_params_cover_grid_and_settings():
    prm = tracking.point_params(CFG, GRID[0], "d-A-s0-all")
    assert prm["p"] == "5" and prm["lam"] == "0.9" and prm["alpha"] == "0.2" and prm["T"] == "2.0"
    assert prm["method.lr"] == "0.001"              # None -> the protocol's rate the trainer uses (lr_is for POXM)
    assert prm["protocol"] == "paper+lr_is=0.001,lr_supervised=0.002"
    assert prm["training.epochs"] == "3" and prm["model.dim"] == "8" and prm["synthetic.n_train"] == "10"
    assert "method.p" not in prm and prm["trial"] == "d-A-s0-all"
    assert tracking.point_params(CFG, GRID[2], "t")["method.lr"] == "0.01"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """One sqlite store for the module (creating its schema takes seconds); one experiment per test."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"


@pytest.fixture
def store(db, request, tmp_path):
    return db, tracking.init_store(db, f"sweep-x-{request.node.name}", tmp_path / "mlartifacts")


@pytest.mark.slow
def test_runs_created_once_and_found_again(store, tmp_path):
    uri, exp = store
    assert tracking.init_store(uri, tracking.client(uri).get_experiment(exp).name, tmp_path / "mlartifacts") == exp
    parent = tracking.ensure_parent(uri, exp, "sweep-x", {"config_hash": "h"}, params={"training.epochs": "3"},
                                    description="the sweep")
    pts = [(g, "trial-1") for g in GRID]
    first = tracking.ensure_points(uri, exp, parent, "sweep-x", CFG, pts, {"config_hash": "h"},
                                   {tracking.point_key(GRID[0]): {"dataset_checksum": "c0"}})
    # found again; params cannot change in MLflow: a logged one is kept, a new one is added
    assert tracking.ensure_parent(uri, exp, "sweep-x", {}, params={"training.epochs": "4", "seeds": "[0]"}) == parent
    pr = tracking.client(uri).get_run(parent)
    assert pr.data.params == {"training.epochs": "3", "seeds": "[0]"} and pr.data.tags["mlflow.note.content"] == "the sweep"
    assert tracking.client(uri).get_experiment(exp).tags["mlflow.experimentKind"] == "custom_model_development"
    # the empty 'Default' experiment of a fresh store is gone from the UI's list (deleted, not recreated)
    assert "Default" not in [e.name for e in tracking.client(uri).search_experiments()]
    assert tracking.client(uri).get_experiment("0").lifecycle_stage == "deleted"
    again = tracking.ensure_points(uri, exp, parent, "sweep-x", CFG, pts, {"config_hash": "h"})
    assert again == first and len(set(first.values())) == 3
    c = tracking.client(uri)
    runs = c.search_runs([exp])
    assert len(runs) == 4                                            # no duplicates
    r0 = c.get_run(first[tracking.point_key(GRID[0])])
    assert r0.info.status == "SCHEDULED" and r0.data.tags["mlflow.parentRunId"] == parent
    assert r0.data.tags["dataset_checksum"] == "c0" and r0.data.tags["p"] == "5"
    assert r0.data.params["training.epochs"] == "3"
    assert c.get_experiment(exp).artifact_location == (tmp_path / "mlartifacts").as_uri()


@pytest.mark.slow
def test_worker_logger_dedupes_epochs_and_finishes(store):
    uri, exp = store
    parent = tracking.ensure_parent(uri, exp, "sweep-x", {})
    ids = tracking.ensure_points(uri, exp, parent, "sweep-x", CFG, [(g, "t") for g in GRID[:2]], {})
    heads = {"poxm/p=5/lam=0.9": ids[tracking.point_key(GRID[0])], "poxm/p=10/lam=0.9": ids[tracking.point_key(GRID[1])]}
    log = tracking.PointLogger(uri, heads)
    log.start()
    m = lambda e: {"poxm/p_eq_5/lam_eq_0.9/loss": 1.0 / e, "poxm/p_eq_10/lam_eq_0.9/loss": 2.0 / e,   # noqa: E731
                   "poxm/p_eq_10/lam_eq_0.9/SNIS": 0.5 + e}
    log.log_epoch(1, m(1))
    log.log_epoch(2, m(2))
    # a retried worker: a new logger, epoch 2 reported again, then 3
    log = tracking.PointLogger(uri, heads)
    t0 = time.time()
    log.start()
    log.log_epoch(2, m(2))
    log.log_epoch(3, m(3))
    c = tracking.client(uri)
    r10 = heads["poxm/p=10/lam=0.9"]
    assert [(h.step, h.value) for h in c.get_metric_history(r10, "train/loss")] == [(1, 2.0), (2, 1.0), (3, 2.0 / 3)]
    assert [h.step for h in c.get_metric_history(heads["poxm/p=5/lam=0.9"], "train/loss")] == [1, 2, 3]
    assert "val/SNIS" not in c.get_run(heads["poxm/p=5/lam=0.9"]).data.metrics   # p=5 vs p=10 prefixes kept apart
    rows = to_frame([make_row(dataset="d", variant="A", method="poxm", p=p, lam=0.9, seed=0, split=s, metric=k,
                              value=v, stderr=se, epoch=3, final=True)
                     for p in (5, 10) for s, k, v, se in (("test", "R@5", 0.1 * p, 0.01), ("val", "SNIS", 0.3, math.nan),
                                                          ("val", "DR", 0.2, math.nan))])
    log.log_final(rows, {("poxm", 5, 0.9): heads["poxm/p=5/lam=0.9"], ("poxm", 10, 0.9): r10}, seconds=30.0)
    got = c.get_run(r10)
    assert got.info.status == "FINISHED"
    # test metrics once at step 0 (MLflow charts a metric with no step >= 1 as one bar per run), ×100
    assert [(h.step, h.value) for h in c.get_metric_history(r10, "test/R_at_5")] == [(0, pytest.approx(100.0))]
    assert [h.step for h in c.get_metric_history(r10, "val/DR")] == [3]          # validation keeps its epoch
    # without the trainer's timing, the trial's 30 s shared by its 2 heads: the run's share, in tags; the
    # UI's Duration is the run's own, from this attempt's start to its last value (not the share, 15 s)
    assert (got.data.tags["trial_seconds"], got.data.tags["trial_heads"], got.data.tags["head_seconds"],
            got.data.tags["share_of_trial"]) == ("30.0", "2", "15.0", "0.500")
    assert 0 <= got.info.end_time - got.info.start_time <= 1000 * (time.time() - t0) + 1
    assert got.data.tags["started_at"] <= got.data.tags["ended_at"] and got.data.tags["ended_at"].endswith(" UTC")
    assert got.data.tags["mlflow.note.content"].startswith("**Units.**")      # each run names its units
    assert got.data.metrics["test/R_at_5"] == pytest.approx(100.0) and "test/R_at_5_se" not in got.data.metrics
    assert got.data.metrics["val/DR"] == pytest.approx(0.2) and "val/DR_se" not in got.data.metrics
    # the final SNIS at epoch 3 was logged per epoch already: not a second point at step 3
    assert [(h.step, h.value) for h in c.get_metric_history(r10, "val/SNIS")] == [(1, 1.5), (2, 2.5), (3, 3.5)]
    assert [h.step for h in c.get_metric_history(heads["poxm/p=5/lam=0.9"], "val/SNIS")] == [3]   # never per epoch


@pytest.mark.slow
def test_close_points_leaves_nothing_running(store):
    uri, exp = store
    parent = tracking.ensure_parent(uri, exp, "sweep-x", {})
    ids = tracking.ensure_points(uri, exp, parent, "sweep-x", CFG, [(g, "t") for g in GRID], {})
    c = tracking.client(uri)
    keys = [tracking.point_key(g) for g in GRID]
    c.set_terminated(ids[keys[0]], "FINISHED")
    c.update_run(ids[keys[1]], status="RUNNING")
    runs = tracking.SweepRuns(uri, exp, parent, ids)
    counts = tracking.close_points(runs, {keys[1]: "FAILED"})
    assert counts == {"FINISHED": 1, "FAILED": 1, "KILLED": 1}
    table = pd.DataFrame([{"what": "wall_s", "value": 3.0}])
    tracking.finish_parent(runs, ok=False, tables={"tables/sweep.json": table}, artifacts=[], note_extra="**Results**")
    tracking.set_note(c, parent, "**Results** again")              # replaces what the first call added
    st = {r.info.run_id: r.info.status for r in c.search_runs([exp])}
    assert st[parent] == "FAILED" and "RUNNING" not in st.values() and "SCHEDULED" not in st.values()
    assert c.get_run(parent).data.metrics == {}                     # summaries are tables, not one-bar metrics
    assert "tables/sweep.json" in {a.path for a in c.list_artifacts(parent, "tables")}
    assert c.get_run(parent).data.tags["mlflow.note.content"].count("**Results**") == 1


@pytest.mark.slow
def test_tag_selected(store):
    uri, exp = store
    parent = tracking.ensure_parent(uri, exp, "sweep-x", {})
    ids = tracking.ensure_points(uri, exp, parent, "sweep-x", CFG, [(g, "t") for g in GRID], {})
    runs = tracking.SweepRuns(uri, exp, parent, ids)
    sel = pd.DataFrame([{"dataset": "d", "variant": "A", "method": "poxm", "seed": 0, "selection": s, "p": p, "lam": 0.9}
                        for s, p in (("snis", 10), ("oracle", 10))]
                       + [{"dataset": "d", "variant": "A", "method": "dm", "seed": 0, "selection": "snis", "p": -1,
                           "lam": math.nan}])
    tracking.tag_selected(runs, sel.to_dict("records"))
    c = tracking.client(uri)
    tag = lambda g: c.get_run(ids[tracking.point_key(g)]).data.tags.get("poxm.selected")   # noqa: E731
    assert (tag(GRID[0]), tag(GRID[1]), tag(GRID[2])) == (None, "oracle,snis", "snis")


def test_head_costs_are_each_runs_own():
    """A trial's compute split among its heads: training among those that train, the rest among all."""
    pts = [("logging", None, None), ("poxm", 10, 0.9), ("dm", None, None)]
    got = tracking.head_costs(pts, 40.0, {"setup_s": 4.0, "train_s": 30.0, "eval_s": 6.0})
    assert got[("logging", None, None)] == pytest.approx(10.0 / 3)            # trains nothing
    assert got[("poxm", 10, 0.9)] == pytest.approx(10.0 / 3 + 15.0) == got[("dm", None, None)]
    assert sum(got.values()) == pytest.approx(40.0)
    assert set(tracking.head_costs(pts, 9.0, None).values()) == {3.0}         # no parts timed: an even share


def test_parent_results_and_timing_tables(tmp_path):
    """The parent run's headline as a table (not one-bar metrics): the selected point's test R@5 / PSR@5
    ×100 (the report's scale), mean over seeds, with the seeds and the (p, λ) chosen; timings one row each."""
    from orchestration.stages.track import result_table, summary_tables, sweep_table
    res = tmp_path / "results"
    res.mkdir()
    sel = [{"dataset": "d", "variant": "A", "method": "poxm", "seed": s, "selection": sl, "criterion": "IS",
            "p": p, "lam": 0.9} for s, sl, p in ((0, "is", 5), (1, "is", 10), (0, "oracle", 10))]
    sel.append({"dataset": "d", "variant": "A", "method": "dm", "seed": 0, "selection": "is", "criterion": "IS",
                "p": -1, "lam": math.nan})
    pd.DataFrame(sel).to_csv(res / "selection.csv", index=False)
    rows = [make_row(dataset="d", variant="A", method="poxm", p=p, lam=0.9, seed=s, split=sp, metric=k,
                     value=0.1 * p + s + (0.5 if sp == "val" else 0), stderr=math.nan, epoch=2, final=True)
            for p in (5, 10) for s in (0, 1) for sp in ("test", "val") for k in ("R@5", "PSR@5")]
    rows.append(make_row(dataset="d", variant="A", method="dm", p=None, lam=None, seed=0, split="test", metric="R@5",
                         value=0.25, stderr=math.nan, epoch=2, final=True))
    to_frame(rows).to_csv(res / "rows.csv", index=False)
    got = result_table(tmp_path).set_index("method")
    # seed 0 chose p=5 (0.5), seed 1 p=10 (1 + 1.0): mean 1.25 -> 125 (×100); the oracle and val rows play no part
    assert got.loc["poxm", "test R@5 ×100"] == pytest.approx(125.0) and got.loc["poxm", "test PSR@5 ×100"] == pytest.approx(125.0)
    assert (got.loc["poxm", "seeds"], got.loc["poxm", "p"], got.loc["poxm", "λ"]) == (2, "5/10", "0.9")
    assert got.loc["dm", "test R@5 ×100"] == pytest.approx(25.0) and got.loc["dm", "p"] == "—"
    assert sweep_table({"wall_s": 3.0, "finished_at": 1e9, "ok": True, "note": "x"}).to_dict("records") == [
        {"what": "wall_s", "value": 3.0}]
    assert set(summary_tables(tmp_path, None, {"wall_s": 3.0})) == {"tables/results.json", "tables/sweep.json"}


def test_claim_table_words_and_no_interval_below_min_seeds(tmp_path):
    """The claims on the parent run: verdicts in words, and no interval where there are too few seeds."""
    from orchestration.report.claims import CLAIM_COLUMNS
    from orchestration.stages.track import claim_table, headline_note
    (tmp_path / "tables").mkdir()
    base = {c: math.nan for c in CLAIM_COLUMNS}
    rows = [dict(base, criterion="IS", paper_criterion=False, dataset="d", variant="A", claim="poxm_vs_dm",
                 claim_text="POXM > DM", source="paper", metric="R@5", diff=1.5, ci_lo=0.5, ci_hi=2.5, verdict=v,
                 n=n, seeds="0 1", signs=f"{n}/{n}") for v, n in (("too few seeds", 2), ("holds", 5))]
    pd.DataFrame(rows).to_csv(tmp_path / "tables" / "claims.csv", index=False)
    t = claim_table(tmp_path)
    assert list(t["verdict"]) == ["too few seeds", "holds"]
    assert t["95 % CI low"].isna().tolist() == [True, False]
    assert "too few seeds" in headline_note(tmp_path / "none", tmp_path)



def test_ui_view_opens_on_the_grid_points():
    """`poxm ui`'s page sets the runs page's first view when the browser has none: the sweep unfolded,
    the columns that tell grid points apart and the metrics that matter, names wide enough."""
    import json as _json

    from orchestration.tracking import ui
    st = ui.view_state("parent-id", "SNIS", datasets=2)
    assert st["runsExpanded"] == {"parent-id": True} and st["runsHiddenMode"] == "SHOW_ALL"
    assert st["selectedColumns"][:6] == ["params.`dataset`", "params.`method`", "params.`variant`", "params.`p`",
                                         "params.`lam`", "params.`seed`"]
    assert {"metrics.`val/SNIS`", "metrics.`test/R_at_5`"} <= set(st["selectedColumns"])
    assert st["columnWidths"][st["columnOrder"][0]] >= 300       # widths apply to the columns in columnOrder
    js = ui.view_script("7", st)
    key = ui.VIEW_KEY.format(exp_id="7")
    assert f"if(!s.getItem({_json.dumps(key)}))" in js             # a user's own view is kept
    page = ui.with_mode_script(b"<html><head><title>x</title></head></html>", js).decode()
    assert page.index(ui.MODE_SCRIPT) < page.index(js) < page.index("<title>")
