"""`poxm ui RUN_DIR`: a lightweight MLflow server on the run's own store, and the URL of its runs table.

The server is `mlflow server` with one uvicorn worker, no job execution (MLflow 3 otherwise starts a
huey job runner and its workers), no access log, logging at warning level. It runs in its own process
group, which is taken down as a whole on Ctrl-C or SIGTERM (SIGTERM, then SIGKILL after half a second:
uvicorn's own graceful shutdown is far slower; docs/performance.md). `poxm ui` prints one line at once (what it starts), the URL as
soon as its proxy listens (a request waits there until the server answers /health; the server takes up to
a minute on a busy machine) and one line when the server answers. The URL is the experiment's runs table
in model-training mode
(`#/experiments/<id>/runs?workflowType=machine_learning`; MLflow 3.17's UI routes). The server's
own output (its security banner, warnings) goes to a temporary log, shown only if it fails.

MLflow 3.17's UI picks the experiment page's mode (GenAI or model training) from the URL's
`workflowType` or else the browser's last choice (local storage 'mlflow.workflowType_v1'), default
GenAI; the experiment tag `mlflow.experimentKind` is no longer read (a feature flag in its JavaScript
bundle that returns true routes the kind through the workflow type). So a run page reached from the
runs table (its links carry no parameter) would open in the GenAI layout. `poxm ui` therefore puts
a small proxy in front of the server, on the port the user asked for: it passes every request
through unchanged, except that the UI's page (`/`) gets one line of script that sets that browser
choice to model training when the browser has made none. The server itself listens on a free
local port.
"""
from __future__ import annotations

import http.client
import http.server
import os
import shutil
import signal
import socket
import threading
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from poxm_core.common.errors import PoxmInputError

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


MODE_KEY = "mlflow.workflowType_v1"      # MLflow 3.17's local-storage key of the browser's view choice
MODE_SCRIPT = (f'<script>try{{if(!localStorage.getItem("{MODE_KEY}"))'
               f'localStorage.setItem("{MODE_KEY}",JSON.stringify("machine_learning"))}}catch(e){{}}</script>')
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


def with_mode_script(html: bytes, extra: str = "") -> bytes:
    """The UI's page with MODE_SCRIPT (and `extra`, e.g. view_script's) first in <head>, before MLflow's
    own scripts read the choices."""
    script = (MODE_SCRIPT + extra).encode()
    i = html.find(b"<head>")
    return html[:i + 6] + script + html[i + 6:] if i >= 0 else script + html


# MLflow 3.17's runs page keeps its view (columns, widths, expanded runs, ...) in the browser's local
# storage under this key, per experiment; the names of its columns are '<type>.`<key>`'.
VIEW_KEY = 'MLflowLocalStorage-1.1-ExperimentPage-["{exp_id}"]-ReactComponentState'
RUN_NAME_COLUMN = "attributes.`Run Name`"
RUN_NAME_WIDTH = 300      # px: 'A s0 pm_banditnet p50 λ.05' in full (MLflow's default, 190, cuts λ off)


def view_state(parent: str | None, criterion: str = "IS", datasets: int = 1, slate_size: int = 5,
               keys: dict[str, int] | None = None) -> dict:
    """The runs page's first view of a sweep: the sweep's run unfolded, the columns that tell its grid
    points apart (method, variant, p, λ, seed; the dataset when there are several) and the metrics that
    matter (the validation estimate the selection uses, test R@5 ×100, the run's own share of its trial's
    compute), the run name wide enough to read in full, and the charts over every run (MLflow's default
    draws the first 10), opening on the selection's estimate against p and the curves (charts.py)."""
    from orchestration.tracking.charts import chart_view
    cols = (["params.`dataset`"] if datasets > 1 else []) + [
        "params.`method`", "params.`variant`", "params.`p`", "params.`lam`", "params.`seed`",
        f"metrics.`val/{criterion}`", "metrics.`test/R_at_5`", "tags.`head_seconds`"]
    sections, charts = chart_view(criterion, slate_size, keys)
    return {"searchFilter": "", "orderByKey": "attributes.start_time", "orderByAsc": False, "startTime": "ALL",
            "lifecycleFilter": "Active", "datasetsFilter": [], "modelVersionFilter": "All Runs",
            # the UI applies widths only to the columns named in columnOrder
            "selectedColumns": cols, "columnOrder": [RUN_NAME_COLUMN],
            "columnWidths": {RUN_NAME_COLUMN: RUN_NAME_WIDTH},
            "runsExpanded": {parent: True} if parent else {}, "runsPinned": [], "runsHidden": [],
            "runsVisibilityMap": {}, "runsHiddenMode": "SHOW_ALL", "viewMaximized": False, "runListHidden": False,
            "compareRunSections": sections, "compareRunCharts": charts,
            "isAccordionReordered": True, "useGroupedValuesInCharts": True, "hideEmptyCharts": True,
            "groupBy": None, "groupsExpanded": {}, "autoRefreshEnabled": True,
            "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 0, "selectedXAxisMetricKey": ""}}


def view_script(exp_id: str, state: dict) -> str:
    """A script that sets the experiment's runs-page view to `state` when the browser has none for it
    yet (a user's own choice of columns is kept), and keeps MLflow's assistant panel closed at first."""
    import json
    key = json.dumps(VIEW_KEY.format(exp_id=exp_id))
    return ("<script>try{var s=localStorage;"
            f"if(!s.getItem({key}))s.setItem({key},{json.dumps(json.dumps(state))});"
            'if(!s.getItem("mlflow.assistant.panelOpen_v1")){s.setItem("mlflow.assistant.panelOpen_v1","false");'
            's.setItem("mlflow.assistant.fab.autoOpenedOnFirstLoad_v1","true")}'
            "}catch(e){}</script>")


class _Proxy(http.server.BaseHTTPRequestHandler):
    """Passes requests to the MLflow server (`upstream`), streaming the answers; see the module doc."""
    protocol_version = "HTTP/1.0"       # one request per connection: answers end when the connection does
    upstream: tuple[str, int] = ("127.0.0.1", 0)
    extra: str = ""                     # view_script's, after MODE_SCRIPT
    up: Upstream | None = None          # whether the MLflow server answers yet (requests wait for it)

    def log_message(self, *args) -> None:
        pass

    def _forward(self) -> None:
        if self.up is not None and not self.up.wait():
            self.send_error(503, "MLflow's server did not start (see poxm ui's output)")
            return
        page = self.command == "GET" and self.path.split("?")[0] in ("/", "/index.html")
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in _HOP and not (page and k.lower() == "accept-encoding")}
        conn = http.client.HTTPConnection(*self.upstream, timeout=600)
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read() if page and r.status == 200 else None
            if data is not None and "text/html" in (r.getheader("Content-Type") or ""):
                data = with_mode_script(data, self.extra)
            self.send_response_only(r.status, r.reason)
            for k, v in r.getheaders():
                if k.lower() not in _HOP and not (data is not None and k.lower() == "content-length"):
                    self.send_header(k, v)
            if data is not None:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if data is not None:
                self.wfile.write(data)
            elif self.command != "HEAD":
                while chunk := r.read1(1 << 16):
                    self.wfile.write(chunk)
        except (OSError, http.client.HTTPException):
            pass            # the browser left, or the server is going down
        finally:
            conn.close()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _forward


class Upstream:
    """The MLflow server behind the proxy: `answers()` once it does, `failed()` if it never will; a
    request that comes before either waits (`wait`), so the URL can be given as soon as the proxy
    listens and a browser opened on it gets the page once the server is up."""

    def __init__(self, timeout_s: float = START_TIMEOUT_S):
        self._done, self.ok, self.timeout_s = threading.Event(), False, timeout_s

    def answers(self) -> None:
        self.ok = True
        self._done.set()

    def failed(self) -> None:
        self._done.set()

    def wait(self) -> bool:
        return self._done.wait(self.timeout_s) and self.ok


def start_proxy(host: str, port: int, upstream_port: int, extra: str = "",
                up: Upstream | None = None) -> http.server.ThreadingHTTPServer:
    handler = type("Proxy", (_Proxy,), {"upstream": ("127.0.0.1", upstream_port), "extra": extra, "up": up})
    server = http.server.ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


def sweep_view(rd, ml: dict, exp_id: str) -> str:
    """view_script for the run directory's sweep ('' without an experiment id)."""
    if not exp_id:
        return ""
    criterion, datasets, k = "IS", 1, 5
    try:
        import yaml
        cfg = yaml.safe_load(rd.config.read_text()) or {}
        cfg = cfg.get("config", cfg)
        criterion = str((cfg.get("selection") or {}).get("criterion") or "IS")
        datasets = len(cfg.get("datasets") or [1])
        k = int((cfg.get("model") or {}).get("slate_size") or 5)
    except (OSError, ValueError, AttributeError, TypeError, yaml.YAMLError):
        pass
    from orchestration.tracking.charts import store_keys
    keys = store_keys(rd.mlflow_db, exp_id) if rd.mlflow_db.is_file() else None     # the sweep's metrics
    return view_script(exp_id, view_state(ml.get("parent_run_id"), criterion, datasets, k, keys))


def is_loopback_host(host: str) -> bool:
    """127.0.0.0/8, ::1 or 'localhost': reachable from this machine only."""
    import ipaddress
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_line(host: str, port: int) -> str | None:
    """What a non-loopback --host exposes, in one line (None on loopback): the proxy forwards every
    request to MLflow's server, whose REST API reads and writes the store and has no login."""
    if is_loopback_host(host):
        return None
    return (f"poxm: warning: --host {host} exposes this run's MLflow store on port {port} to every machine that "
            "reaches this one: the UI and MLflow's REST API, which reads and writes (creates, changes and deletes "
            "runs, metrics and artifacts) without a login; keep the default --host 127.0.0.1 and use an SSH "
            "tunnel to browse from elsewhere")


def _store_to_serve(rd, ml: dict, exp_id: str, say) -> str | None:
    """The URI of the store `poxm ui` serves: the one mlflow_runs.json records when it is the run
    directory's own or another sqlite file you give (checked_uri), else run_dir/mlflow.db (one line when
    there is none yet). None when the sweep logs to a server: its runs' address is said instead
    (nothing is sent to it, and no credentials are shown)."""
    from orchestration.tracking.store import checked_uri, is_run_dir_store, safe_uri

    recorded = str(ml.get("tracking_uri") or "")
    if recorded and not is_run_dir_store(rd.root, recorded) and not recorded.startswith("sqlite:"):
        say(f"this sweep logs to {safe_uri(recorded)}: its runs: {runs_url(safe_uri(recorded), exp_id or '?')}")
        return None
    uri = checked_uri(rd.root, ml) if recorded else None     # another sqlite file: only the one you give
    if uri is None:
        if not rd.mlflow_db.is_file():
            raise PoxmInputError(f"{rd.mlflow_db}: no MLflow store yet (has the sweep started?)")
        uri = "sqlite:///" + str(rd.mlflow_db)
    return uri


def _browsed(rd, uri: str, copy_dir: tempfile.TemporaryDirectory) -> str:
    """The URI to serve: the run directory's own store is never written here (a read-only archive or a
    copied run), so it is served from a relocated copy in `copy_dir`; any other store as it is."""
    from orchestration.tracking.store import browse_copy, is_run_dir_store

    if not is_run_dir_store(rd.root, uri):
        return uri
    try:
        return browse_copy(rd.root, Path(copy_dir.name))
    except BaseException:
        copy_dir.cleanup()
        raise


def _say_failure(exc: Exception, log) -> None:
    """The server's failure in one line, with the last lines it wrote (its banner and warnings)."""
    log.seek(0)
    tail = log.read().strip().splitlines()[-15:]
    print(f"poxm: error: {exc}" + "".join(f"\n  {line}" for line in tail), file=sys.stderr)


def serve(run_dir, host: str = "127.0.0.1", port: int = 5000, say=print, check_port=None) -> int:
    """`poxm ui`: serve the run's store until Ctrl-C/SIGTERM; exit status 0, or 1 if the server failed.
    One line at once (what it prepares), the URL as soon as the proxy listens (a request waits there
    until MLflow's server answers), and one line when the server answers."""
    from orchestration.rundir import RunDir, read_json

    rd = RunDir.existing(run_dir)
    ml = read_json(rd.mlflow_runs, {}) or {}
    ml = ml if isinstance(ml, dict) else {}
    exp_id = str(ml.get("experiment_id", ""))
    uri = _store_to_serve(rd, ml, exp_id, say)
    if uri is None:
        return 0
    exposed = exposure_line(host, port)
    if exposed:
        print(exposed, file=sys.stderr, flush=True)
    if check_port is not None:
        check_port(host, port)          # a busy or invalid port: one line, exit 2 (orchestration.cli)
    t0 = time.time()
    say(f"poxm ui: starting MLflow's server on the store of {rd.root.name} (on a busy machine up to a minute; "
        "the page below waits for it)", flush=True)
    copy_dir = tempfile.TemporaryDirectory(prefix="poxm-ui-")
    uri = _browsed(rd, uri, copy_dir)
    log = tempfile.TemporaryFile(mode="w+", prefix="poxm-ui-")   # the server's banner and warnings
    inner = free_port()        # the MLflow server; the user's host:port is the proxy's (module doc)
    proc = subprocess.Popen(server_command(uri, "127.0.0.1", inner, rd.mlartifacts), env=server_env(),
                            start_new_session=True, stdout=log, stderr=subprocess.STDOUT)

    def on_term(*_):
        # stop the server and leave at once: a normal interpreter exit after importing MLflow takes
        # seconds more, and nothing here needs tearing down (the log file is already unlinked)
        stop_group(proc)
        copy_dir.cleanup()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    try:
        return _serve_until_stopped(proc, log, host, port, inner, sweep_view(rd, ml, exp_id), exp_id, say, t0)
    except KeyboardInterrupt:
        on_term()
    finally:
        log.close()
        copy_dir.cleanup()


def _serve_until_stopped(proc, log, host: str, port: int, inner: int, extra: str, exp_id: str, say,
                         t0: float) -> int:
    """The proxy up and its URL said at once; the server waited for (then a line), then served until it ends."""
    up = Upstream()
    try:
        start_proxy(host, port, inner, extra, up)
    except OSError as exc:
        stop_group(proc)
        _say_failure(exc, log)
        return 1
    base = f"http://{host}:{port}"
    say(f"MLflow UI: {runs_url(base, exp_id) if exp_id else base}", flush=True)
    try:
        wait_until_up(proc, f"http://127.0.0.1:{inner}")
    except (RuntimeError, OSError) as exc:
        up.failed()
        stop_group(proc)
        _say_failure(exc, log)
        return 1
    up.answers()
    say(f"poxm ui: MLflow's server answers ({time.time() - t0:.0f} s); Ctrl-C stops it", flush=True)
    # poll, not proc.wait(): a blocking wait holds Popen's waitpid lock, so the SIGTERM handler's
    # own wait for the server could not reap it and would sit out its whole timeout
    while proc.poll() is None:
        time.sleep(0.2)
    return 0 if proc.returncode in (0, -signal.SIGTERM) else 1
