"""Every peer is checked by the protocol it must speak, within a bounded time, before anything is
written (orchestration.cluster.peer_checks): a listener on 127.0.0.1 that accepts and never answers, an
HTTP server answering 500 and a gRPC server that is no Ray GCS are each one line, exit 2, no run
directory; a real MLflow answer passes, and so does a real GCS's (a head started by tests/ray_cluster.py:
test_node_loss.py checks it on its cluster). All peers are real servers on 127.0.0.1."""
from __future__ import annotations

import http.server
import json
import time

import pytest
from tests.cli_peers import cli, http_server, one_line, planned, write_cfg

from orchestration.cluster.preflight import check_address, check_mlflow_uri
from poxm_core.common.errors import PoxmInputError

pytestmark = pytest.mark.usefixtures("no_user_settings")   # the user's settings reset around each test


@pytest.mark.parametrize("flag", ["--mlflow-uri", "--address"])
def test_a_silent_peer_is_one_line_within_bounds_and_leaves_nothing(tmp_path, capsys, no_sweep, silent, flag):
    value = f"http://127.0.0.1:{silent.port}" if flag == "--mlflow-uri" else f"127.0.0.1:{silent.port}"
    runs = tmp_path / "runs"
    t0 = time.monotonic()
    rc, out, err = cli(capsys, "run", write_cfg(tmp_path / "c.yaml"), "--runs-dir", runs, flag, value)
    took = time.monotonic() - t0
    one_line(rc, err, flag, "answer")
    assert took < 20, took
    assert not runs.exists()
    assert silent.conns, "the check never connected"


def test_an_http_500_server_is_one_line_and_leaves_nothing(tmp_path, capsys, no_sweep, answers_500):
    runs = tmp_path / "runs"
    uri = f"http://127.0.0.1:{answers_500.server_address[1]}"
    rc, out, err = cli(capsys, "run", write_cfg(tmp_path / "c.yaml"), "--runs-dir", runs, "--mlflow-uri", uri)
    one_line(rc, err, "--mlflow-uri", "HTTP 500")
    assert not runs.exists()
    assert answers_500.requests[0][0].startswith("/api/2.0/mlflow/")


def test_resume_checks_the_users_server_by_protocol_and_writes_nothing(tmp_path, capsys, no_sweep, answers_500):
    rd = planned(tmp_path)
    before = sorted(p.name for p in rd.root.rglob("*"))
    rc, out, err = cli(capsys, "resume", rd.root, "--mlflow-uri", f"http://127.0.0.1:{answers_500.server_address[1]}")
    one_line(rc, err, "HTTP 500")
    assert sorted(p.name for p in rd.root.rglob("*")) == before


class _MLflowLike(http.server.BaseHTTPRequestHandler):
    """Answers get-by-name as MLflow's REST API does."""

    def do_GET(self):       # noqa: N802
        self.server.requests.append((self.path, dict(self.headers)))
        body = json.dumps({"experiment": {"experiment_id": "0", "name": "Default"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_an_mlflow_answer_passes_with_the_users_credentials(monkeypatch):
    srv = http_server(_MLflowLike)
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "s3cret")
        check_mlflow_uri(f"http://127.0.0.1:{srv.server_address[1]}", "--mlflow-uri")
        path, headers = srv.requests[0]
        assert path == "/api/2.0/mlflow/experiments/get-by-name?experiment_name=Default"
        assert headers["Authorization"].startswith("Basic ")
    finally:
        srv.shutdown()
        srv.server_close()


def test_an_http_server_given_as_address_is_one_line(answers_500, short_peer_wait):
    with pytest.raises(PoxmInputError, match="no Ray GCS answers there"):
        check_address(f"127.0.0.1:{answers_500.server_address[1]}")


def test_resume_checks_the_server_named_by_the_environment(tmp_path, capsys, monkeypatch, no_sweep, answers_500):
    """No mlflow_runs.json yet, $MLFLOW_TRACKING_URI names the user's server: it is asked before anything."""
    rd = planned(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{answers_500.server_address[1]}")
    rc, out, err = cli(capsys, "resume", rd.root)
    one_line(rc, err, "$MLFLOW_TRACKING_URI", "HTTP 500")
