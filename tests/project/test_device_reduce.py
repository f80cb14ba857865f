"""`scripts/device.sh publish reduce`: one stage of the declared confirmatory run, its config reduced to the
(dataset, variant) cells named and nothing else changed (what publish_results.py --join accepts)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from orchestration.stages.plan import plan_sweep
from poxm_core.config.schema import load_config

REPO = Path(__file__).resolve().parents[2]
DECLARED = REPO / "configs" / "confirmatory.yaml"


def _reduce(out: Path, *cells: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "scripts" / "device.sh"), "publish", "reduce", str(DECLARED), str(out),
                           *cells], capture_output=True, text=True, env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"})


def test_a_two_cell_stage_keeps_everything_but_the_other_cells(tmp_path):
    out = tmp_path / "stage.yaml"
    r = _reduce(out, "bibtex:A", "corel5k-redraw:A")
    assert r.returncode == 0, r.stderr
    got, declared = yaml.safe_load(out.read_text()), yaml.safe_load(DECLARED.read_text())
    assert [(d["name"], [v["name"] for v in d["variants"]]) for d in got["datasets"]] == [
        ("bibtex", ["A"]), ("corel5k-redraw", ["A"])]
    assert {k: v for k, v in got.items() if k != "datasets"} == {k: v for k, v in declared.items() if k != "datasets"}
    by_name = {d["name"]: d for d in declared["datasets"]}
    for d in got["datasets"]:        # each kept dataset as declared, its variant included
        assert {k: v for k, v in d.items() if k != "variants"} == {k: v for k, v in by_name[d["name"]].items()
                                                                    if k != "variants"}
        assert d["variants"] == [v for v in by_name[d["name"]]["variants"] if v["name"] == "A"]
    plan = plan_sweep(load_config(out), runs_dir=tmp_path / "runs", check_data=False)
    assert len(plan.specs) == 2 * len(declared["seeds"])


def test_a_cell_the_config_lacks_is_one_line_and_nothing_written(tmp_path):
    out = tmp_path / "stage.yaml"
    r = _reduce(out, "bibtex:A", "bibtex:Q")
    assert r.returncode == 2 and not out.exists()
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert "bibtex:Q is not a DATASET:VARIANT" in r.stderr and "bibtex:P" in r.stderr


def test_the_run_directory_is_the_one_with_its_sweep_not_the_cache(tmp_path):
    """`publish rundir`: a stage's runs folder holds the shared cache beside the run (a stage once folded
    the cache, alphabetically first, and failed)."""
    (tmp_path / "cache").mkdir()
    (tmp_path / "confirmatory-1a2b").mkdir()
    (tmp_path / "confirmatory-1a2b" / "sweep.json").write_text("{}")
    r = subprocess.run(["bash", str(REPO / "scripts" / "device.sh"), "publish", "rundir", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == str(tmp_path / "confirmatory-1a2b"), r
    (tmp_path / "confirmatory-1a2b" / "sweep.json").unlink()
    r = subprocess.run(["bash", str(REPO / "scripts" / "device.sh"), "publish", "rundir", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "no run directory" in r.stderr
