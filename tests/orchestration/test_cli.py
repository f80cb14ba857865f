"""The `poxm` command line: help, --print-config, and one-line errors (exit 2).

The checks of an exit code and a message run `orchestration.cli.main` in-process (poxm_process.poxm_in_process);
the help and one error also go through the real entry point, a `python -m orchestration.cli` subprocess."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from poxm_process import poxm_in_process

REPO = Path(__file__).resolve().parents[2]
POXM = [sys.executable, "-m", "orchestration.cli"]

GOOD = {
    "name": "cli",
    "datasets": [{"name": "synthetic", "synthetic": {"n_train": 100, "n_test": 50, "n_features": 50, "n_labels": 20,
                                                     "mean_labels": 2},
                  "variants": [{"name": "A", "alpha": 0.5}]}],
    "methods": {"logging": {}, "poxm": {"p": [5], "lam": [0.9]}},
}


def poxm(*args, cwd=REPO) -> subprocess.CompletedProcess:
    """The real entry point, a subprocess."""
    return subprocess.run(POXM + [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture
def cli(capsys):
    """`cli(*args)`: `poxm ARGS` in-process, a CompletedProcess like `poxm`'s."""
    return lambda *args: poxm_in_process(capsys, *args)


def write(tmp_path: Path, data: dict, name="c.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def assert_one_line_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("poxm: error: "), lines[0]
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.mark.slow
def test_help_through_the_entry_point():
    r = poxm("--help")
    assert r.returncode == 0 and "usage: poxm" in r.stdout


@pytest.mark.parametrize("cmd", ["prepare", "train", "run", "resume", "status", "ui", "report"])
def test_help(cli, cmd):
    r = cli(cmd, "--help")
    assert r.returncode == 0 and "usage: poxm" in r.stdout


@pytest.mark.slow
def test_unknown_config_key_names_nearest_through_the_entry_point(tmp_path):
    bad = dict(GOOD, trainng={"epochs": 2})
    assert_one_line_error(poxm("run", write(tmp_path, bad)), "unknown config key 'trainng'", "did you mean 'training'")


def test_unknown_nested_key(cli, tmp_path):
    bad = dict(GOOD, training={"epohcs": 2})
    assert_one_line_error(cli("run", write(tmp_path, bad)), "training.epohcs", "did you mean 'training.epochs'")


def test_missing_config_file(cli, tmp_path):
    assert_one_line_error(cli("run", tmp_path / "nope.yaml"), "nope.yaml", "not found")
    assert_one_line_error(cli("prepare", tmp_path / "nope.yaml"), "nope.yaml", "not found")


def test_unknown_dataset(cli, tmp_path):
    bad = dict(GOOD, datasets=[dict(GOOD["datasets"][0], name="bibtexx")])
    assert_one_line_error(cli("run", write(tmp_path, bad), f"runs_dir={tmp_path}/runs"), "bibtexx", "did you mean 'bibtex'")


def test_missing_dataset_files(cli, tmp_path):
    bad = dict(GOOD, datasets=[{"name": "bibtex", "path": str(tmp_path / "no-bibtex"), "variants": [{"name": "A", "alpha": 0.5}]}])
    assert_one_line_error(cli("run", write(tmp_path, bad), f"runs_dir={tmp_path}/runs"), "no-bibtex", "not found")


def test_unknown_method(cli, tmp_path):
    bad = dict(GOOD, methods={"poxn": {"p": [5], "lam": [0.9]}})
    assert_one_line_error(cli("run", write(tmp_path, bad), f"runs_dir={tmp_path}/runs"), "poxn", "did you mean 'poxm'")


@pytest.mark.parametrize("override,needle", [("training.epochs", "expected key=value"),
                                             ("training.epochs=zero", "training.epochs"),
                                             ("trainig.epochs=3", "did you mean 'training'"),
                                             ("datasets.7.name=x", "not a valid index")])
def test_bad_override(cli, tmp_path, override, needle):
    assert_one_line_error(cli("run", write(tmp_path, GOOD), override), needle)


def test_bad_arguments(cli, tmp_path):
    assert_one_line_error(cli("run", write(tmp_path, GOOD), "--no-such-flag"), "unrecognized arguments")
    assert_one_line_error(cli("run"), "CONFIG")
    assert_one_line_error(cli("frobnicate"), "invalid choice")
    assert_one_line_error(cli("train", write(tmp_path, GOOD)), "--out")


def test_bad_run_dir(cli, tmp_path):
    for cmd in ("resume", "status", "report", "ui"):
        assert_one_line_error(cli(cmd, tmp_path / "missing"), "run directory not found")
    assert_one_line_error(cli("status", tmp_path), "not a poxm run directory")


def test_print_config_is_resolved_and_loads_back(cli, tmp_path):
    from orchestration.rundir import sweep_hash
    from poxm_core.config.schema import load_config

    src = write(tmp_path, GOOD)
    r = cli("run", src, "--runs-dir", tmp_path, "training.epochs=3", "--print-config")   # overrides after options too
    assert r.returncode == 0, r.stderr
    printed = yaml.safe_load(r.stdout)
    assert printed["training"]["epochs"] == 3 and printed["training"]["batch_size"] == 64   # a default, filled in
    assert printed["methods"]["logging"]["init"] is None and printed["training"]["init"] == "fresh"
    again = load_config(write(tmp_path, printed, "printed.yaml"))
    assert sweep_hash(again) == sweep_hash(load_config(src, ["training.epochs=3"]))
    from orchestration.stages.sweep import plan_sweep
    plan_sweep(again, runs_dir=tmp_path / "runs")     # the resolved config is a valid sweep (methods validate)


def test_shipped_configs_load_and_plan(tmp_path):
    from orchestration.stages.sweep import plan_sweep
    from poxm_core.config.schema import load_config

    found = sorted((REPO / "configs").glob("*.yaml"))
    assert {p.name for p in found} >= {"quickstart.yaml", "bibtex.yaml", "delicious.yaml", "eurlex.yaml",
                                       "wiki10-31k.yaml", "amazon-670k.yaml", "gpu-smoke.yaml"}
    for p in found:      # user-supplied datasets (eurlex, wiki10, amazon) are absent here: names only
        plan = plan_sweep(load_config(p), runs_dir=tmp_path / "runs", check_data=False)
        assert plan.specs, p.name


@pytest.mark.slow
def test_ui_serves_the_run_store_and_stops_with_its_workers(tmp_path):
    """`poxm ui` serves the run's SQLite store on 127.0.0.1, and SIGTERM leaves no server or worker process
    behind (mlflow forks uvicorn and job-queue workers; `poxm ui` takes their whole group down)."""
    import json
    import os
    import re
    import signal
    import socket
    import time
    import urllib.request

    import mlflow

    run = tmp_path / "cli-0123456789ab"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(GOOD))
    (run / "sweep.json").write_text(json.dumps({"trials": []}))
    mlflow.set_tracking_uri(f"sqlite:///{run}/mlflow.db")
    mlflow.set_experiment("cli-ui")          # creates the store, as a sweep's driver does
    mlflow.set_tracking_uri("")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out, err = tmp_path / "ui.out", tmp_path / "ui.err"
    proc = subprocess.Popen(POXM + ["ui", str(run), "--port", str(port)], cwd=REPO, start_new_session=True,
                            stdout=out.open("w"), stderr=err.open("w"))
    try:
        deadline = time.time() + 180   # a loaded 2-core machine has taken > 90 s
        while True:
            try:
                body = urllib.request.urlopen(
                    urllib.request.Request(f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search",
                                           data=b'{"max_results": 10}', headers={"Content-Type": "application/json"}),
                    timeout=2).read()
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, "poxm ui did not come up"
                time.sleep(0.5)
        assert "cli-ui" in [e["name"] for e in json.loads(body)["experiments"]]
        # the UI's page, through poxm ui's proxy, sets the browser's view to model training (MLflow 3.17
        # ignores the experiment tag); the rest passes through unchanged
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read().decode()
        from orchestration.tracking.ui import MODE_SCRIPT
        assert MODE_SCRIPT in page and page.index(MODE_SCRIPT) < page.index("static-files")   # before MLflow's own
        while "answers" not in out.read_text() and time.time() < deadline:  # the last line follows /health
            time.sleep(0.2)
        # three lines of poxm's own: what it starts, the URL, that the server answers; nothing of MLflow's
        # (security banner, warnings) on either stream (no mlflow_runs.json here, so no experiment to point
        # at: the URL is the server's address)
        lines = out.read_text().strip().splitlines()
        assert len(lines) == 3, lines
        assert lines[0].startswith(f"poxm ui: starting MLflow's server on the store of {run.name}"), lines
        assert lines[1] == f"MLflow UI: http://127.0.0.1:{port}", lines
        assert re.fullmatch(r"poxm ui: MLflow's server answers \(\d+ s\); Ctrl-C stops it", lines[2]), lines
        assert err.read_text() == ""
        t0 = time.time()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=40) == 0
        assert time.time() - t0 < 2.0      # uvicorn's graceful shutdown alone took ~20 s
        assert _processes_mentioning(str(run), within_s=10) == []   # no server or worker left behind
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _processes_mentioning(text: str, within_s: float) -> list[int]:
    """Pids whose command line or environment mentions `text` (the MLflow server passes the store to
    its workers through both), polled until none is left or `within_s` passes."""
    import os
    import time
    deadline = time.time() + within_s
    while True:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    blob = f.read()
                with open(f"/proc/{pid}/environ", "rb") as f:
                    blob += f.read()
            except OSError:
                continue
            if text.encode() in blob and int(pid) != os.getpid():
                found.append(int(pid))
        if not found or time.time() > deadline:
            return found
        time.sleep(0.5)


def test_headline_is_x100_in_the_report_method_order(tmp_path):
    import pandas as pd

    from orchestration.cli import headline
    (tmp_path / "results").mkdir()
    rows = [("synthetic", v, m, seed, r5) for v in ("A", "B") for seed in (0, 1)
            for m, r5 in (("wpoxm", 0.30), ("dm", 0.20), ("poxm", 0.25 + 0.01 * seed), ("logging", 0.1))]
    pd.DataFrame([{"dataset": d, "variant": v, "method": m, "seed": s, "selection": "is", "criterion": "IS",
                   "test_R@5": r} for d, v, m, s, r in rows]
                 + [{"dataset": "synthetic", "variant": "A", "method": "poxm", "seed": 0, "selection": "oracle",
                     "criterion": "IS", "test_R@5": 0.9}]).to_csv(tmp_path / "results" / "selection.csv", index=False)
    text = headline(tmp_path)
    lines = text.splitlines()
    assert "(x100)" in lines[0]
    body = [ln.split() for ln in lines[2:]]
    # the report's order (logging, DM, POXM, wPOXM) and names, not the keys alphabetically; x100, mean over seeds
    assert [b[1:-2] for b in body] == [["Logging", "policy"], ["Direct", "Method"], ["POXM"], ["wPOXM"]]
    assert body[2][-2:] == ["25.50", "25.50"] and body[0][-1] == "10.00"


def test_poxm_command_is_the_one_that_works(tmp_path, monkeypatch):
    from orchestration import cli
    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    exe = venv / "poxm"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(exe), "run"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")                 # the venv is not on PATH
    assert cli.poxm_command() == ".venv/bin/poxm"
    monkeypatch.setenv("PATH", f"{venv}:/usr/bin:/bin")         # activated: plain 'poxm' works
    assert cli.poxm_command() == "poxm"
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(sys, "argv", [str(REPO / "orchestration" / "cli.py")])     # python -m orchestration.cli
    assert cli.poxm_command().endswith(" -m orchestration.cli")


@pytest.mark.slow
def test_no_mlflow_info_lines_and_no_stray_escape_code(tmp_path):
    """With Ray imported (it calls colorama.init()) and a fresh MLflow store opened, a poxm command on a
    terminal writes no 'INFO mlflow...' line and no ESC[0m at exit."""
    import os
    import pty
    code = ("import sys; from orchestration.cluster.ray_setup import quiet_libraries; quiet_libraries(); "
            "import ray.autoscaler._private.cli_logger; import mlflow; "
            f"mlflow.MlflowClient('sqlite:///{tmp_path}/m.db').search_experiments(); "
            "from orchestration.cli import main; sys.exit(main(['status', '/nonexistent/run']))")
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdin=follower, stdout=follower,
                            stderr=follower, env={**env, "PYTHONPATH": str(REPO)})
    os.close(follower)
    chunks = []
    while True:
        try:
            b = os.read(leader, 4096)
        except OSError:
            break
        if not b:
            break
        chunks.append(b)
    proc.wait(timeout=60)
    text = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 2 and "poxm: error:" in text, text
    assert "INFO" not in text and "\x1b[0m" not in text, repr(text)


def test_mode_script_goes_first_in_head():
    from orchestration.tracking.ui import MODE_SCRIPT, with_mode_script
    html = b"<!doctype html><html><head><script src=main.js></script></head></html>"
    out = with_mode_script(html).decode()
    assert out.startswith("<!doctype html><html><head>" + MODE_SCRIPT) and out.endswith("<script src=main.js></script></head></html>")
    assert 'localStorage.getItem("mlflow.workflowType_v1")' in MODE_SCRIPT and '"machine_learning"' in MODE_SCRIPT
