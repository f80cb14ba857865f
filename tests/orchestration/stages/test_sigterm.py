"""SIGTERM to a running sweep's driver (what a scheduler or `timeout` sends): the trials stop, Ray shuts
down, exit 130 with one line saying how to continue, and no native stack dump from Ray's signal handler;
`poxm resume` then finishes the sweep. The trial waits after its first epoch while a hold file exists
(POXM_INJECT_HOLD), so the signal comes while it trains however fast or slow the machine is."""
from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
import yaml

from orchestration.stages.epoch_reports import HOLD_ENV
from tests.poxm_process import POXM, REPO, poxm_env, poxm_in_process, tiny_config

CONFIG = tiny_config("sigterm", [1.0], epochs=3)       # held after epoch 1: the signal comes mid-training


@pytest.mark.slow
def test_sigterm_to_the_driver_exits_130_without_a_stack_dump(ray_session, tmp_path, capsys):
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    runs = tmp_path / "runs"
    held = tmp_path / "hold"
    held.write_text("")
    proc = subprocess.Popen(POXM + ["run", str(cfg), "--runs-dir", str(runs), "--quiet", "mlflow.enabled=false"],
                            cwd=REPO, env={**poxm_env(), HOLD_ENV: f"1:{held}"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        states = [json.loads(p.read_text()) for p in runs.glob("*/trials/*/state.json")]
        if any(s.get("state") == "running" and int(s.get("epoch", 0) or 0) >= 1 for s in states):
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the sweep ended before a trial trained"
    proc.send_signal(signal.SIGTERM)             # the driver only, as `timeout` or a scheduler does
    out, err = proc.communicate(timeout=180)
    held.unlink()
    assert proc.returncode == 130, (proc.returncode, err[-3000:])
    assert "SIGTERM received" not in err and "logging.cc" not in err, err[-3000:]
    assert "poxm resume" in out + err
    (run_dir,) = [p for p in runs.iterdir() if p.name.startswith("sigterm-")]
    res = poxm_in_process(capsys, "resume", run_dir, "--quiet")       # on the test run's Ray
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert list(run_dir.glob("trials/*/done.json"))
