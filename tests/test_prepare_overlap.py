"""The prepare stage beside the trials (orchestration/prepare_stage.py): when it overlaps, what
decides it, and what a failed prepare task does to a sweep whose trials have already started.
The results are the same either way: tests/test_sweep_e2e.py compares a sequential run with its
reference sweep (which overlaps)."""
from __future__ import annotations

import pickle
import time
from pathlib import Path

import pytest
import yaml

from orchestration import prepare_stage
from orchestration.prepare_stage import PrepareFailed, fits_at_once


def test_fits_at_once_hand_values():
    # 20 (dataset, seed) tasks of 1 CPU + 1/8 GPU on a 64-CPU, 4-GPU machine: 20 CPUs, 2.5 GPUs
    assert fits_at_once(20, {"CPU": 1.0, "GPU": 0.125}, {"CPU": 64.0, "GPU": 4.0})
    # 40 of them would need 5 GPUs
    assert not fits_at_once(40, {"CPU": 1.0, "GPU": 0.125}, {"CPU": 64.0, "GPU": 4.0})
    # exactly full fits; a resource the cluster lacks does not
    assert fits_at_once(2, {"CPU": 1.0}, {"CPU": 2.0})
    assert not fits_at_once(3, {"CPU": 1.0}, {"CPU": 2.0})
    assert not fits_at_once(1, {"CPU": 1.0, "GPU": 0.5}, {"CPU": 2.0})
    assert not fits_at_once(0, {"CPU": 1.0}, {"CPU": 2.0})


def test_prepare_failed_stopper_reads_the_drivers_flag_after_pickling():
    s = pickle.loads(pickle.dumps(PrepareFailed("/runs/x")))    # as Tune keeps it in its state
    assert s.run_root == "/runs/x" and not s.stop_all() and not s("trial", {"epoch": 1})
    prepare_stage._FAILED["/runs/x"] = True
    try:
        assert s.stop_all() and not PrepareFailed("/runs/y").stop_all()
    finally:
        prepare_stage._FAILED.pop("/runs/x")


GOOD = {"name": "overlap-fail", "seeds": [0],
        "datasets": [{"name": "synthetic", "synthetic": {"n_train": 100, "n_test": 50, "n_features": 50,
                                                         "n_labels": 20, "mean_labels": 2},
                      "variants": [{"name": "A", "alpha": 0.5}]}],
        "model": {"epochs": 1, "dim": 8, "n_candidates": 10}, "training": {"epochs": 1},
        "resources": {"cpus_per_trial": 1},
        "methods": {"logging": {}, "poxm": {"p": [5], "lam": [0.9]}}}


@pytest.mark.slow
def test_reservations_that_do_not_come_mean_no_overlap(ray_session, tmp_path, monkeypatch):
    """The prepare task fits the cluster's totals, but something else holds the CPUs: its reservation
    is not ready in time, so nothing stays reserved and the stage runs first, as without overlap."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from orchestration.plan import plan_sweep
    from poxm_core.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    plan = plan_sweep(load_config(path), tmp_path / "runs", None)
    blocker = placement_group([{"CPU": 2.0}])
    ray.get(blocker.ready(), timeout=120)
    monkeypatch.setattr(prepare_stage, "RESERVE_TIMEOUT_S", 2.0)
    try:
        run = prepare_stage.PrepareRun(plan, lambda msg: None)
        assert not run.overlapped and not run._pgs
        assert ray.available_resources().get("CPU", 0) == 0      # the blocker's, none left reserved by us
    finally:
        remove_placement_group(blocker)
    prepared, compute = run.wait_all()
    assert list(prepared) == [("synthetic", 0)] and set(prepared[("synthetic", 0)]) == {"A"} and compute > 0


def _bad_bibtex(tmp_path: Path) -> dict:
    """GOOD plus a Bibtex whose data files have a non-UTF-8 byte on line 4 (found in its prepare task)."""
    folder = tmp_path / "bib"
    folder.mkdir()
    rows = b"3 1836 159\n0 1:1.0\n1 2:1.0\n2 3:1.0 caf\xe9\n"
    (folder / "bibtex_train.txt").write_bytes(rows)
    (folder / "bibtex_test.txt").write_bytes(rows)
    return dict(GOOD, datasets=GOOD["datasets"] + [{"name": "bibtex", "path": str(folder),
                                                    "variants": [{"name": "A", "alpha": 0.5}]}])


@pytest.mark.slow
def test_a_failed_task_cancels_the_others_and_releases_every_reservation(ray_session, tmp_path):
    """Both tasks reserved (2 CPUs); the bad one fails: its error comes out as itself, the good one is
    cancelled, and every CPU is free again in a Ray that outlives the stage."""
    import ray

    from orchestration.plan import plan_sweep
    from poxm_core.config import load_config
    from poxm_core.errors import PoxmInputError

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_bad_bibtex(tmp_path)))
    run = prepare_stage.PrepareRun(plan_sweep(load_config(path), tmp_path / "runs", None), lambda msg: None)
    assert run.overlapped and len(run._pgs) == 2
    with pytest.raises(PoxmInputError, match=r"bibtex_train.txt:4: not UTF-8"):
        run.wait_all()
    assert not run._pgs
    deadline = time.time() + 60
    while ray.available_resources().get("CPU", 0) < 2 and time.time() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("CPU", 0) == 2


@pytest.mark.slow
def test_a_failed_prepare_stops_the_started_trials_with_its_one_line_error(ray_session, tmp_path, capfd):
    """Two datasets prepare side by side while their jobs start; one data file has a bad byte on its
    line 4: the sweep ends with that file and line (not a Ray traceback), no trial runs to the end,
    and Tune's state is gone so that `poxm resume` would start afresh. Last in this module: Ray Train
    can leave a stopped job's placement group behind in a Ray that outlives the sweep (the command
    line's Ray ends with it)."""
    from orchestration.sweep import run_sweep
    from orchestration.tune_stage import TUNE_NAME, ray_storage
    from orchestration.plan import plan_from_run_dir
    from poxm_core.config import load_config
    from poxm_core.errors import PoxmInputError

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_bad_bibtex(tmp_path)))
    with pytest.raises(PoxmInputError, match=r"bibtex_train.txt:4: not UTF-8"):
        run_sweep(load_config(path), runs_dir=tmp_path / "runs", progress=True)
    out = capfd.readouterr()
    assert "the trials start meanwhile" in out.out
    assert "retr" not in out.out + out.err, "the good task was cancelled, not killed and retried"
    run_dir = next((tmp_path / "runs").glob("overlap-fail-*"))
    assert not any((run_dir / "trials").glob("*/done.json")), "the good dataset's trial was stopped too"
    assert not (Path(ray_storage(plan_from_run_dir(run_dir))) / TUNE_NAME).exists()
