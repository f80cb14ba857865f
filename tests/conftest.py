"""Fixtures shared by test modules."""
from __future__ import annotations

import os
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
