"""A run directory is data, never code or credentials (docs/orchestration.md, "What poxm trusts"):
what a received run directory names (plugins, a storage path, a tracking URI) is used only with the
user's say-so; credentials in a URI are never recorded or printed; the driver lock is atomic; addresses,
URIs and resources are checked before anything is written; `poxm ui` browses read-only and damaged
stores without writing them. Loopback addresses only; a closed port on 127.0.0.1 for "nothing answers".

The CLI runs in-process (`orchestration.cli.main`); the sweep itself is replaced by a sentinel that
fails the test if it is reached, so nothing here starts Ray unless marked slow.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from poxm_process import poxm_in_process

from tests.cli_peers import cli, one_line

from orchestration import rundir
from orchestration.rundir import RunDir, acquire_driver, release_driver, write_json
from orchestration.stages.plan import plan_from_run_dir, plan_sweep, write_plan
from orchestration.tracking import store
from poxm_core.common.errors import PoxmInputError
from poxm_core.config.schema import load_config

CFG = {
    "name": "trust",
    "datasets": [{"name": "synthetic", "synthetic": {"n_train": 60, "n_test": 20, "n_features": 20, "n_labels": 10},
                  "variants": [{"name": "A", "alpha": 0.5}]}],
    "model": {"epochs": 1, "dim": 8, "n_candidates": 6},
    "training": {"epochs": 1},
    "methods": {"logging": {}, "dm": {}},
}


# the user's settings reset and the sweep replaced by a sentinel: tests/orchestration/conftest.py
pytestmark = pytest.mark.usefixtures("no_user_settings")


def write_cfg(path: Path, **extra) -> Path:
    path.write_text(yaml.safe_dump({**CFG, **extra}, sort_keys=False))
    return path


def planned(tmp_path: Path, **extra) -> RunDir:
    cfg = load_config(write_cfg(tmp_path / "sweep.yaml", **extra))
    plan = plan_sweep(cfg, runs_dir=tmp_path / "runs")
    write_plan(plan)
    return plan.rd


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Listener:
    """A TCP listener on 127.0.0.1 that counts connections (and keeps what they sent)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.got: list[bytes] = []
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.settimeout(0.5)
            try:
                self.got.append(conn.recv(4096))
            except OSError:
                self.got.append(b"")
            conn.close()

    def close(self):
        self.stop.set()
        self.sock.close()


PAYLOAD = "import pathlib\npathlib.Path({marker!r}).write_text({who!r})\n"


# --------------------------------------------------------------------------------------------
# 1. plugins named by a run directory are not imported


def test_status_and_report_do_not_import_a_run_directorys_plugins(tmp_path, capsys, no_sweep):
    rd = planned(tmp_path)
    marker = tmp_path / "payload-ran"
    (rd.root / "evil_plugin_39a.py").write_text(PAYLOAD.format(marker=str(marker), who="run dir"))
    with open(rd.config_input, "a") as f:
        f.write("plugins: [evil_plugin_39a]\n")
    rc, out, err = cli(capsys, "status", rd.root)
    assert rc == 0 and not marker.exists(), err
    assert "plugins    evil_plugin_39a (named by the run, not imported" in out
    rc, out, err = cli(capsys, "report", rd.root)
    one_line(rc, err, "evil_plugin_39a", "--plugins evil_plugin_39a")
    assert not marker.exists()
    rc, out, err = cli(capsys, "resume", rd.root)
    one_line(rc, err, "--plugins")
    assert not marker.exists() and "evil_plugin_39a" not in sys.modules


def test_run_directory_plugins_come_from_the_users_folders_only(tmp_path):
    """With --plugins, the module is imported from the user's --plugin-path, never from the plugin_path the
    run recorded (which a received directory could point anywhere), and sys.path gets no folder of the run's."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()
    marker = tmp_path / "who"
    (theirs / "plug_39b.py").write_text(PAYLOAD.format(marker=str(marker), who="run dir"))
    rd = planned(tmp_path, plugins=["plug_39b"], plugin_path=[str(theirs)])   # ran once with `theirs` (then removed)
    sys.modules.pop("plug_39b", None)
    sys.path[:] = [p for p in sys.path if p != str(theirs)]
    marker.unlink(missing_ok=True)
    with pytest.raises(PoxmInputError, match="names plugins plug_39b"):
        plan_from_run_dir(rd.root)
    (mine / "plug_39b.py").write_text(PAYLOAD.format(marker=str(marker), who="mine"))
    rundir.set_user_settings("plug_39b", [str(mine)])
    try:
        plan = plan_from_run_dir(rd.root)
        assert marker.read_text() == "mine"
        assert plan.cfg.plugin_path == [str(mine.resolve())] and str(theirs) not in sys.path
    finally:
        sys.modules.pop("plug_39b", None)
        sys.path[:] = [p for p in sys.path if p not in (str(mine.resolve()), str(theirs))]


def test_a_run_directorys_plugin_path_alone_reaches_no_sys_path(tmp_path):
    rd = planned(tmp_path)
    with open(rd.config_input, "a") as f:
        f.write(f"plugin_path: [{tmp_path / 'shadow'}]\nplugins: []\n")
    plan_from_run_dir(rd.root)
    assert str(tmp_path / "shadow") not in sys.path


# --------------------------------------------------------------------------------------------
# 2. resources.storage_path recorded in a run


def test_recorded_storage_path_is_used_only_when_the_user_gives_it(tmp_path, capsys, no_sweep):
    rd = planned(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    with open(rd.config_input, "a") as f:       # outside the run's identity: the hash still matches
        f.write(f"resources: {{storage_path: {elsewhere}}}\n")
    rc, out, err = cli(capsys, "resume", rd.root)
    one_line(rc, err, "resources.storage_path", f"--storage-path {elsewhere}")
    rc, out, err = cli(capsys, "resume", rd.root, "--storage-path", tmp_path / "other")
    one_line(rc, err, "resources.storage_path")
    rc, out, err = cli(capsys, "status", rd.root)
    assert rc == 0 and str(elsewhere) in out
    rundir.set_user_settings(storage_path=str(elsewhere) + "/")
    assert plan_from_run_dir(rd.root).cfg.resources.storage_path == str(elsewhere)


# --------------------------------------------------------------------------------------------
# 3. and 4. tracking URIs: the run's own store, else only the user's; never credentials


def test_recorded_tracking_uri_gets_no_request_unless_it_is_the_users(tmp_path, capsys, no_sweep):
    rd = planned(tmp_path)
    srv = Listener()
    try:
        uri = f"http://127.0.0.1:{srv.port}"
        write_json(rd.mlflow_runs, {"tracking_uri": uri, "experiment_id": "1", "parent_run_id": "x", "points": {}})
        t0 = time.time()
        rc, out, err = cli(capsys, "report", rd.root)
        one_line(rc, err, "mlflow_runs.json", uri, "--mlflow-uri")
        rc, out, err = cli(capsys, "resume", rd.root)
        one_line(rc, err, "mlflow_runs.json", uri)
        assert time.time() - t0 < 15
        time.sleep(0.3)
        assert srv.got == []                     # nothing, credentials or not, reached the server
        store.set_user_uri(uri + "/")            # the same server, given by the user: used
        assert store.checked_uri(rd.root, json.loads(rd.mlflow_runs.read_text())) == uri + "/"
    finally:
        srv.close()


def test_credentials_in_a_uri_are_never_recorded_or_printed(tmp_path, capsys, monkeypatch):
    uri = "http://alice:s3cr%40t@127.0.0.1:5000"
    clean = store.resolve_uri(tmp_path, uri)
    assert clean == "http://127.0.0.1:5000"
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "alice" and os.environ["MLFLOW_TRACKING_PASSWORD"] == "s3cr@t"
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "bob")     # the user's own variables win
    store.resolve_uri(tmp_path, "http://eve:x@127.0.0.1:5000")
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "bob"
    assert store.record_uri("postgresql://u:pw@127.0.0.1:5432/db", tmp_path) == "postgresql://127.0.0.1:5432/db"
    with pytest.raises(PoxmInputError) as exc:
        store.resolve_uri(tmp_path, "file://alice:s3cret@x/mlruns")
    assert "s3cret" not in str(exc.value)
    rd = planned(tmp_path)           # a run directory written by an older poxm, credentials inside
    write_json(rd.mlflow_runs, {"tracking_uri": uri, "experiment_id": "1"})
    rc, out, err = cli(capsys, "status", rd.root)
    assert rc == 0 and "s3cr" not in out + err and "http://127.0.0.1:5000" in out
    rc, out, err = cli(capsys, "report", rd.root)
    assert rc == 2 and "s3cr" not in out + err


# --------------------------------------------------------------------------------------------
# 6. the driver lock


def _contend(root: str, barrier, results) -> None:
    rd = RunDir(Path(root))
    barrier.wait()
    try:
        acquire_driver(rd)
        won = True
    except PoxmInputError:
        won = False
    results.put(won)
    barrier.wait()                   # hold it until every contender has tried
    if won:
        release_driver(rd)


def test_driver_lock_has_one_winner_in_a_real_race(tmp_path):
    ctx = multiprocessing.get_context("fork")
    n, tries = 4, 30
    for i in range(tries):
        root = tmp_path / f"r{i}"
        root.mkdir()
        barrier, results = ctx.Barrier(n), ctx.Queue()
        procs = [ctx.Process(target=_contend, args=(str(root), barrier, results)) for _ in range(n)]
        for p in procs:
            p.start()
        wins = [results.get(timeout=60) for _ in range(n)]
        for p in procs:
            p.join(60)
        assert sum(wins) == 1, f"try {i}: {sum(wins)} drivers took the lock"
        assert not (root / "driver.json").exists()


def test_a_killed_drivers_lock_is_free_again(tmp_path):
    rd = RunDir(tmp_path)
    code = ("import sys, os; from pathlib import Path; from orchestration.rundir import RunDir, acquire_driver; "
            "acquire_driver(RunDir(Path(sys.argv[1]))); print('held', flush=True); os.kill(os.getpid(), 9)")
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert "held" in res.stdout and (tmp_path / "driver.json").exists()
    acquire_driver(rd)               # the dead driver's pid and OS lock are gone
    release_driver(rd)


# --------------------------------------------------------------------------------------------
# 7. addresses and URIs checked before anything is written


@pytest.mark.parametrize("args,needles", [
    (["--mlflow-uri", "http://127.0.0.1:{closed}"], ["--mlflow-uri", "nothing answers at 127.0.0.1:{closed}"]),
    (["--mlflow-uri", "ftp://x/y"], ["--mlflow-uri", "unsupported scheme 'ftp'"]),
    (["--mlflow-uri", "http://127.0.0.1:notaport"], ["--mlflow-uri", "not a valid URI"]),
    (["--address", "127.0.0.1:{closed}"], ["--address", "nothing answers at 127.0.0.1:{closed}"]),
    (["--address", "not a host:xx"], ["--address", "not HOST:PORT"]),
    (["--address", "ray://127.0.0.1:{closed}"], ["--address", "nothing answers"]),
])
def test_bad_or_silent_addresses_are_one_line_before_anything_is_written(tmp_path, capsys, no_sweep, args, needles):
    port = closed_port()
    cfg = write_cfg(tmp_path / "sweep.yaml")
    runs = tmp_path / "runs"
    t0 = time.time()
    rc, out, err = cli(capsys, "run", cfg, "--runs-dir", runs, *[a.format(closed=port) for a in args])
    assert time.time() - t0 < 15
    one_line(rc, err, *[n.format(closed=port) for n in needles])
    assert not runs.exists()


def test_resume_checks_its_address_before_anything_is_written(tmp_path, capsys, no_sweep):
    rd = planned(tmp_path)
    before = sorted(p.name for p in rd.root.iterdir())
    rc, out, err = cli(capsys, "resume", rd.root, "--mlflow-uri", f"http://127.0.0.1:{closed_port()}")
    one_line(rc, err, "nothing answers")
    rc, out, err = cli(capsys, "resume", rd.root, "--address", "127.0.0.1:99999")
    one_line(rc, err, "--address")
    assert sorted(p.name for p in rd.root.iterdir()) == before


# --------------------------------------------------------------------------------------------
# 8. `poxm ui` on a read-only or damaged store


def fake_store(root: Path, artifacts: str) -> Path:
    """The tables relocate_store reads, as MLflow's sqlite store has them."""
    root.mkdir(parents=True, exist_ok=True)
    db = root / "mlflow.db"
    con = sqlite3.connect(db)
    with con:
        con.execute("CREATE TABLE experiments (experiment_id INTEGER, name TEXT, artifact_location TEXT)")
        con.execute("CREATE TABLE runs (run_uuid TEXT, artifact_uri TEXT)")
        con.execute("INSERT INTO experiments VALUES (1, 'e', ?)", (artifacts,))
        con.execute("INSERT INTO runs VALUES ('r', ?)", (artifacts + "/1/r/artifacts",))
    con.close()
    return db


def test_ui_serves_a_copied_or_read_only_store_without_writing_it(tmp_path, monkeypatch):
    run = tmp_path / "copy"
    db = fake_store(run, (tmp_path / "original" / "mlartifacts").as_uri())
    before = db.read_bytes()
    (tmp_path / "tmp-a").mkdir()
    uri = store.browse_copy(run, tmp_path / "tmp-a")
    assert uri == "sqlite:///" + str(tmp_path / "tmp-a" / "mlflow.db") and db.read_bytes() == before
    con = sqlite3.connect(tmp_path / "tmp-a" / "mlflow.db")
    assert con.execute("SELECT artifact_location FROM experiments").fetchone()[0] == (run / "mlartifacts").as_uri()
    assert con.execute("SELECT artifact_uri FROM runs").fetchone()[0] == (run / "mlartifacts").as_uri() + "/1/r/artifacts"
    con.close()
    # a store that needs no relocation is served in place (a running sweep stays live) unless it cannot be written
    ok = fake_store(tmp_path / "here", (tmp_path / "here" / "mlartifacts").as_uri())
    (tmp_path / "tmp-b").mkdir()
    assert store.browse_copy(tmp_path / "here", tmp_path / "tmp-b") == "sqlite:///" + str(ok)
    monkeypatch.setattr(store, "writable", lambda p: False)       # a read-only archive (root could write anyway)
    assert store.browse_copy(tmp_path / "here", tmp_path / "tmp-b") == "sqlite:///" + str(tmp_path / "tmp-b" / "mlflow.db")


def test_a_damaged_store_is_one_line_naming_it(tmp_path, capsys):
    rd = planned(tmp_path)
    rd.mlflow_db.write_bytes(b"this is not a database, just bytes " * 200)
    write_json(rd.mlflow_runs, {"tracking_uri": store.RUN_DIR_STORE, "experiment_id": "1"})
    rc, out, err = cli(capsys, "ui", rd.root, "--port", closed_port())
    one_line(rc, err, str(rd.mlflow_db), "not a readable MLflow store")
    with pytest.raises(PoxmInputError, match="mlflow.db: not a readable MLflow store"):
        store.stored_uri(rd.root, {"tracking_uri": store.RUN_DIR_STORE})


# --------------------------------------------------------------------------------------------
# 9. resources and names a local Ray could never give or hold: refused before Ray starts


def test_impossible_resources_and_names_are_refused_before_ray(tmp_path, capsys, no_sweep):
    cfg = write_cfg(tmp_path / "sweep.yaml")
    runs = tmp_path / "runs"
    rc, out, err = cli(capsys, "run", cfg, "--runs-dir", runs, "resources.cpus_per_trial=4096")
    one_line(rc, err, "resources.cpus_per_trial", "4096")
    long = "d" * 250
    rc, out, err = cli(capsys, "run", cfg, "--runs-dir", runs, f"datasets.0.name={long}")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert not runs.exists()


# --------------------------------------------------------------------------------------------
# 5. a local Ray listens on the loopback only: test_secrets.py (the Ray of its `poxm run`, sampled as it runs)


# --------------------------------------------------------------------------------------------
# 9 (continued). storage errors, impossible sizes, input errors inside a trial, a tampered cache

def _limited(fsize: int):
    """preexec_fn: a file-size limit (`ulimit -f`) for the child: a write beyond it fails with EFBIG (Python
    ignores SIGXFSZ), and SQLite reports it as a "disk I/O error"."""
    import resource

    def f():
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return f


def _poxm(*args, fsize: int | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestration.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=_limited(fsize) if fsize else None,
                          cwd=Path(__file__).resolve().parents[2])


def _tmp_leftovers(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*") if ".tmp" in p.name)


def test_sqlite_disk_io_error_during_run_is_one_line_and_leaves_no_half_store(tmp_path):
    """A real SQLite "disk I/O error": `poxm run` under a 50 kB file-size limit, which the MLflow store
    outgrows while it is created (before Ray starts)."""
    cfg = write_cfg(tmp_path / "sweep.yaml")
    r = _poxm("run", cfg, "--runs-dir", tmp_path / "runs", fsize=50_000, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-3000:]
    (run,) = (tmp_path / "runs").iterdir()
    assert lines[0].startswith(f"poxm: error: {run / 'mlflow.db'}: SQLite: disk I/O error"), lines
    assert "Traceback" not in r.stdout + r.stderr
    assert not (run / "mlflow.db").exists(), "the store this run began is not left half-made"
    assert _tmp_leftovers(tmp_path / "runs") == []
    assert sorted(p.name for p in run.iterdir()) == ["config.input.yaml", "config.yaml", "driver.lock", "sweep.json"]
    yaml.safe_load((run / "config.yaml").read_text()) and json.loads((run / "sweep.json").read_text())


@pytest.mark.slow
def test_efbig_during_report_is_one_line_naming_the_file_and_nothing_half_written(tmp_path, capsys):
    """A real EFBIG: `poxm report` under a file-size limit that its figures (20 kB) or its index.html
    (200 kB) outgrow; the trials' results are made here without Ray (run_trial)."""
    from orchestration.stages.plan import write_plan
    from poxm_core.prepare.pipeline import load_prepared
    from poxm_core.training import run_trial

    cfg = load_config(write_cfg(tmp_path / "sweep.yaml", mlflow={"enabled": False}))
    plan = plan_sweep(cfg, runs_dir=tmp_path / "runs")
    write_plan(plan)
    for s in plan.specs:
        run_trial(cfg, s, load_prepared(cfg, s.dataset, s.variant, s.seed, plan.cache_dir), plan.rd.trial(s.name),
                  progress=False)
        write_json(plan.rd.trial(s.name) / "done.json", {"finished": time.time()})
    root = plan.rd.root
    for limit, name in ((20_000, "figures/"), (200_000, "index.html")):
        before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
        r = _poxm("report", root, fsize=limit, timeout=300)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stderr[-3000:]
        assert lines[0].startswith(f"poxm: error: {root / 'report'}/") and name in lines[0], lines
        assert "File too large" in lines[0] and "ulimit -f" in lines[0]
        assert not (root / "report").exists() and _tmp_leftovers(root) == []
        for p in root.rglob("*"):     # what it did write is whole: each file as before, or complete and parseable
            if p.is_file() and p in before and p.read_bytes() != before[p] or p.suffix == ".csv" and p.is_file():
                assert p.suffix in (".csv", ".json", ".npz", ".yaml"), p
                if p.suffix == ".csv":
                    import pandas as pd
                    pd.read_csv(p)
    r = poxm_in_process(capsys, "report", root)     # the limit gone: the report is built
    assert r.returncode == 0 and (root / "report" / "index.html").is_file(), r.stderr[-2000:]


def test_a_simulated_sqlite_io_error_inside_mlflow_is_one_line_naming_the_store(tmp_path, capsys, monkeypatch):
    """SIMULATED: sqlite3.OperationalError('disk I/O error') as MLflow raises it from a later write (an
    MlflowException from SQLAlchemy's OperationalError), which a test cannot provoke at that point."""
    import sqlite3

    import sqlalchemy.exc
    from mlflow.exceptions import MlflowException

    import orchestration.stages.sweep as sweep

    rd = planned(tmp_path)
    write_json(rd.mlflow_runs, {"tracking_uri": store.RUN_DIR_STORE, "experiment_id": "1", "parent_run_id": "p"})

    def failing(plan, log_mlflow=True):
        try:
            try:
                raise sqlite3.OperationalError("disk I/O error")
            except sqlite3.OperationalError as e:
                raise sqlalchemy.exc.OperationalError("INSERT INTO metrics ...", {}, e) from e
        except sqlalchemy.exc.OperationalError as e:
            raise MlflowException(message=str(e)) from e
    monkeypatch.setattr(sweep, "report_only", failing)
    rc, out, err = cli(capsys, "report", rd.root)
    one_line(rc, err, f"{rd.root / 'mlflow.db'}: SQLite: disk I/O error", "ulimit -f")
    # an OSError that names no file, from a write through the atomic writer: the file is named
    from poxm_core.common import atomic

    def full(self, *a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError) as e:
        atomic.write_text(tmp_path / "x.json", "{}")
    assert e.value.filename == str(tmp_path / "x.json") and not list(tmp_path.glob(".x.json.tmp-*"))


def test_the_mlflow_line_of_a_sweep_prints_no_credentials(monkeypatch, capsys):
    """`  mlflow   URI` at the start of a sweep: a database URL keeps its login for the connection and
    is printed without it."""
    from types import SimpleNamespace

    import orchestration.stages.sweep as sweep
    import orchestration.stages.track as track

    uri = "postgresql://alice:s3cret@127.0.0.1:5432/mlflow"
    monkeypatch.setattr(track, "stage_track", lambda plan, cli_uri: (uri, "1", "parent", {}))
    plan = SimpleNamespace(cfg=SimpleNamespace(mlflow=SimpleNamespace(enabled=True)),
                           rd=SimpleNamespace(mlflow_db=Path("/nonexistent/mlflow.db")))
    said = []
    started = SimpleNamespace()
    assert sweep.open_tracking(plan, None, started, said.append)[0] == uri        # the connection keeps it
    assert said == ["  mlflow   postgresql://127.0.0.1:5432/mlflow"]
    assert "s3cret" not in capsys.readouterr().out


@pytest.mark.slow
def test_an_input_error_inside_a_trial_is_not_retried_and_status_shows_its_line(ray_session, tmp_path, capsys):
    """A tampered cache array (checked against its manifest when the trial loads it) is a PoxmInputError
    in the Ray Train worker: with resources.max_failures=2, the trial is tried once (not by Ray Train's
    retries, nor Tune's), ends errored with that one line, and `poxm status` shows it, not WorkerGroupError."""
    cfg = write_cfg(tmp_path / "sweep.yaml", mlflow={"enabled": False}, resources={"max_failures": 2})
    cache = tmp_path / "cache"
    r = poxm_in_process(capsys, "prepare", cfg, "--cache-dir", cache)
    assert r.returncode == 0, r.stderr[-2000:]
    (z,) = (cache / "model").glob("*/Z_train.npy")
    b = bytearray(z.read_bytes())
    b[10:20] = b"??????????"
    z.write_bytes(bytes(b))
    r = poxm_in_process(capsys, "run", cfg, "--runs-dir", tmp_path / "runs", "--cache-dir", cache, "--quiet")
    assert r.returncode == 1, r.stderr[-3000:]                                     # (on the test run's Ray)
    (run,) = (tmp_path / "runs").iterdir()
    states = {t.name: json.loads((t / "state.json").read_text()) for t in (run / "trials").iterdir()
              if (t / "state.json").is_file()}
    errored = {n: s for n, s in states.items() if s["state"] == "errored"}
    assert errored, states
    for s in errored.values():
        assert s["tries"] == 1 and s["input_error"] is True, s
        assert str(z) in s["error"] and "differs from its cache manifest" in s["error"], s
    st = poxm_in_process(capsys, "status", run)
    assert st.returncode == 0 and "WorkerGroupError" not in st.stdout
    assert any(str(z) in line and "errored" in line for line in st.stdout.splitlines()), st.stdout
    errors = list(Path(os.environ["POXM_STATE_DIR"]).rglob(f"{run.name}-*/tune/*/error.txt"))
    assert errors and all(e.read_text().count("Failure #") == 1 for e in errors), [e.read_text() for e in errors]
