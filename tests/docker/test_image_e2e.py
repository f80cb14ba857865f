"""The cluster image end to end: scripts/test-image.sh builds docker/Dockerfile from a local base and runs
the KubeRay recipe's cluster as containers on this machine (Ray head, Ray worker, MLflow server, all on
127.0.0.1), submits the quickstart sweep as the RayJob does, checks MLflow and the report, and kills the
worker mid-sweep (docker/README.md, "Testing the image on one machine"). Skipped, with the script's
reason, where no Docker daemon answers and none can be started (the script exits 77 then).

The build starts with the test session and the containers when this test runs, last (background.py)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.docker import background

SKIP = 77          # scripts/test-image.sh: it cannot run on this machine (and says why)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_image_serves_the_rayjob_on_this_machine(capsys):
    if shutil.which("docker") is None:
        pytest.skip("no docker command (apt-get install docker.io debootstrap; .ci/run does)")
    if background.started():
        rc, err = background.result(timeout=3500)
    else:
        r = subprocess.run([str(background.SCRIPT)], cwd=background.REPO, capture_output=True, text=True,
                           timeout=3500)
        rc, err = r.returncode, r.stderr
    if rc == SKIP:
        pytest.skip(err.strip().splitlines()[-1])
    assert rc == 0, err[-8000:]
    assert "no container socket off 127.0.0.1" in err
    assert "the same" in err and "final rows" in err
    with capsys.disabled():          # what it measured, in the test log (build time, image size, sweeps)
        print("\n" + "\n".join(line for line in err.splitlines()
                                if any(w in line for w in ("base image", "built", "gate", "measured:")))[-2000:])
