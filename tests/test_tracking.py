"""orchestration.tracking.runs without Ray: URIs, run identity, idempotent run creation, closing, the worker logger."""
from __future__ import annotations

import math

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
def test_run_dir_store_is_recorded_relatively_and_relocated(tmp_path):
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
    # test metrics once at step 0 (MLflow charts a metric with no step >= 1 as one bar per run)
    assert [(h.step, h.value) for h in c.get_metric_history(r10, "test/R_at_5")] == [(0, pytest.approx(1.0))]
    assert [h.step for h in c.get_metric_history(r10, "val/DR")] == [3]          # validation keeps its epoch
    # the trial's 30 s shared by its 2 heads
    assert (got.data.tags["trial_seconds"], got.data.tags["trial_heads"], got.data.tags["head_seconds"]) == ("30.0", "2", "15.0")
    assert got.data.metrics["test/R_at_5"] == pytest.approx(1.0) and got.data.metrics["test/R_at_5_se"] == pytest.approx(0.01)
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
    claims = {f"claims/IS/d/poxm_vs_logging/T0.25/{i}/diff": float(i) for i in range(1200)}   # > 1000: two batches
    tracking.finish_parent(runs, ok=False, metrics={"wall_s": 3.0, "bad": math.nan, **claims}, artifacts=[])
    st = {r.info.run_id: r.info.status for r in c.search_runs([exp])}
    assert st[parent] == "FAILED" and "RUNNING" not in st.values() and "SCHEDULED" not in st.values()
    assert len(c.get_run(parent).data.metrics) == 1201 and "bad" not in c.get_run(parent).data.metrics


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


def test_parent_results_and_timing_names(tmp_path):
    """The parent run's headline: the selected point's test R@5/nDCR@5/PSR@5, mean over seeds; timings
    as sweep/... (after result/ and claims/ in a sorted list)."""
    from orchestration.stages.track import result_metrics, timing_metrics
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
    got = result_metrics(tmp_path)
    # seed 0 chose p=5 (0.5), seed 1 p=10 (1 + 1.0): mean 1.25; the oracle row and val rows play no part
    assert got == {"result/d/A/poxm/test_R_at_5": pytest.approx(1.25), "result/d/A/poxm/test_PSR_at_5": pytest.approx(1.25),
                   "result/d/A/dm/test_R_at_5": pytest.approx(0.25)}
    assert timing_metrics({"wall_s": 3.0, "finished_at": 1e9, "ok": True, "note": "x"}) == {"sweep/wall_s": 3.0}
