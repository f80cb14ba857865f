"""Packs: several trials run one after another by one Ray Train job (resources.trials_per_job).

Fast: how many trials a job gets, which trials share a job, the Tune grid of jobs, the progress bar
counting trials inside jobs, the orchestration-share script on hand-made timing files.
Slow (real Ray, 2 CPUs, the tiny sweep of test_sweep_e2e packed into one job of 2 trials):
  - a worker killed once in the pack's second trial: the first is not rerun, the second continues
    from its own checkpoint; rows equal the unpacked sweep's; one MLflow run per grid point;
  - `poxm run` killed (SIGKILL of its group) after the pack's first trial finished, then `poxm resume`.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestration.stages.plan import pack_name, pack_trials, plan_sweep, trials_per_job
from poxm_core.config.schema import load_config
from poxm_core.common.errors import PoxmInputError

REPO = Path(__file__).resolve().parents[3]

DATA = {
    "name": "pack",
    "seeds": [0, 1],
    "datasets": [{"name": "synthetic", "synthetic": {"n_train": 50, "n_test": 20, "n_features": 30, "n_labels": 10},
                  "variants": [{"name": "A", "alpha": 0.5}, {"name": "B", "alpha": 0.5, "beta": 1.0}]},
                 {"name": "bibtex", "variants": [{"name": "A", "alpha": 0.5}]}],
    "group_by": "seed",
    "methods": {"logging": {}, "dm": {}, "poxm": {"p": [2, 4], "lam": [0.5, 0.9]}},
}


def cfg(*overrides):
    return load_config(data=json.loads(json.dumps(DATA)), overrides=list(overrides))


def test_trials_per_job_hand_values():
    assert trials_per_job(None, 8, 2) == 2       # auto: 8 trials, 2 slots -> 4 jobs of 2
    assert trials_per_job(None, 9, 2) == 3       # ceil(9 / 4)
    assert trials_per_job(None, 2, 2) == 1       # fewer trials than 2 x slots: one job each (no packing)
    assert trials_per_job(None, 8, 1) == 4
    assert trials_per_job(None, 32, 4) == 4      # e.g. gpus_per_trial 0.25 on one GPU: 4 slots
    assert trials_per_job(3, 8, 2) == 3 and trials_per_job(1, 100, 2) == 1


def test_packs_keep_a_prepared_dataset_together(tmp_path):
    plan = plan_sweep(cfg(), runs_dir=tmp_path, check_data=False)
    # config order: synthetic A s0, A s1, B s0, B s1, bibtex A s0, A s1
    packs = pack_trials(plan.specs, 2)
    assert [[s.name for s in p] for p in packs] == [["synthetic-A-s0-all", "synthetic-B-s0-all"], ["synthetic-A-s1-all", "synthetic-B-s1-all"],
                                                    ["bibtex-A-s0-all", "bibtex-A-s1-all"]]
    assert [len(p) for p in pack_trials(plan.specs, 4)] == [3, 3]     # 2 jobs of at most 4, balanced
    assert sorted(s.name for p in pack_trials(plan.specs, 5) for s in p) == sorted(plan.names)
    assert pack_name(packs[0], 0) == "pack000-synthetic-A-s0-all" and pack_name(packs[0][:1], 7) == "synthetic-A-s0-all"


def test_alike_trials_make_one_round_and_balanced_jobs(tmp_path):
    """Trials of one dataset with the same heads end together: auto packs them one job per slot (no
    second round of start-ups while nothing computes); job sizes differ by at most one."""
    from orchestration.stages.plan import trials_alike
    from orchestration.stages.tune import job_grid

    assert trials_per_job(None, 30, 8, alike=True) == 4 and trials_per_job(None, 30, 8) == 2
    assert trials_per_job(None, 3, 8, alike=True) == 1 and trials_per_job(2, 30, 8, alike=True) == 2
    assert [len(p) for p in pack_trials(_specs(30), 4)] == [4] * 6 + [3] * 2
    assert [len(p) for p in pack_trials(_specs(7), 3)] == [3, 2, 2]
    TRAIN = "resources.executor=train"        # packs under Ray Train (under Tune, one trial a job: below)
    mixed = plan_sweep(cfg(TRAIN), runs_dir=tmp_path, check_data=False)      # two datasets: not alike
    assert not trials_alike(mixed.specs)
    one = plan_sweep(cfg('datasets=[{"name": "synthetic", "synthetic": {"n_train": 50, "n_test": 20, '
                         '"n_features": 30, "n_labels": 10}, "variants": [{"name": "A", "alpha": 0.5}, '
                         '{"name": "B", "alpha": 0.5, "beta": 1.0}]}]', TRAIN), runs_dir=tmp_path, check_data=False)
    assert trials_alike(one.specs) and len(one.specs) == 4
    assert [len(g["members"]) for g in job_grid(one, max_concurrent=2)] == [2, 2]       # one round of 2 jobs
    assert [len(g["members"]) for g in job_grid(mixed, max_concurrent=2)] == [2, 2, 2]  # two rounds


def _specs(n: int) -> list:
    return [SimpleNamespace(dataset="d", seed=i % 5, name=f"t{i}") for i in range(n)]


def test_trials_per_job_config_key(tmp_path):
    assert cfg().resources.trials_per_job is None
    assert cfg("resources.trials_per_job=auto").resources.trials_per_job is None
    assert cfg("resources.trials_per_job=3").resources.trials_per_job == 3
    for bad in ("0", "true", "1.5", "many"):
        with pytest.raises(PoxmInputError, match="trials_per_job"):
            cfg(f"resources.trials_per_job={bad}")
    # packing changes no number: the run directory is the same
    assert plan_sweep(cfg("resources.trials_per_job=3"), runs_dir=tmp_path, check_data=False).rd.root == plan_sweep(cfg(), runs_dir=tmp_path, check_data=False).rd.root


def test_job_grid(tmp_path):
    from orchestration.stages.tune import job_grid, member_of, members

    plan = plan_sweep(cfg("resources.executor=train"), runs_dir=tmp_path, check_data=False)
    heads = len(plan.specs[0].heads)
    grid = job_grid(plan, max_concurrent=2)          # auto: 6 trials, 2 slots -> 3 jobs of 2
    assert [len(g["members"]) for g in job_grid(plan, max_concurrent=1)] == [3, 3]
    assert [g["members"] for g in grid] == [["synthetic-A-s0-all", "synthetic-B-s0-all"], ["synthetic-A-s1-all", "synthetic-B-s1-all"],
                                            ["bibtex-A-s0-all", "bibtex-A-s1-all"]]
    assert grid[0]["name"] == "pack000-synthetic-A-s0-all" and grid[0]["heads"] == 2 * heads
    off = job_grid(plan_sweep(cfg("resources.trials_per_job=1", "resources.executor=train"), runs_dir=tmp_path,
                              check_data=False), max_concurrent=1)
    assert [g["name"] for g in off] == [n for s in (0, 1) for n in plan.names
                                          if n.startswith("synthetic") and n.endswith(f"s{s}-all")] + ["bibtex-A-s0-all", "bibtex-A-s1-all"]
    assert all(g["members"] == [g["name"]] and g["heads"] == heads for g in off)
    assert members({"trial": grid[1]}) == grid[1]["members"] and member_of({"trial": grid[1]}, {"member": 1}) == "synthetic-B-s1-all"
    assert members({"trial": {"name": "x"}}) == ["x"] and member_of({"trial": {"name": "x"}}, {}) == "x"   # a sweep from before packs


def test_slots_with_fractional_gpus(monkeypatch):
    """gpus_per_trial 0.25 on one GPU: 4 jobs share the card, so auto packs into about 8 jobs."""
    import ray

    from orchestration.cluster.ray_setup import check_resources
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 1.0})
    c = cfg("resources.gpus_per_trial=0.25", "resources.cpus_per_trial=2", "device=cuda")
    slots = check_resources(c, local=True)
    assert slots == 4 and trials_per_job(None, 32, slots) == 4


def _job(name, status, members, heads):
    return SimpleNamespace(trial_id=name, status=status,
                           config={"trial": {"name": name, "members": members, "heads": heads}})


def test_progress_counts_trials_inside_jobs(stderr_buffer):
    from orchestration.stages.progress import SweepProgress

    buf = stderr_buffer(tty=False)
    p = SweepProgress(total=5, epochs=2, eval_steps=1)     # a head's evaluation as one epoch: counts, not costs
    jobs = [_job("pack000-a", "RUNNING", ["a", "b", "c"], 6), _job("d", "PENDING", ["d"], 2)]   # 'e' not materialised
    p.on_trial_start(0, jobs, jobs[0])
    p.on_trial_result(0, jobs, jobs[0], {"epoch": 1, "member": 0, "head_epochs": 2})
    assert p._counts(jobs) == {"done": 0, "running": 1, "pending": 4, "errored": 0}
    # heads: 6 + 2 seen over 4 trials, 'e' taken as the mean (2); each head: 2 epochs + its evaluation
    assert p.work(jobs) == (2, (6 + 2 + 2) * (2 + 1))
    p.on_trial_result(0, jobs, jobs[0], {"member_finished": 1, "member": 0, "head_epochs": 4})
    p.on_trial_result(0, jobs, jobs[0], {"epoch": 1, "member": 1, "head_epochs": 6})
    assert p._counts(jobs) == {"done": 1, "running": 1, "pending": 3, "errored": 0}
    assert p.work(jobs)[0] == 6
    jobs[0].status = "ERROR"
    p.on_trial_error(0, jobs, jobs[0])
    assert p._counts(jobs) == {"done": 1, "running": 0, "pending": 3, "errored": 1}
    jobs[0].status = "TERMINATED"           # retried and finished
    p.on_trial_complete(0, jobs, jobs[0])
    assert p._counts(jobs) == {"done": 3, "running": 0, "pending": 2, "errored": 0}
    out = buf.getvalue()
    assert out.count("done    a") == 1 and "done    b" in out and "done    c" in out and "ERROR   b" in out


def test_orchestration_share_script(tmp_path):
    """Hand-made run directory: wall 100 s ending at t=1100; trial x computed 1010-1040 (job j1 started at
    1000), trial y 1030-1060 in the same job, trial z 1080-1090 (job j2 from 1070): busy = 50 + 10 = 60;
    with the 5 s of the prepare stage counted as computing, 65."""
    from orchestration.rundir import write_json
    rd = tmp_path / "run"
    write_json(rd / "results" / "sweep_summary.json", {"wall_s": 100.0, "finished_at": 1100.0, "max_concurrent_trials": 2,
                                                                 "prepare_s": 5.0})
    write_json(rd / "sweep.json", {"trials": ["x", "y", "z", "w"], "grid": [
        {"trial": t, "dataset": d, "method": "poxm"} for t, d in (("x", "a"), ("y", "a"), ("z", "b"), ("w", "b"))]})
    att = {"x": (1010, 1040, "j1", 1000), "y": (1030, 1060, "j1", 1000), "z": (1080, 1090, "j2", 1070)}
    for t, (a, b, j, js) in att.items():
        write_json(rd / "trials" / t / "timing.json", {"attempts": [
            *([{"start": 900, "end": 950, "run_trial_s": 50, "job": j, "job_start": 890}] if t == "x" else []),  # an earlier invocation
            {"start": a, "end": b, "run_trial_s": b - a, "job": j, "job_start": js,
             **({"worker_start": 1004, "worker_ready": 1006} if j == "j1" else {}),
             **({"prepare_wait_s": 1.5, "points_wait_s": 0.5} if t == "x" else {}),
             **({"points_wait_s": 2.5} if t == "y" else {})}]})
    # x: 21 s, of which 17 s in its parts and 3 s handing epochs to Ray (report_s): 1 s unexplained;
    # y (before report_s existed): 30 s, 20 s in its parts; w did not run now: not counted
    write_json(rd / "trials" / "x" / "summary.json", {"seconds": 21.0, "timing": {
        "setup_s": 1.0, "train_s": 10.0, "eval_s": 5.0, "checkpoint_s": 1.0, "report_s": 3.0, "setup_heads_s": 0.5}})
    write_json(rd / "trials" / "y" / "summary.json", {"seconds": 30.0, "timing": {"setup_s": 2.0, "train_s": 18.0}})
    write_json(rd / "trials" / "w" / "summary.json", {"seconds": 99.0, "timing": {"report_s": 99.0}})
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "orchestration_share.py"), str(rd), "--json"],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["trial_time_outside_parts_s"] == {"report_s": {"total": 3.0, "median": 3.0, "trials": 1},
                                               "unexplained_s": {"total": 11.0, "median": 5.5, "trials": 2}}
    assert r["busy_s"] == 60.0 and r["orchestration_share"] == pytest.approx(0.4)
    assert r["prepare_s"] == 5.0 and r["share_prepare_as_compute"] == pytest.approx(0.35)
    assert r["trial_compute_s"] == 70.0 and r["jobs"] == 2 and r["trials_run"] == 3
    assert r["job_startup_s"] == [10.0, 10.0]
    # j1's start-up of 10 s: 4 s of Ray Train, 2 s of torch and CUDA, then its first trial waited 1.5 s
    # for the prepare stage and loaded for 2.5 s
    assert r["job_startup_parts_median_s"] == {"ray_train": 4.0, "worker_torch_cuda": 2.0, "prepare_wait": 1.5,
                                               "first_trial_load": 2.5}
    # from the invocation's start (t=1000): j1 at 0 s, x computing from 10 s, z ending at 90 s; every 15 s:
    # 0: none, 15: x, 30: x and y, 45: y, 60 (y ended), 75, 90 (z ended): none
    assert r["timeline"] == {"first_job_start_s": 0.0, "first_compute_s": 10.0, "last_end_s": 90.0,
                             "after_last_end_s": 10.0, "running": [0, 1, 2, 1, 0, 0, 0]}
    # this invocation's attempts by dataset: a: x 30 s and y 30 s (x's earlier 50 s not counted); b: z 10 s
    assert r["median_trial_s_by_dataset"] == {"a": 30.0, "b": 10.0}
    assert r["points_wait_s"] == {"median": 1.5, "max": 2.5, "trials": 2}    # x 0.5 s, y 2.5 s, z none recorded
    # the prepare stage beside the trials, from t=1000 to 1020: counted as computing it covers 1000-1010
    # (x computed from 1010), so busy = 60 + 10 and the share 0.3, not 60 + 20
    write_json(rd / "results" / "sweep_summary.json", {"wall_s": 100.0, "finished_at": 1100.0, "max_concurrent_trials": 2,
                                                                 "prepare_s": 20.0, "prepare_span": [1000.0, 1020.0],
                                                                 "prepare_overlapped": True, "prepare_tasks": [
        {"start": 1001.0, "imported": 1004.0, "end": 1012.0, "seconds": 8.0, "levels": {"data": 1.0, "variants": 6.0}},
        {"start": 1002.0, "imported": 1003.0, "end": 1020.0, "seconds": 17.0, "levels": {"data": 3.0, "variants": 12.0}},
        {"start": 1003.0, "imported": 1008.0, "end": 1016.0, "seconds": 8.0, "levels": {"data": 2.0, "variants": 4.0}}]})
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "orchestration_share.py"), str(rd), "--json"],
                         capture_output=True, text=True, cwd=REPO)
    r = json.loads(out.stdout)
    assert r["orchestration_share"] == pytest.approx(0.4) and r["share_prepare_as_compute"] == pytest.approx(0.3)
    assert r["prepare_overlapped"] is True
    # three prepare tasks: ended at 12, 20 and 16 s; medians of start 2 s, imports (3, 1, 5) 3 s, compute 8 s
    assert r["prepare_tasks"] == {"tasks": 3, "first_end_s": 12.0, "last_end_s": 20.0, "median_start_s": 2.0,
                                  "median_imports_s": 3.0, "median_compute_s": 8.0,
                                  "median_levels_s": {"data": 2.0, "variants": 6.0}}
    bad = subprocess.run([sys.executable, str(REPO / "benchmarks" / "orchestration_share.py"), str(tmp_path)],
                         capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


# --------------------------------------------------------------------------------------------
# slow: real Ray

@pytest.fixture(scope="module")
def e2e():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import test_sweep_e2e
    return test_sweep_e2e


@pytest.fixture(scope="module")
def unpacked(e2e, ray_session, tmp_path_factory):
    """test_sweep_e2e's reference sweep, run once for both modules: its 2 alike trials on 2 CPUs are
    one Ray Train job each (resources.trials_per_job unset: one job per slot)."""
    return e2e.reference_sweep(tmp_path_factory)


@pytest.mark.slow
def test_jobs_start_no_actor_they_do_not_use_on_a_local_ray(e2e, unpacked):
    """Under the default executor ('tune') the sweep's jobs ran in Tune's trial processes alone: no Ray
    Train controller, worker, PlacementGroupCleaner, DatasetManager or PreemptionWatcher, and the sweep
    started no Ray Train resource coordinator (only the 'train' executor's jobs ask it; what Ray Train's
    jobs leave out is checked by test_pg_cleaner.py)."""
    import ray._private.state
    actors = ray._private.state.actors()
    before = e2e._REFERENCE["actors_before"]          # the Ray is the test run's (conftest.SharedRay)
    classes = [a["ActorClassName"] for k, a in actors.items() if k not in before]      # the sweep's
    # Tune's function trainables (Ray names the class by its qualified name once its module is imported)
    assert classes and set(classes) <= {"ImplicitFunc", "wrap_function.<locals>.ImplicitFunc"}, classes
    assert "_AutoscalingCoordinatorActor" not in classes


def _packed_config(e2e, tmp: Path, **resources) -> Path:
    return e2e.write_config(tmp, resources=dict(e2e.TINY["resources"], trials_per_job=2, **resources))


def _check_mlflow(e2e, run_dir: Path, ref_dir: Path, trial_crashed: str | None = None):
    c, _, runs = e2e.mlflow_runs(run_dir)
    points = [r for r in runs if r.data.tags.get("poxm.role") == "point"]
    assert len(points) == e2e.N_POINTS and len(runs) == e2e.N_POINTS + 1               # none duplicated
    assert len({r.data.tags["poxm.point"] for r in points}) == e2e.N_POINTS
    assert {r.info.status for r in runs} == {"FINISHED"}
    _, _, ref_runs = e2e.mlflow_runs(ref_dir)
    ref = {r.data.tags["poxm.point"]: r.data.metrics for r in ref_runs if r.data.tags.get("poxm.role") == "point"}
    for r in points:
        assert r.data.metrics == pytest.approx(ref[r.data.tags["poxm.point"]], rel=1e-12)
        if r.data.tags["poxm.trial"] == trial_crashed and r.data.tags["method"] == "poxm":
            assert [h.step for h in c.get_metric_history(r.info.run_id, "train/loss")] == [1, 2]    # epoch 1 once


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["train", "tune"])
def test_pack_with_a_worker_crash_in_its_second_trial(e2e, ray_session, unpacked, tmp_path, monkeypatch, executor):
    """Under both executors (resources.executor): a Ray Train job's worker, or Tune's trial process, where
    each checkpoint names its trial in a file since Tune names the folders."""
    from orchestration.cluster.ray_state import ray_state_dir
    from orchestration.rundir import RunDir
    from orchestration.stages.sweep import run_sweep

    monkeypatch.setenv("POXM_INJECT_CRASH_ONCE", "1:synthetic-B-s0-all")
    out = run_sweep(load_config(_packed_config(e2e, tmp_path, executor=executor)), runs_dir=tmp_path / "runs",
                    progress=False)
    assert out.ok, out
    rd = out.run_dir
    ray_dir = ray_state_dir(RunDir(rd))
    assert not (rd / "ray").exists()                                           # Ray's state outside the run dir
    if executor == "train":
        assert (ray_dir / "train-pack000-synthetic-A-s0-all").is_dir()         # one Train job for both trials
    else:                                                                      # no Ray Train job at all
        assert (ray_dir / "tune" / "pack000-synthetic-A-s0-all").is_dir() and not list(ray_dir.glob("train-*"))
    assert not (ray_dir / "train-synthetic-B-s0-all").exists()
    a, b = (json.loads((rd / "trials" / t / "timing.json").read_text())["attempts"]
            for t in ("synthetic-A-s0-all", "synthetic-B-s0-all"))
    assert len(a) == 1 and a[0]["resumed_from"] is None                          # finished once, not rerun
    assert (rd / "trials" / "synthetic-B-s0-all" / ".crash_injected").is_file()
    # B continued from its own epoch-1 checkpoint (Ray's, named after B, or B's folder's), not from A's
    assert len(b) == 1 and b[0]["resumed_from"] in ("ray:synthetic-B-s0-all.epoch_0001", "trial_dir:epoch_0001")
    assert a[0]["job"] == b[0]["job"] == "pack000-synthetic-A-s0-all" and a[0]["end"] <= b[0]["start"]
    for t in ("synthetic-A-s0-all", "synthetic-B-s0-all"):
        assert json.loads((rd / "trials" / t / "done.json").read_text())["job"] == "pack000-synthetic-A-s0-all"
    e2e.pd.testing.assert_frame_equal(e2e.final_rows(rd), e2e.final_rows(unpacked.run_dir))
    _check_mlflow(e2e, rd, unpacked.run_dir, trial_crashed="synthetic-B-s0-all")


@pytest.mark.slow
def test_pack_killed_after_its_first_trial_then_resumed(e2e, ray_session, unpacked, tmp_path, capsys):
    from poxm_process import poxm_in_process, run_until_first_trial_then_kill

    runs = tmp_path / "runs"
    first = run_until_first_trial_then_kill(_packed_config(e2e, tmp_path), runs, deadline_s=600)
    run_dir = first.parent.parent
    assert first.name == "synthetic-A-s0-all" and len(list(run_dir.glob("trials/*/done.json"))) == 1
    time.sleep(2)
    # the second trial may still have finished: its worker is Ray's process, outside the killed group, and
    # goes on until it next calls into Ray (a trial with short epochs reports only once a poll)
    finished = sorted(p.parent for p in run_dir.glob("trials/*/done.json"))
    stamp = {(t, f): (t / f).stat().st_mtime_ns for t in finished
             for f in ("rows.csv", "done.json", "summary.json", "timing.json")}
    st = poxm_in_process(capsys, "status", run_dir)
    assert st.returncode == 0 and "(2 trials," in st.stdout and f"done {len(finished)}" in st.stdout, st.stdout

    res = poxm_in_process(capsys, "resume", run_dir, "--quiet")       # on the test run's Ray
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert {k: (k[0] / k[1]).stat().st_mtime_ns for k in stamp} == stamp      # finished trials did not rerun
    assert len(list(run_dir.glob("trials/*/done.json"))) == 2
    e2e.pd.testing.assert_frame_equal(e2e.final_rows(run_dir), e2e.final_rows(unpacked.run_dir))
    _check_mlflow(e2e, run_dir, unpacked.run_dir)
    st = poxm_in_process(capsys, "status", run_dir)
    assert "done 2" in st.stdout


def test_under_tune_auto_is_one_trial_a_job(tmp_path):
    """Tune reuses a slot's process: no start-up to share, so single trials fill slots as they free up;
    an explicit trials_per_job still packs."""
    from orchestration.stages.tune import job_grid
    plan = plan_sweep(cfg(), runs_dir=tmp_path, check_data=False)          # the default executor: tune
    grid = job_grid(plan, max_concurrent=2)
    assert all(len(g["members"]) == 1 for g in grid) and sorted(g["name"] for g in grid) == sorted(plan.names)
    packed = plan_sweep(cfg("resources.trials_per_job=3"), runs_dir=tmp_path, check_data=False)
    assert [len(g["members"]) for g in job_grid(packed, max_concurrent=2)] == [3, 3]
