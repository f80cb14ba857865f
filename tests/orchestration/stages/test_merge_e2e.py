"""Seeds that add up, end to end through real Ray (2 CPUs), real Ray Train jobs and real MLflow stores.

A tiny sweep (generated data, one variant, group_by seed: one trial of 4 heads per seed, 1 epoch)
over seeds [0, 1] is the reference. The same sweep over seed 0, extended in place with seed 1
(`poxm resume RUN --add-seeds 1`), and the report merged from a seed-0 run and a seed-1 run
(`poxm report RUN_A RUN_B`) must both give the reference's selection and result rows exactly (the
seeds are independent), without running a finished trial again.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from poxm_process import poxm_in_process

pytestmark = [pytest.mark.slow, pytest.mark.longest]   # its files first: tests/conftest.py

TINY = {
    "name": "tiny-seeds",
    "seeds": [0, 1],
    "datasets": [{"name": "synthetic",
                  "synthetic": {"n_train": 300, "n_test": 100, "n_features": 100, "n_labels": 30, "mean_labels": 2},
                  "variants": [{"name": "A", "alpha": 0.3, "beta": 0, "T": 2}]}],
    "model": {"dim": 8, "epochs": 1, "n_candidates": 12},
    "training": {"epochs": 1, "mc_slates": 2, "batch_size": 128},
    "group_by": "seed",
    # the 'train' executor: each computed trial leaves a Ray Train run (train-<trial>), which the add-seed
    # test counts to show that only the new seed's trial ran
    "resources": {"cpus_per_trial": 1, "max_failures": 2, "executor": "train"},
    "methods": {"logging": {}, "dm": {"lr": 0.01}, "poxm": {"p": [5, 10], "lam": [0.9], "lr": 0.01}},
}
POINTS_PER_SEED = 1 + 1 + 2


def config(tmp: Path, seeds: list[int]) -> Path:
    cfg = json.loads(json.dumps(TINY))
    cfg["seeds"] = seeds
    path = tmp / f"tiny-{'-'.join(map(str, seeds))}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def sweep(tmp: Path, runs: Path, seeds: list[int], mlflow: bool = True) -> Path:
    """A finished sweep over `seeds`; `mlflow=False`: no MLflow store (a key outside the run's identity,
    so merged and compared as the same config; for the runs whose MLflow runs no test reads)."""
    from orchestration.stages.sweep import run_sweep
    from poxm_core.config.schema import load_config
    out = run_sweep(load_config(config(tmp, seeds), overrides=[] if mlflow else ["mlflow.enabled=false"]),
                    runs_dir=runs, progress=False)
    assert out.ok, out
    return out.run_dir


def final_rows(run_dir: Path) -> pd.DataFrame:
    df = pd.read_csv(run_dir / "results" / "rows.csv")
    return df.sort_values(["dataset", "variant", "method", "p", "lam", "seed", "split", "metric", "epoch", "final"],
                          na_position="first").reset_index(drop=True)


def selection(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(run_dir / "results" / "selection.csv")


def train_runs(run_dir: Path) -> set[str]:
    """The Ray Train runs the sweep started (one per trial that was computed: train-<trial>)."""
    from orchestration.cluster.ray_state import ray_state_dir
    from orchestration.rundir import RunDir
    return {p.name for p in ray_state_dir(RunDir(run_dir)).iterdir() if p.name.startswith("train-")}


def trial_files(run_dir: Path, trial: str) -> dict[str, tuple[int, bytes]]:
    d = run_dir / "trials" / trial
    return {f: ((d / f).stat().st_mtime_ns, (d / f).read_bytes()) for f in ("done.json", "timing.json", "rows.csv")}


@pytest.fixture(scope="module")
def runs(ray_session, tmp_path_factory):
    """The reference over seeds [0, 1] and one run each over [0] and [1], in one runs directory (MLflow's
    runs are read of s0 alone, the one the add-seed test extends)."""
    tmp = tmp_path_factory.mktemp("seeds")
    base = tmp / "runs"
    return {"tmp": tmp, "base": base, "ref": sweep(tmp, base, [0, 1], mlflow=False), "s0": sweep(tmp, base, [0]),
            "s1": sweep(tmp, base, [1], mlflow=False)}


def test_report_over_two_runs_equals_one_sweep_over_both_seeds(runs, capsys):
    s0, s1 = runs["s0"], runs["s1"]
    before = {r: sorted(p.relative_to(r) for p in r.rglob("*")) for r in (s0, s1)}
    res = poxm_in_process(capsys, "report", s0, s1)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    merged = next(p for p in runs["base"].iterdir() if p.name.startswith("tiny-seeds-merged-"))
    assert f"report: {merged / 'report' / 'index.md'}" in res.stdout
    pd.testing.assert_frame_equal(selection(merged), selection(runs["ref"]))
    pd.testing.assert_frame_equal(final_rows(merged), final_rows(runs["ref"]))
    sw = json.loads((merged / "sweep.json").read_text())
    assert sw["merged_from"] == [str(s0), str(s1)] and sw["seeds"] == [0, 1]
    assert len(sw["grid"]) == 2 * POINTS_PER_SEED
    assert yaml.safe_load((merged / "config.yaml").read_text())["seeds"] == [0, 1]
    assert {r: sorted(p.relative_to(r) for p in r.rglob("*")) for r in (s0, s1)} == before   # the runs only read
    # the merged directory rebuilds itself from the same runs
    from orchestration.cli import main
    assert main(["report", str(merged)]) == 0
    pd.testing.assert_frame_equal(selection(merged), selection(runs["ref"]))


def test_add_seed_to_finished_sweep_equals_one_sweep_over_both_seeds(runs, capsys):
    from orchestration.stages.sweep import resume_sweep
    from orchestration.tracking.runs import stored_uri
    from mlflow import MlflowClient

    rd = runs["s0"]
    name = rd.name
    done0 = "synthetic-A-s0-all"
    stamp = trial_files(rd, done0)
    trains = train_runs(rd)
    assert trains == {f"train-{done0}"}

    out = resume_sweep(rd, add_seeds=[1], progress=False)
    assert out.ok, out
    assert out.run_dir == rd and rd.name == name and out.n_trials == 2
    assert trial_files(rd, done0) == stamp                               # the finished trial did not run again
    assert train_runs(rd) - trains == {"train-synthetic-A-s1-all"}       # one new Ray Train run: the new seed's
    assert len(json.loads((rd / "trials" / done0 / "timing.json").read_text())["attempts"]) == 1
    pd.testing.assert_frame_equal(selection(rd), selection(runs["ref"]))
    pd.testing.assert_frame_equal(final_rows(rd), final_rows(runs["ref"]))

    sw = json.loads((rd / "sweep.json").read_text())
    assert sw["seeds"] == [0, 1] and sw["id_seeds"] == [0] and sw["id"] == name and "tune_trials" not in sw
    assert yaml.safe_load((rd / "config.yaml").read_text())["seeds"] == [0, 1]

    ml = json.loads((rd / "mlflow_runs.json").read_text())
    c = MlflowClient(stored_uri(rd, ml))
    assert c.get_experiment(ml["experiment_id"]).name == name
    mruns = c.search_runs([ml["experiment_id"]], max_results=1000)
    points = [r for r in mruns if r.data.tags.get("poxm.role") == "point"]
    assert len(mruns) == 2 * POINTS_PER_SEED + 1                          # one parent, no duplicate
    assert len({r.data.tags["poxm.point"] for r in points}) == 2 * POINTS_PER_SEED
    assert {r.data.tags["seed"] for r in points} == {"0", "1"}
    assert {r.info.status for r in mruns} == {"FINISHED"}

    # status and a plain resume see the extended sweep; resuming again runs nothing
    st = poxm_in_process(capsys, "status", rd)
    assert st.returncode == 0 and "done 2" in st.stdout, st.stdout + st.stderr
    again = resume_sweep(rd, progress=False)
    assert again.ok and again.summary["ran_now"] == 0 and trial_files(rd, done0) == stamp
    # the original config names this directory still: refused, pointing at resume
    res = poxm_in_process(capsys, "run", config(runs["tmp"], [0]), "--runs-dir", runs["base"], "--quiet")
    assert res.returncode == 2 and "poxm resume" in res.stderr and len(res.stderr.strip().splitlines()) == 1
