"""benchmarks/mlflow_points.py: the MLflow set-up a sweep does before its trials, timed on a real
SQLite store (a fresh temporary run directory)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_it_creates_the_points_runs_and_prints_their_time():
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "mlflow_points.py"),
                          str(REPO / "configs" / "quickstart.yaml"), "--limit", "3"],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("quickstart.yaml: ") and lines[0].endswith("3 run(s) created")
    assert "one run per grid point" in lines[2] and "ms a point" in lines[2]
    bad = subprocess.run([sys.executable, str(REPO / "benchmarks" / "mlflow_points.py"), str(REPO / "nope.yaml")],
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "nope.yaml" in bad.stderr
