"""orchestration.gpu_busy: kernels attributed to the trial's stages and their busy time, from a hand-made
chrome trace (the GPU trace itself needs a GPU; `python -m benchmarks.profile gpu-busy` on CPU is checked
end to end)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestration.gpu_busy import attribute

ROOT = Path(__file__).resolve().parents[2]


def _x(cat, name, ts_ms, dur_ms):      # the trace counts microseconds
    return {"ph": "X", "cat": cat, "name": name, "ts": 1000 * ts_ms, "dur": 1000 * dur_ms}


def test_kernels_go_to_the_stage_that_launched_them_and_overlaps_count_once():
    events = [
        _x("kernel", "init", 0, 5),                         # before any stage: setup
        _x("user_annotation", "stage::train_epoch", 10, 100),
        _x("kernel", "gemm", 20, 30), _x("kernel", "adam", 40, 20),    # overlap 40-50: busy 20-60 = 40
        _x("kernel", "gemm", 115, 10),                      # after the range ended (110), before the next: train
        _x("user_annotation", "stage::final_report", 200, 50),
        _x("kernel", "topk", 210, 5),
        _x("user_annotation", "other", 300, 10), {"ph": "i", "cat": "kernel", "name": "instant", "ts": 0},
    ]
    out = attribute(events, top=2)
    assert out["kernels"] == 5
    assert out["gpu_busy_s"] == pytest.approx((5 + 40 + 10 + 5) / 1e3)
    assert out["stages"]["setup"] == {"busy_s": 0.005, "kernels": 1, "wall_s": 0.0}
    assert out["stages"]["train_epoch"] == {"busy_s": 0.05, "kernels": 3, "wall_s": 0.1}
    assert out["stages"]["final_report"]["kernels"] == 1
    assert [t["kernel"] for t in out["top"]] == ["gemm", "adam"] and out["top"][0]["n"] == 2


@pytest.mark.slow
def test_runs_a_trial_on_cpu(tmp_path):
    out = tmp_path / "busy.json"
    r = subprocess.run([sys.executable, "-m", "benchmarks.profile", "gpu-busy", str(ROOT / "configs" / "quickstart.yaml"), "training.epochs=1",
                        "model.epochs=1", "datasets.0.synthetic.scale=0.05", "--cache-dir", str(tmp_path / "cache"),
                        "--variant", "B", "--json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(out.read_text())
    assert d["trial"].startswith("synthetic-B-s0") and d["wall_s"] > 0
    assert set(d["timing"]) >= {"setup_s", "train_s", "eval_s", "checkpoint_s"}
    assert d["kernels"] == 0 and d["gpu_busy_s"] == 0.0        # no CUDA here: no kernels traced
