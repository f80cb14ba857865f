"""`poxm ui RUN_DIR`: a lightweight MLflow server on the run's own store, and the URL of its runs table.

The server is `mlflow server` with one uvicorn worker, no job execution (MLflow 3 otherwise starts a
huey job runner and its workers), no access log, logging at warning level. It runs in its own process
group, which is taken down as a whole on Ctrl-C or SIGTERM (SIGTERM, then SIGKILL after half a second:
uvicorn's own graceful shutdown takes ~20 s). `poxm ui` waits until the server answers /health, then
prints one line, the URL of the experiment's runs table in model-training mode
(`#/experiments/<id>/runs?workflowType=machine_learning`; MLflow 3.17's UI routes). The server's
own output (its security banner, warnings) goes to a temporary log, shown only if it fails.

MLflow 3.17's UI picks the experiment page's mode (GenAI or model training) from the URL's
`workflowType` or else the browser's last choice, default GenAI; the experiment tag
`mlflow.experimentKind` is no longer read (a feature flag in its JavaScript bundle that returns
true routes the kind through the workflow type). Hence the printed URL carries the parameter.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from poxm_core.errors import PoxmInputError

START_TIMEOUT_S = 240      # a loaded 2-core machine has taken > 90 s to bring the server up


def runs_url(base: str, experiment_id: str) -> str:
    """The runs table of an experiment in MLflow 3's UI, in model-training (not GenAI) mode."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def server_command(uri: str, host: str, port: int, artifacts: Path | None = None) -> list[str]:
    exe = shutil.which("mlflow", path=str(Path(sys.executable).parent)) or shutil.which("mlflow")
    cmd = ([exe] if exe else [sys.executable, "-m", "mlflow"]) + [
        "server", "--backend-store-uri", uri, "--host", host, "--port", str(port), "--workers", "1",
        "--uvicorn-opts", "--no-access-log --log-level warning"]
    if artifacts is not None:
        cmd += ["--artifacts-destination", artifacts.resolve().as_uri()]
    return cmd


def server_env() -> dict:
    env = dict(os.environ)
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"   # no huey job runner: the UI needs none
    env.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")        # no usage telemetry (and no UI banner asking)
    env.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    env.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning,ignore::FutureWarning")
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def wait_until_up(proc: subprocess.Popen, base: str, timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.time() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited with code {proc.returncode} before answering")
        if time.time() > deadline:
            raise RuntimeError(f"mlflow server did not answer {base}/health within {timeout_s:.0f} s")
        time.sleep(0.3)


STOP_GRACE_S = 0.5   # SIGTERM, then SIGKILL: the server holds no state the store needs flushed


def stop_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the server's process group, then SIGKILL what is left (uvicorn workers included)."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass


def serve(run_dir, host: str = "127.0.0.1", port: int = 5000, say=print, check_port=None) -> int:
    """`poxm ui`: serve the run's store until Ctrl-C/SIGTERM; exit status 0, or 1 if the server failed."""
    from orchestration import tracking
    from orchestration.rundir import RunDir, read_json

    rd = RunDir.existing(run_dir)
    ml = read_json(rd.mlflow_runs, {}) or {}
    uri = tracking.stored_uri(rd.root, ml) if ml else None
    if uri is None:
        if not rd.mlflow_db.is_file():
            raise PoxmInputError(f"{rd.mlflow_db}: no MLflow store yet (has the sweep started?)")
        uri = "sqlite:///" + str(rd.mlflow_db)
    exp_id = str(ml.get("experiment_id", ""))
    if not uri.startswith("sqlite:"):
        say(f"this sweep logs to {uri}: its runs: {runs_url(uri, exp_id or '?')}")
        return 0
    if check_port is not None:
        check_port(host, port)          # a busy or invalid port: one line, exit 2 (orchestration.cli)
    log = tempfile.TemporaryFile(mode="w+", prefix="poxm-ui-")   # the server's banner and warnings
    proc = subprocess.Popen(server_command(uri, host, port, rd.mlartifacts), env=server_env(),
                            start_new_session=True, stdout=log, stderr=subprocess.STDOUT)

    def on_term(*_):
        # stop the server and leave at once: a normal interpreter exit after importing MLflow takes
        # seconds more, and nothing here needs tearing down (the log file is already unlinked)
        stop_group(proc)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    base = f"http://{host}:{port}"
    try:
        try:
            wait_until_up(proc, base)
        except RuntimeError as exc:
            stop_group(proc)
            log.seek(0)
            tail = log.read().strip().splitlines()[-15:]
            print(f"poxm: error: {exc}" + "".join(f"\n  {line}" for line in tail), file=sys.stderr)
            return 1
        url = runs_url(base, exp_id) if exp_id else base
        say(f"MLflow UI: {url}", flush=True)
        # poll, not proc.wait(): a blocking wait holds Popen's waitpid lock, so the SIGTERM handler's
        # own wait for the server could not reap it and would sit out its whole timeout
        while proc.poll() is None:
            time.sleep(0.2)
        return 0 if proc.returncode in (0, -signal.SIGTERM) else 1
    except KeyboardInterrupt:
        on_term()
    finally:
        log.close()
