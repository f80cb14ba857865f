"""End to end through real Ray (2 CPUs), real Ray Train jobs, the real trainer and real MLflow stores.

One tiny sweep (generated data, 2 variants x 1 seed, group_by seed -> 2 trials of 6 heads, 2 epochs)
is the reference; the other tests change one thing and compare with it:
  - a trial whose worker process dies once after epoch 1 is retried from its checkpoint, while the
    sweep logs to an MLflow tracking server started as a real process (read back over HTTP);
  - `poxm run` killed (SIGKILL of its process group) after one trial finished, then `poxm resume`.
"""
from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from poxm_process import POXM, REPO, poxm_env, poxm_in_process, run_until_first_trial_then_kill, stop_group
import yaml

from orchestration.cli_parser import poxm_command

pytestmark = [pytest.mark.slow, pytest.mark.longest]   # its files first: tests/conftest.py


TINY = {
    "name": "tiny-e2e",
    "seeds": [0],
    "datasets": [{"name": "synthetic",
                  "synthetic": {"n_train": 500, "n_test": 150, "n_features": 200, "n_labels": 40, "mean_labels": 2},
                  "variants": [{"name": "A", "alpha": 0.3, "beta": 0, "T": 2},
                               {"name": "B", "alpha": 0.3, "beta": 1, "T": 4}]}],
    "model": {"dim": 12, "epochs": 2, "n_candidates": 15},
    "training": {"epochs": 2, "mc_slates": 4, "batch_size": 128},
    "group_by": "seed",
    "resources": {"cpus_per_trial": 1, "max_failures": 2},
    "methods": {"logging": {}, "dm": {"lr": 0.01}, "poxm": {"p": [5, 10], "lam": [0.5, 0.9], "lr": 0.01}},
}
N_POINTS = 2 * (1 + 1 + 4)   # variants x (logging + dm + poxm 2x2)


def write_config(tmp: Path, **changes) -> Path:
    cfg = json.loads(json.dumps(TINY))
    for k, v in changes.items():
        cfg[k] = v
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


# the reference sweep, run once in the test run: this module's tests and test_packing's (its jobs are
# one trial each: 2 alike trials on 2 CPUs) read it; "actors_before": the Ray actors before it ran
_REFERENCE: dict = {}


def reference_sweep(tmp_path_factory):
    if "out" not in _REFERENCE:
        import ray._private.state

        from orchestration.stages.sweep import run_sweep
        from poxm_core.config.schema import load_config
        _REFERENCE["actors_before"] = set(ray._private.state.actors())
        tmp = tmp_path_factory.mktemp("ref")
        out = run_sweep(load_config(write_config(tmp)), runs_dir=tmp / "runs", progress=False)
        assert out.ok, out
        _REFERENCE["out"] = out
    return _REFERENCE["out"]


@pytest.fixture(scope="module")
def reference(ray_session, tmp_path_factory):
    return reference_sweep(tmp_path_factory)


def final_rows(run_dir: Path) -> pd.DataFrame:
    df = pd.read_csv(run_dir / "results" / "rows.csv")
    return df.sort_values(["dataset", "variant", "method", "p", "lam", "seed", "split", "metric", "epoch", "final"],
                          na_position="first").reset_index(drop=True)


def mlflow_runs(run_dir: Path, uri: str | None = None):
    from mlflow import MlflowClient

    from orchestration.tracking.runs import stored_uri
    ml = json.loads((run_dir / "mlflow_runs.json").read_text())
    c = MlflowClient(uri or stored_uri(run_dir, ml))
    return c, ml, c.search_runs([ml["experiment_id"]], max_results=1000)


# --------------------------------------------------------------------------------------------

def test_sweep_layout_mlflow_and_selection(reference):
    rd = reference.run_dir
    assert rd.name.startswith("tiny-e2e-") and len(rd.name) == len("tiny-e2e-") + 12
    for f in ("config.yaml", "sweep.json", "mlflow.db", "results/rows.csv", "results/prepare.csv",
              "results/selection.csv", "report/index.md"):
        assert (rd / f).is_file(), f
    sweep = json.loads((rd / "sweep.json").read_text())
    assert sweep["trials"] == ["synthetic-A-s0-all", "synthetic-B-s0-all"] and len(sweep["grid"]) == N_POINTS
    assert Path(sweep["cache_dir"]) == rd.parent / "cache"

    prep = pd.read_csv(rd / "results" / "prepare.csv")
    assert list(prep.columns) == ["dataset", "variant", "seed", "metric", "value"]
    cover = prep[(prep.variant == "A") & prep.metric.str.startswith("covering@")]
    assert len(cover) == 15 and np.all(np.diff(cover["value"].to_numpy()) >= 0)   # a CDF over k = 1..K
    assert {"logging_policy/R@5", "logging_model/P@1", "rho/top1_mass"} <= set(prep.metric)

    rows = final_rows(rd)
    fin = rows[rows.final]
    c, ml, runs = mlflow_runs(rd)
    points = [r for r in runs if r.data.tags.get("poxm.role") == "point"]
    parents = [r for r in runs if r.data.tags.get("poxm.role") == "sweep"]
    assert len(points) == N_POINTS and len(parents) == 1
    assert len({r.data.tags["poxm.point"] for r in points}) == N_POINTS
    assert {r.info.status for r in runs} == {"FINISHED"}
    parent = parents[0].info.run_id
    for r in points:
        t, p, m = r.data.tags, r.data.params, r.data.metrics
        assert t["mlflow.parentRunId"] == parent
        for k in ("dataset", "variant", "method", "seed", "p", "lam", "config_hash", "git_commit", "dataset_checksum"):
            assert t[k], k
        assert t["config_hash"] == rd.name.rsplit("-", 1)[1]
        for k in ("dataset", "variant", "method", "p", "lam", "seed", "alpha", "beta", "T", "training.epochs",
                  "training.batch_size", "method.lr", "model.dim", "trial"):
            assert k in p, k
        assert (p["dataset"], p["variant"], p["method"]) == (t["dataset"], t["variant"], t["method"])
        pt = fin[(fin.variant == t["variant"]) & (fin.method == t["method"])
                 & (fin.p == (-1 if t["p"] == "none" else int(t["p"])))]
        pt = pt[pt.lam.isna()] if t["lam"] == "none" else pt[np.isclose(pt.lam, float(t["lam"]))]
        r5 = pt[(pt.split == "test") & (pt.metric == "R@5")]["value"]
        assert len(r5) == 1 and m["test/R_at_5"] == pytest.approx(100 * float(r5.iloc[0]), abs=1e-4)   # ×100
        # final test metrics at step 0: MLflow's charts show one bar per run
        assert [h.step for h in c.get_metric_history(r.info.run_id, "test/R_at_5")] == [0]
        # the run's own Duration in the UI: its trial's training and evaluation (the heads train together),
        # at least the trial's compute; its share of that compute in tags (the logging policy's the least)
        assert (r.info.end_time - r.info.start_time) / 1000 >= float(t["trial_seconds"]) - 0.051
        assert float(t["head_seconds"]) <= float(t["trial_seconds"])
        # the seconds tags are rounded to 0.1 s, the share is not: their ratio is off by up to ~0.05 s / trial
        assert float(t["share_of_trial"]) == pytest.approx(float(t["head_seconds"]) / float(t["trial_seconds"]),
                                                           abs=0.002 + 0.1 / float(t["trial_seconds"]))
        assert r.info.run_name.startswith(f"{t['variant']} s{t['seed']} {t['method']}") and len(r.info.run_name) <= 25
        assert all(k.split("/")[0] in ("train", "val", "test", "val_truth") for k in m), sorted(m)
        if t["method"] in ("dm", "poxm"):    # trained heads: per-epoch curves, step = epoch
            hist = c.get_metric_history(r.info.run_id, "val/SNIS")
            assert [h.step for h in hist] == [1, 2]
            per_epoch = rows[~rows.final & (rows.variant == t["variant"]) & (rows.method == t["method"])
                             & (rows.split == "val") & (rows.metric == "SNIS")]
            if t["method"] == "poxm":
                per_epoch = per_epoch[(per_epoch.p == int(t["p"])) & np.isclose(per_epoch.lam, float(t["lam"]))]
            assert [h.value for h in hist] == pytest.approx(per_epoch.sort_values("epoch")["value"].tolist(), rel=1e-12)
            assert {"train/loss", "val/IS", "val/sIS", "val/ESS", "val/SNIS"} <= set(m)

    # selection: argmax of the final validation IS (the default criterion) over (p, lam), computed here from the rows
    crit = fin[(fin.method == "poxm") & (fin.split == "val") & (fin.metric == "IS")]
    sel = pd.read_csv(rd / "results" / "selection.csv")
    for v, grp in crit.groupby("variant"):
        best = grp.loc[grp["value"].idxmax()]
        chosen = sel[(sel.variant == v) & (sel.method == "poxm") & (sel.selection == "is")]
        assert len(chosen) == 1
        assert (int(chosen.p.iloc[0]), float(chosen.lam.iloc[0])) == (int(best.p), pytest.approx(float(best.lam)))
        tagged = [r for r in points if r.data.tags["variant"] == v
                  and "is" in r.data.tags.get("poxm.selected", "").split(",") and r.data.tags["method"] == "poxm"]
        assert [(int(r.data.tags["p"]), float(r.data.tags["lam"])) for r in tagged] == [(int(best.p), pytest.approx(float(best.lam)))]
    arts = {a.path for a in c.list_artifacts(parent)}
    assert {"report", "results", "sweep"} <= arts
    pr = parents[0].data
    assert pr.params["training.epochs"] == "2" and pr.params["datasets.0.variants.1.T"] == "4.0"
    assert pr.params["methods.poxm.p"] == "[5, 10]" and "runs_dir" not in pr.params
    assert pr.metrics == {}          # the sweep's summaries are tables, not hundreds of one-bar metrics
    tables = {name: json.loads(Path(c.download_artifacts(parent, f"tables/{name}.json", str(rd / "dl"))).read_text())
              for name in ("results", "claims", "sweep")}
    res = pd.DataFrame(tables["results"]["data"], columns=tables["results"]["columns"])
    # the headline results: the selected point's test metrics (×100), here one seed, so equal to that run's
    for v in ("A", "B"):
        chosen = sel[(sel.variant == v) & (sel.method == "poxm") & (sel.selection == "is")].iloc[0]
        run = next(r for r in points if r.data.tags["variant"] == v and r.data.tags["method"] == "poxm"
                   and int(r.data.tags["p"]) == int(chosen.p) and np.isclose(float(r.data.tags["lam"]), chosen.lam))
        row = res[(res.variant == v) & (res.method == "poxm")].iloc[0]
        for k in ("R", "nDCR", "PSR"):
            assert row[f"test {k}@5 ×100"] == pytest.approx(run.data.metrics[f"test/{k}_at_5"], abs=0.01)
    # the claims, under IS and the paper's SNIS: one seed, so a difference, no interval, a verdict in words
    cl = pd.DataFrame(tables["claims"]["data"], columns=tables["claims"]["columns"])
    assert set(cl["criterion"]) == {"IS", "SNIS"} and set(cl["verdict"]) == {"too few seeds"}
    assert cl["95 % CI low"].isna().all()
    assert "too few seeds" in pr.tags["mlflow.note.content"]
    assert "tiny-e2e" in pr.tags["mlflow.note.content"]
    for k in ("mlflow.user", "mlflow.source.name"):
        assert pr.tags[k] and points[0].data.tags[k], k
    if (REPO / ".git").exists():
        assert len(pr.tags["mlflow.source.git.commit"]) == 40
    # the run directory names its own store relatively: a copy is self-contained
    assert ml["tracking_uri"] == "sqlite:///mlflow.db"


def test_crash_once_is_retried_from_checkpoint_logging_to_mlflow_server(ray_session, reference, tmp_path, monkeypatch):
    """A trial's worker dies once after epoch 1; the sweep logs to a real `mlflow server` process."""
    from mlflow import MlflowClient

    from orchestration.stages.sweep import run_sweep
    from poxm_core.config.schema import load_config

    with mlflow_server(tmp_path) as uri:
        monkeypatch.setenv("POXM_INJECT_CRASH_ONCE", "1:synthetic-A-s0-all")
        out = run_sweep(load_config(write_config(tmp_path)), runs_dir=tmp_path / "runs", mlflow_uri=uri, progress=False)
        assert out.ok
        tdir = out.run_dir / "trials" / "synthetic-A-s0-all"
        assert (tdir / ".crash_injected").read_text().strip() == "1"
        attempts = json.loads((tdir / "timing.json").read_text())["attempts"]
        # the dead attempt wrote no timing; the retry continued from epoch 1's checkpoint (Ray's, or the
        # trial dir's copy when the worker died before Ray's controller took the report)
        assert len(attempts) == 1 and attempts[0]["resumed_from"].endswith(":epoch_0001")
        pd.testing.assert_frame_equal(final_rows(out.run_dir), final_rows(reference.run_dir))

        # read back over HTTP
        assert not (out.run_dir / "mlflow.db").exists()
        assert json.loads((out.run_dir / "mlflow_runs.json").read_text())["tracking_uri"] == uri   # not ours: as given
        c = MlflowClient(uri)
        exp = c.get_experiment_by_name(out.run_dir.name)
        runs = c.search_runs([exp.experiment_id], max_results=1000)
        points = [r for r in runs if r.data.tags.get("poxm.role") == "point"]
        assert len(points) == N_POINTS and len(runs) == N_POINTS + 1
        assert {r.info.status for r in runs} == {"FINISHED"}
        ref_c, _, ref_runs = mlflow_runs(reference.run_dir)
        ref = {r.data.tags["poxm.point"]: r.data.metrics for r in ref_runs if r.data.tags.get("poxm.role") == "point"}
        for r in points:
            assert r.data.metrics == pytest.approx(ref[r.data.tags["poxm.point"]], rel=1e-12)
            if r.data.tags["poxm.trial"] == "synthetic-A-s0-all" and r.data.tags["method"] == "poxm":
                assert [h.step for h in c.get_metric_history(r.info.run_id, "train/loss")] == [1, 2]  # epoch 1 once
        parent = next(r for r in runs if r.data.tags.get("poxm.role") == "sweep")
        assert "report" in {a.path for a in c.list_artifacts(parent.info.run_id)}


def test_preparing_before_the_trials_gives_the_same_rows(ray_session, reference, tmp_path, monkeypatch):
    """The reference sweep's trials started while its data prepared (its one prepare task fits the 2
    CPUs beside nothing else); the same sweep with the stage first, as when the tasks do not all fit
    at once, gives identical rows."""
    from orchestration.stages import prepare as prepare_stage
    from orchestration.stages.sweep import run_sweep
    from poxm_core.config.schema import load_config

    ref_summary = json.loads((reference.run_dir / "results" / "sweep_summary.json").read_text())
    assert ref_summary["prepare_overlapped"] is True
    start, end = ref_summary["prepare_span"]
    waits = [a["prepare_wait_s"] for t in (reference.run_dir / "trials").iterdir()
             for a in json.loads((t / "timing.json").read_text())["attempts"]]
    assert len(waits) == 2 and all(w >= 0 for w in waits) and end >= start
    # its one prepare task's timeline and its cache levels' seconds (the variants': both variants together)
    (task,) = ref_summary["prepare_tasks"]
    assert start <= task["start"] <= task["imported"] <= task["end"] <= end + 1
    assert set(task["levels"]) == {"data", "model", "candidates", "variants"}
    assert 0 < sum(task["levels"].values()) <= task["seconds"]
    # its MLflow runs were created beside the trials too: each trial waited for its own (points_wait_s)
    ref_attempts = [a for t in (reference.run_dir / "trials").iterdir()
                    for a in json.loads((t / "timing.json").read_text())["attempts"]]
    assert all(a["points_wait_s"] >= 0 for a in ref_attempts)
    monkeypatch.setattr(prepare_stage, "fits_at_once", lambda *a: False)
    out = run_sweep(load_config(write_config(tmp_path)), runs_dir=tmp_path / "runs", progress=False)
    assert out.ok and out.summary["prepare_overlapped"] is False
    pd.testing.assert_frame_equal(final_rows(out.run_dir), final_rows(reference.run_dir))
    attempts = [a for t in (out.run_dir / "trials").iterdir() for a in json.loads((t / "timing.json").read_text())["attempts"]]
    assert not any("points_wait_s" in a for a in attempts)       # created before the trials there


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]




@contextlib.contextmanager
def mlflow_server(tmp: Path):
    """`mlflow server` on a free local port, as a real process, its store and artifacts in `tmp`; yields its
    http URI."""
    import urllib.request
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{tmp}/db",
                               "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                               "--artifacts-destination", (tmp / "mlartifacts").as_uri()], cwd=tmp,
                              # no job runner (8 more processes, 14 CPU-seconds more to start): poxm submits no jobs
                              env={**poxm_env(), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180   # a loaded 2-core machine has taken > 90 s
        while True:
            try:
                urllib.request.urlopen(uri + "/health", timeout=2)
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    pytest.fail("mlflow server did not come up")
                time.sleep(0.5)
        yield uri
    finally:
        stop_group(server, grace_s=20)


def test_kill_driver_then_resume(ray_session, reference, tmp_path, capsys):
    cfg = write_config(tmp_path)
    runs = tmp_path / "runs"
    first = run_until_first_trial_then_kill(cfg, runs)
    run_dir = first.parent.parent
    assert len(list(run_dir.glob("trials/*/done.json"))) == 1, "the sweep must be interrupted mid-way"
    stamp = {f: (first / f).stat().st_mtime_ns for f in ("rows.csv", "done.json", "summary.json")}
    time.sleep(2)   # let the dead cluster's processes go

    st = poxm_in_process(capsys, "status", run_dir)
    assert st.returncode == 0, st.stderr
    # the other trial may have finished meanwhile: its worker is Ray's process, outside the killed group, and
    # goes on until it next calls into Ray (a trial with short epochs reports only once a poll)
    n_done = len(list(run_dir.glob("trials/*/done.json")))
    # the advice is the resume that works from this shell ('poxm' when PATH finds it, else the interpreter's -m)
    assert f"done {n_done}" in st.stdout and "driver     not running" in st.stdout
    assert f"{poxm_command()} resume {run_dir}" in st.stdout, st.stdout

    res = poxm_in_process(capsys, "resume", run_dir, "--quiet")       # on the test run's Ray
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert {f: (first / f).stat().st_mtime_ns for f in stamp} == stamp            # the finished trial did not rerun
    assert len(json.loads((first / "timing.json").read_text())["attempts"]) == 1
    pd.testing.assert_frame_equal(final_rows(run_dir), final_rows(reference.run_dir))
    _, _, mruns = mlflow_runs(run_dir)
    assert len(mruns) == N_POINTS + 1                                            # no duplicates
    assert {r.info.status for r in mruns} == {"FINISHED"}                        # none left RUNNING
    st = poxm_in_process(capsys, "status", run_dir)
    assert "done 2" in st.stdout


def test_poxm_ui_serves_the_runs_table(reference, tmp_path):
    """`poxm ui` on a COPY of the reference run directory: it prints the runs-table URL (model-training
    mode) at once and answers once MLflow's server does, and the runs read back over HTTP carry the names, metric prefixes and
    parent params; the copy's store is used, not the original's."""
    import shutil
    import urllib.request

    from mlflow import MlflowClient

    copy = tmp_path / reference.run_dir.name
    shutil.copytree(reference.run_dir, copy, ignore=shutil.ignore_patterns("ray", "trials"))
    ml = json.loads((copy / "mlflow_runs.json").read_text())
    port = _free_port()
    proc = subprocess.Popen(POXM + ["ui", str(copy), "--port", str(port)], cwd=tmp_path, env=poxm_env(),
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines, deadline = [], time.time() + 240
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("MLflow UI: "):
                break
        url = f"http://127.0.0.1:{port}/#/experiments/{ml['experiment_id']}/runs?workflowType=machine_learning"
        assert any(url in x for x in lines), "".join(lines)
        # the URL comes as soon as poxm ui's proxy listens: a request made then waits there for MLflow's server
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=300) as r:
            assert r.status == 200
        c = MlflowClient(f"http://127.0.0.1:{port}")
        runs = c.search_runs([ml["experiment_id"]], max_results=1000)
        points = [r for r in runs if r.data.tags.get("poxm.role") == "point"]
        parent = next(r for r in runs if r.data.tags.get("poxm.role") == "sweep")
        assert len(points) == N_POINTS
        names = {r.info.run_name for r in points}
        assert "A s0 poxm p5 λ.5" in names and "B s0 logging" in names
        for r in points:
            assert all(k.split("/")[0] in ("train", "val", "test", "val_truth") for k in r.data.metrics)
            assert "test/R_at_5" in r.data.metrics
        assert parent.data.params["name"] == "tiny-e2e" and parent.data.params["group_by"] == "seed"
        assert parent.data.params["datasets.0.synthetic.n_train"] == "500"
        assert c.get_experiment(ml["experiment_id"]).tags["mlflow.experimentKind"] == "custom_model_development"
        # artifacts are served from the copy
        (copy / "mlartifacts").rename(copy / "mlartifacts.moved")
        assert not {a.path for a in c.list_artifacts(parent.info.run_id)}
        (copy / "mlartifacts.moved").rename(copy / "mlartifacts")
        assert "report" in {a.path for a in c.list_artifacts(parent.info.run_id)}
        _chromium_sees_runs(url, port, ml["experiment_id"], parent, points)
    finally:
        stop_group(proc)


def test_mlflow_ui_in_a_browser(reference, tmp_path):
    """The researcher's first view, in headless Chromium (scripts/check_mlflow_ui.py): every grid point
    listed under the sweep, names in full, method, variant, p, λ, seed, the validation estimate and
    test R@5 as columns on the first screen, and at most 20 charts before the first training curve."""
    import shutil
    sys.path.insert(0, str(REPO / "scripts"))
    import check_mlflow_ui
    if check_mlflow_ui.browser() is None:
        pytest.skip("no chromium")
    copy = tmp_path / reference.run_dir.name
    shutil.copytree(reference.run_dir, copy, ignore=shutil.ignore_patterns("ray", "trials"))
    assert check_mlflow_ui.check(copy, tmp_path) == []
    assert {p.name for p in tmp_path.glob("*.png")} == {"mlflow_runs.png", "mlflow_charts.png", "mlflow_run.png"}


def _chromium_sees_runs(url: str, port: int, exp_id: str, parent, points) -> None:
    """Where Debian's chromium is installed: the UI as a browser renders it (JavaScript run, DOM dumped).
    The runs table shows the sweep's parent run (its trials nested under it, MLflow's layout for a
    sweep) and the count of every run; a trial's page shows its name. Skipped without chromium."""
    import re
    import shutil
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        return

    def dom(u: str) -> str:
        out = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000",
                              "--dump-dom", u], capture_output=True, text=True, timeout=180)
        return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", out.stdout))

    table = dom(url)
    assert parent.info.run_name in table, table[-2000:]
    assert f"{len(points) + 1} matching runs" in table, table[-2000:]
    one = sorted(points, key=lambda r: r.info.run_name)[0]
    page = dom(f"http://127.0.0.1:{port}/#/experiments/{exp_id}/runs/{one.info.run_id}")
    assert one.info.run_name in page, page[-2000:]



@pytest.mark.slow
def test_point_runs_that_cannot_be_created_stop_the_trials_waiting_for_them(ray_session, tmp_path, monkeypatch):
    """The MLflow runs are created beside the trials; when that fails, the trials already started
    (waiting for their runs) are stopped and the sweep ends with that error, in one line."""
    from orchestration.tracking import runs as tracking
    from orchestration.stages.sweep import run_sweep
    from poxm_core.config.schema import load_config
    from poxm_core.common.errors import PoxmInputError

    def broken(*a, **kw):
        time.sleep(2)          # the jobs have started by now
        raise PoxmInputError("mlflow.db: cannot create the point runs (test)")
    monkeypatch.setattr(tracking, "ensure_points", broken)
    t0 = time.perf_counter()
    with pytest.raises(PoxmInputError, match="cannot create the point runs"):
        run_sweep(load_config(write_config(tmp_path)), runs_dir=tmp_path / "runs", progress=False)
    assert time.perf_counter() - t0 < 240
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if (p / "sweep.json").is_file()]
    assert list(run_dir.glob("trials/*/done.json")) == []        # no trial ran without its runs
    # the prepare stage's thread ended with the sweep: left alive, it would call Ray after the module's
    # Ray is shut down, which starts a Ray again in this process (and hangs its exit)
    import threading
    assert [t.name for t in threading.enumerate() if t.name.startswith("poxm-")] == []
