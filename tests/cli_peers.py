"""Shared pieces of the tests of what poxm trusts and checks before a run (tests/orchestration/...): the
CLI in-process, one-line errors, a small config and a planned run directory, and real peers on
127.0.0.1 that misbehave (a listener that accepts and never answers, an HTTP server answering 500).
Their fixtures (the user's settings reset, the sweep replaced by a sentinel, the peers) are in
tests/orchestration/conftest.py."""
from __future__ import annotations

import http.server
import socket
import threading
from pathlib import Path

import yaml

from orchestration.cli import main

CFG = {
    "name": "checks",
    "datasets": [{"name": "synthetic", "synthetic": {"n_train": 60, "n_test": 20, "n_features": 20, "n_labels": 10},
                  "variants": [{"name": "A", "alpha": 0.5}]}],
    "model": {"epochs": 1, "dim": 8, "n_candidates": 6},
    "training": {"epochs": 1},
    "methods": {"logging": {}, "dm": {}},
}


def cli(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_line(rc: int, err: str, *needles: str) -> str:
    assert rc == 2, (rc, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("poxm: error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def write_cfg(path: Path, **extra) -> Path:
    path.write_text(yaml.safe_dump({**CFG, **extra}, sort_keys=False))
    return path


def planned(tmp_path: Path, **extra):
    """A run directory as `poxm run` plans it (nothing trained): its RunDir."""
    from orchestration.stages.plan import plan_sweep, write_plan
    from poxm_core.config.schema import load_config
    plan = plan_sweep(load_config(write_cfg(tmp_path / "sweep.yaml", **extra)), runs_dir=tmp_path / "runs")
    write_plan(plan)
    return plan.rd


class SilentListener:
    """Accepts TCP connections on 127.0.0.1 and never answers; counts them and keeps what they sent."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.got: list[bytes] = []
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.settimeout(0.2)
            self.conns.append(conn)
            try:
                self.got.append(conn.recv(65536))
            except OSError:
                self.got.append(b"")

    def close(self):
        self.stop.set()
        for c in self.conns:
            c.close()
        self.sock.close()


class _Answer500(http.server.BaseHTTPRequestHandler):
    def do_GET(self):       # noqa: N802 -- http.server's name
        self.server.requests.append((self.path, dict(self.headers)))
        body = b"<html>Internal Server Error</html>"
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_POST = do_GET

    def log_message(self, *a):
        pass


def http_server(handler=_Answer500):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.requests = []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv
