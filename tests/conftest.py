"""Fixtures shared by test modules: one local Ray for the test run, and a check that the tests leave
no file behind in the checkout."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Ray's state of the tests' sweeps goes to a folder of this test session, not the user's own
# (orchestration.cluster.ray_state); subprocesses (the CLI tests) inherit it.
os.environ.setdefault("POXM_STATE_DIR", tempfile.mkdtemp(prefix="poxm-test-state-"))

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------- Ray

class SharedRay:
    """One local Ray of 2 CPUs for every in-process sweep of the test run: started by the first test
    that asks for it, shut down when the run ends (or by a test that needs a Ray of its own, after
    which the next test that asks starts it again). Started as `poxm` starts a local Ray: every Ray
    process on 127.0.0.1 only, secret-looking variables held out of their environment."""

    def up(self) -> None:
        import ray
        if ray.is_initialized():
            return
        from orchestration.cluster.ray_setup import LOOPBACK, loopback_only, secrets_withheld
        with secrets_withheld(), loopback_only():
            ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
                     _node_ip_address=LOOPBACK)

    def down(self) -> None:
        if "ray" in sys.modules:
            import ray
            if ray.is_initialized():
                ray.shutdown()


SHARED_RAY = SharedRay()


@pytest.fixture(scope="module")
def ray_session():
    """The test run's one local Ray (SharedRay), for a module's in-process sweeps and Ray tasks."""
    SHARED_RAY.up()
    yield


@pytest.fixture
def fresh_ray():
    """A Ray started for this test alone (a test that asserts what a new Ray holds); shared afterwards."""
    SHARED_RAY.down()
    SHARED_RAY.up()
    yield


def pytest_collection_modifyitems(session, config, items):
    """The files of tests marked `longest` first, the rest in their order: in worker processes (`-n N
    --dist loadfile` hands out whole files in collection order) the longest file then starts at once
    instead of last, where the run would end waiting for it alone (the image test: 6 of 15 minutes)."""
    first = {item.path for item in items if item.get_closest_marker("longest")}
    items.sort(key=lambda item: item.path not in first)       # a stable sort: the order within each kept


def pytest_sessionfinish(session, exitstatus):
    SHARED_RAY.down()


# ------------------------------------------------------------------------------- files left behind

def _untracked() -> set[str] | None:
    """Paths in the checkout that git neither tracks nor ignores (None outside a git checkout)."""
    try:
        r = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(filter(None, r.stdout.split("\0"))) if r.returncode == 0 else None


# Set by .ci/run (a clone of its own): a file left behind fails the test run. Elsewhere the checkout may be
# shared with people adding files while the tests run, so the same list is a warning at the end of the run.
STRICT_ENV = "POXM_TESTS_LEAVE_NOTHING"
_LEFT: list[str] = []


@pytest.fixture(scope="session", autouse=True)
def no_files_left_in_the_checkout():
    """The checkout must not gain a file that git neither tracks nor ignores: an MLflow server's
    mlartifacts/, a run directory, a cache. What a test writes goes to its tmp_path; what .gitignore
    names (.venv/, .pytest_cache/) is named on purpose. With STRICT_ENV=1 a file left behind is an error
    at the run's last teardown (the run fails); without, a warning at the end of the run."""
    before = _untracked()
    yield
    after = _untracked()
    if before is None or after is None:
        return
    _LEFT[:] = sorted(after - before)
    if os.environ.get(STRICT_ENV) == "1":
        assert not _LEFT, (f"the tests left {len(_LEFT)} file(s) in the checkout that .gitignore does not name "
                           f"(write them under tmp_path): {_LEFT[:20]}")


def pytest_terminal_summary(terminalreporter):
    if _LEFT and os.environ.get(STRICT_ENV) != "1":
        terminalreporter.section("files the checkout gained during the tests", red=True, bold=True)
        terminalreporter.line(f"{len(_LEFT)} file(s) git neither tracks nor ignores appeared while the tests ran "
                              f"(left by a test, or added by someone else meanwhile; {STRICT_ENV}=1 makes this an "
                              "error):", red=True)
        for p in _LEFT[:20]:
            terminalreporter.line(f"  {p}", red=True)


# ---------------------------------------------------------------------------------------- streams

@pytest.fixture
def stderr_buffer(monkeypatch):
    """stderr replaced by an in-memory stream that is a terminal or not: `stderr_buffer(tty=True)` returns
    the buffer (a real stream object, so tqdm and logging write to it as to a file)."""
    def make(tty: bool) -> io.StringIO:
        class Stream(io.StringIO):
            def isatty(self):
                return tty
        buf = Stream()
        monkeypatch.setattr(sys, "stderr", buf)
        return buf
    return make
