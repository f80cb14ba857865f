"""Fixtures shared by test modules."""
from __future__ import annotations

import io
import os
import sys
import tempfile

import pytest

# Ray's state of the tests' sweeps goes to a folder of this test session, not the user's own
# (orchestration.cluster.ray_state); subprocesses (the CLI tests) inherit it.
os.environ.setdefault("POXM_STATE_DIR", tempfile.mkdtemp(prefix="poxm-test-state-"))


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray of 2 CPUs for the module's in-process sweeps, shut down after its last test."""
    import ray
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()


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
