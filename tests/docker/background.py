"""The image test's build, started as the test session starts (its 3 minutes of debootstrap, pip and layer
writing overlap the other tests), and its containers, started only when the image test itself runs, last
of the session (tests/tier_order.py puts it there), so that no container's Ray shares the machine with
the other tests' Ray clusters: scripts/test-image.sh waits at POXM_IMAGE_TEST_GATE once the image is
built. tests/conftest.py calls `start` and `stop`; test_image_e2e.py calls `result`."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "test-image.sh"
TEST_ID = "tests/docker/test_image_e2e.py::test_the_image_serves_the_rayjob_on_this_machine"
OFF = "POXM_IMAGE_TEST_BACKGROUND"      # =0: the test builds and runs the image itself, as before

_RUN: dict = {}


def wanted(items) -> bool:
    """The image test is among the tests to run, Docker is installed, and the background is not turned off."""
    return (os.environ.get(OFF, "1") != "0" and shutil.which("docker") is not None
            and any(item.nodeid == TEST_ID for item in items))


def start() -> None:
    """scripts/test-image.sh in the background, stopping at its gate once the image is built."""
    folder = Path(tempfile.mkdtemp(prefix="poxm-image-test-"))
    gate = folder / "gate"
    out = (folder / "stderr").open("w")
    proc = subprocess.Popen([str(SCRIPT)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=out,
                            env={**os.environ, "POXM_IMAGE_TEST_GATE": str(gate)}, start_new_session=True)
    _RUN.update(proc=proc, folder=folder, gate=gate, out=out)


def started() -> bool:
    return "proc" in _RUN


def result(timeout: float) -> tuple[int, str]:
    """Open the gate, wait for the script; (its exit status, its stderr)."""
    _RUN["gate"].touch()
    rc = _RUN["proc"].wait(timeout=timeout)
    _RUN["out"].close()
    return rc, (_RUN["folder"] / "stderr").read_text()


def stop() -> None:
    """At the session's end: a script still running (the session stopped before the image test) is ended
    (its trap removes its containers, images and private daemon), and its folder removed."""
    proc = _RUN.get("proc")
    if proc is None:
        return
    if proc.poll() is None:
        proc.terminate()                  # the script's trap: exit 130 after cleaning up
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
    _RUN["out"].close()
    shutil.rmtree(_RUN["folder"], ignore_errors=True)
    _RUN.clear()
