"""Fixtures of the tests of what poxm trusts and checks before a run (helpers: tests/cli_peers.py)."""
from __future__ import annotations

import pytest

from orchestration import rundir
from orchestration.tracking import store
from tests.cli_peers import SilentListener, http_server


@pytest.fixture
def no_user_settings(monkeypatch):
    """The user's settings (plugins, storage path, tracking URI, Ray address, MLflow credentials) unset and
    poxm's remembered ones reset around the test (modules that need it: pytestmark usefixtures)."""
    for k in ("POXM_PLUGINS", "POXM_PLUGIN_PATH", "POXM_STORAGE_PATH", "MLFLOW_TRACKING_URI", "RAY_ADDRESS",
              "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        monkeypatch.delenv(k, raising=False)

    def reset():
        rundir.set_user_settings()
        store.set_user_uri(None)
    reset()
    yield
    reset()


@pytest.fixture
def no_sweep(monkeypatch):
    """The sweep must never start: every check comes before it."""
    import orchestration.stages.sweep as sweep

    def never(*a, **k):
        raise AssertionError("the sweep started: the check did not come first")
    for name in ("run_sweep", "resume_sweep", "report_only"):
        monkeypatch.setattr(sweep, name, never)


@pytest.fixture
def short_peer_wait(monkeypatch):
    """A peer's handshake waits 1 s instead of preflight.CONNECT_TIMEOUT_S (5 s) before it is called silent:
    a test of a peer that never answers waits that long for nothing; the bound it proves is the same."""
    from orchestration.cluster import preflight
    assert preflight.CONNECT_TIMEOUT_S == 5.0, "the wait the product promises changed: say so in docs/orchestration.md"
    monkeypatch.setattr(preflight, "CONNECT_TIMEOUT_S", 1.0)


@pytest.fixture
def silent(short_peer_wait):
    s = SilentListener()
    yield s
    s.close()


@pytest.fixture
def answers_500():
    srv = http_server()
    yield srv
    srv.shutdown()
    srv.server_close()
