"""A lost node: a sweep on a 2-node Ray cluster on this machine whose worker node dies mid-sweep (its
raylet and every process of it killed with SIGKILL). The sweep must finish on the remaining node, by
itself (Tune retries the failed jobs, resources.max_failures) or after `poxm resume`, with rows
identical to a clean run of the same config on a local Ray.

Layout: the head has 1 CPU, the worker node 2; three trials of one CPU each. Every trial waits after
its first epoch while a hold file exists (POXM_INJECT_HOLD), so that however slowly a loaded machine
starts the trials' jobs, two of them are mid-training at once; the worker node is killed then, so at
least one of them is on it (the head has room for one), and the hold is lifted. Both nodes share this
machine's filesystem, as nodes with a shared run directory do.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from orchestration.cluster.preflight import check_address
from orchestration.stages.epoch_reports import HOLD_ENV
from tests.poxm_process import POXM, REPO, poxm_env, poxm_in_process, tiny_config
from tests.ray_cluster import Cluster, cluster_env

EPOCHS = 4             # the hold keeps trials at epoch 1 until the kill: 4 leave them mid-training there
CONFIG = tiny_config("nodeloss", [1.0, 2.0, 4.0], epochs=EPOCHS, group_by="seed",
                     resources={"cpus_per_trial": 1, "max_failures": 3, "trials_per_job": 1})


def final_rows(run_dir: Path) -> pd.DataFrame:
    df = pd.read_csv(run_dir / "results" / "rows.csv")
    df = df[df["final"].astype(str) == "True"].drop(columns=["stderr"], errors="ignore")
    return df.sort_values(["dataset", "variant", "method", "p", "lam", "seed", "split", "metric"]).reset_index(drop=True)


def training_now(runs: Path, epochs: int = EPOCHS) -> int:
    """Trials mid-training: state running at an epoch from 1 to epochs - 1, and no done.json (a trial's
    state stays 'running' while it evaluates and after it has written done.json; killing its node then
    would not make it run again)."""
    n = 0
    for st in runs.glob("*/trials/*/state.json"):
        try:
            s = json.loads(st.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        n += (s.get("state") == "running" and 1 <= int(s.get("epoch", 0) or 0) < epochs
              and not (st.parent / "done.json").exists())
    return n


@pytest.mark.slow
def test_sweep_survives_losing_its_worker_node(ray_session, tmp_path, capsys):
    cfg_path = tmp_path / "sweep.yaml"
    cfg_path.write_text(yaml.safe_dump(CONFIG))
    ref = poxm_in_process(capsys, "run", cfg_path, "--runs-dir", tmp_path / "clean", "--quiet",      # on the test
                          "mlflow.enabled=false")                                              # run's Ray
    assert ref.returncode == 0, ref.stdout[-3000:] + ref.stderr[-3000:]
    (clean,) = [p for p in (tmp_path / "clean").iterdir() if p.name.startswith("nodeloss-")]

    runs = tmp_path / "runs"
    cl = Cluster(tmp_path / "ray")
    held = tmp_path / "hold"
    held.write_text("")
    env = {**poxm_env(), **cluster_env(), HOLD_ENV: f"1:{held}"}
    try:
        cl.start_head("--num-cpus", "1", "--num-gpus", "0")
        cl.add_node("worker", "--num-cpus", "2", "--num-gpus", "0")
        worker = cl.procs[-1]
        with pytest.MonkeyPatch.context() as mp:     # its GCS (127.0.0.1, token authentication on) answers
            for k, v in cluster_env().items():       # the handshake `poxm run --address` makes first
                mp.setenv(k, v)
            check_address(cl.address)
        proc = subprocess.Popen(POXM + ["run", str(cfg_path), "--address", cl.address, "--runs-dir", str(runs),
                                        "--quiet", "mlflow.enabled=false"], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        deadline, killed = time.time() + 400, False
        while time.time() < deadline and proc.poll() is None:
            if training_now(runs) >= 2:
                cl.kill_node(worker)       # the worker node's raylet, workers, object store, all at once
                killed = True
                break
            time.sleep(0.2)
        held.unlink()
        assert killed, "two trials never trained at once"
        try:
            out, _ = proc.communicate(timeout=500)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        (run_dir,) = [p for p in runs.iterdir() if p.name.startswith("nodeloss-")]
        if proc.returncode != 0:      # the sweep may stop with trials errored; resume finishes it on the head
            res = subprocess.run(POXM + ["resume", str(run_dir), "--address", cl.address, "--quiet"], cwd=REPO,
                                 env=env, capture_output=True, text=True, timeout=500)
            assert res.returncode == 0, out[-2000:] + res.stdout[-3000:] + res.stderr[-3000:]
    finally:
        cl.stop()
    done = {t.parent.name: json.loads(t.read_text()) for t in run_dir.glob("trials/*/done.json")}
    assert len(done) == 3
    assert max(d["tries"] for d in done.values()) >= 2, done     # a trial on the lost node ran again
    pd.testing.assert_frame_equal(final_rows(run_dir), final_rows(clean), check_exact=False, rtol=1e-9)
