"""The cluster image end to end: scripts/test-image.sh builds docker/Dockerfile from a local base and runs
the KubeRay recipe's cluster as containers on this machine (Ray head, Ray worker, MLflow server, all on
127.0.0.1), submits the quickstart sweep as the RayJob does, checks MLflow and the report, and kills the
worker mid-sweep (docker/README.md, "Testing the image on one machine"). Skipped, with the script's
reason, where no Docker daemon answers and none can be started (the script exits 77 then)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SKIP = 77          # scripts/test-image.sh: it cannot run on this machine (and says why)


@pytest.mark.slow
@pytest.mark.longest
@pytest.mark.timeout(3600)
def test_the_image_serves_the_rayjob_on_this_machine(capsys):
    if shutil.which("docker") is None:
        pytest.skip("no docker command (apt-get install docker.io debootstrap; .ci/run does)")
    r = subprocess.run([str(REPO / "scripts" / "test-image.sh")], cwd=REPO, capture_output=True, text=True,
                       timeout=3500)
    if r.returncode == SKIP:
        pytest.skip(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, r.stderr[-8000:]
    assert "no container socket off 127.0.0.1" in r.stderr
    assert "the same" in r.stderr and "final rows" in r.stderr
    with capsys.disabled():          # what it measured, in the test log (build time, image size, sweeps)
        print("\n" + "\n".join(line for line in r.stderr.splitlines()
                                if any(w in line for w in ("base image", "built", "measured:")))[-2000:])
