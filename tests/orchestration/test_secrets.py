"""Secrets in the shell never reach the Ray that poxm starts (its logs are readable by anyone on the
machine) nor the run directory, while the driver keeps them (an MLflow server may need them); and that
Ray listens on the loopback only."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from poxm_process import POXM, REPO, poxm_env

from tests.ray_cluster import listening_sockets, run_sampled

CANARY = "canary-5b0f2e91d7"


def test_secrets_withheld_only_inside_the_block():
    from orchestration.cluster.ray_setup import is_secret_name, secrets_withheld
    env = {"AWS_SECRET_ACCESS_KEY": "s", "HF_TOKEN": "t", "MLFLOW_TRACKING_PASSWORD": "p", "PATH": "/bin",
           "POXM_DATA_ROOT": "/d"}
    with secrets_withheld(env) as held:
        assert held == ["AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "MLFLOW_TRACKING_PASSWORD"]
        assert env == {"PATH": "/bin", "POXM_DATA_ROOT": "/d"}
    assert env["AWS_SECRET_ACCESS_KEY"] == "s" and len(env) == 5
    with pytest.raises(RuntimeError), secrets_withheld(env):   # restored on error too
        raise RuntimeError
    assert env["HF_TOKEN"] == "t"
    assert not is_secret_name("PATH") and is_secret_name("my_api_key")


def _files_containing(root: Path, needle: bytes) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink() and needle in p.read_bytes():
                hits.append(str(p))
        except OSError:
            pass
    return hits


@pytest.mark.slow
@pytest.mark.timeout(1200)   # one sweep through real Ray: ~1 min alone, far longer on a loaded machine
def test_tiny_sweep_leaves_no_secret_in_run_dir_or_ray_logs(tmp_path, request):
    from tests.orchestration.stages.test_sweep_e2e import TINY      # importable whichever tests are collected
    cfg = json.loads(json.dumps(TINY))
    cfg.update(name="canary", datasets=[{**cfg["datasets"][0], "variants": cfg["datasets"][0]["variants"][:1]}],
               methods={"logging": {}, "dm": {"lr": 0.01}}, training={**cfg["training"], "epochs": 1})
    path = tmp_path / "canary.yaml"
    path.write_text(yaml.safe_dump(cfg))
    # this sweep's own Ray session directory, so only its logs are searched (short: Ray's socket paths
    # must fit in 107 bytes)
    ray_tmp = Path(tempfile.mkdtemp(prefix="pxr", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    env = {**poxm_env(), "AWS_SECRET_ACCESS_KEY": CANARY, "RAY_TMPDIR": str(ray_tmp)}
    # the listening sockets of the sweep's processes (its Ray's among them) sampled while it runs (where `ss` is)
    watch = listening_sockets if shutil.which("ss") else (lambda pids: [])
    r, listening = run_sampled([*POXM, "run", str(path), "--runs-dir", str(tmp_path / "runs")], 400, watch,
                               cwd=REPO, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    sessions = list(ray_tmp.rglob("session_*"))
    assert sessions, f"Ray wrote no session under {ray_tmp}: RAY_TMPDIR not honoured"
    assert any(p.suffix in (".log", ".out", ".err") for p in ray_tmp.rglob("*")), "Ray wrote no logs there"
    hits = _files_containing(tmp_path, CANARY.encode()) + _files_containing(ray_tmp, CANARY.encode())
    assert hits == [], hits
    # the Ray that poxm starts listens on the loopback only: its GCS and raylet (and every worker) on 127.0.0.1
    if shutil.which("ss"):
        assert any("raylet" in ln for ln in listening) and any("gcs_server" in ln for ln in listening), listening
        for ln in listening:
            local = ln.split()[3]
            assert local.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")), ln
