"""Sweep planning and the run directory without Ray: stable names, the grid, status from files."""
from __future__ import annotations

import json
import os

import pytest

from orchestration import status as st
from orchestration.rundir import RunDir, acquire_driver, release_driver, set_trial_state, write_json
from orchestration.stages.gather import busy_seconds as _union
from orchestration.stages.plan import plan_from_run_dir, plan_sweep, write_plan
from poxm_core.config.schema import load_config
from poxm_core.common.errors import PoxmInputError

DATA = {
    "name": "plan",
    "seeds": [0, 1],
    "datasets": [{"name": "synthetic", "synthetic": {"n_train": 50, "n_test": 20, "n_features": 30, "n_labels": 10},
                  "variants": [{"name": "A", "alpha": 0.5}, {"name": "B", "alpha": 0.5, "beta": 1.0}]}],
    "methods": {"logging": {}, "dm": {}, "poxm": {"p": [2, 4], "lam": [0.5, 0.9]}},
}


def cfg(*overrides):
    return load_config(data=json.loads(json.dumps(DATA)), overrides=list(overrides))


def test_run_dir_name_is_stable_and_ignores_non_result_keys(tmp_path):
    base = plan_sweep(cfg(), runs_dir=tmp_path).rd.root
    assert base.parent == tmp_path and base.name.startswith("plan-") and len(base.name) == len("plan-") + 12
    assert plan_sweep(cfg(), runs_dir=tmp_path).rd.root == base                        # no timestamp
    for ov in ("resources.cpus_per_trial=2", "mlflow.tracking_uri=http://x:1", "resources.max_failures=0",
               f"runs_dir={tmp_path}/elsewhere"):
        assert plan_sweep(cfg(ov), runs_dir=tmp_path).rd.root == base, ov
    for ov in ("training.epochs=3", "seeds=[0]", "methods.poxm.lam=[0.5]", "datasets.0.variants.0.T=3"):
        assert plan_sweep(cfg(ov), runs_dir=tmp_path).rd.root != base, ov


def test_grid_and_trials(tmp_path):
    plan = plan_sweep(cfg(), runs_dir=tmp_path)
    assert plan.cfg.group_by == "method"
    assert len(plan.specs) == 2 * 2 * 3                                  # variants x seeds x methods
    assert len(plan.grid()) == 2 * 2 * (1 + 1 + 4)
    assert len({g["trial"] for g in plan.grid()}) == len(plan.specs)
    fat = plan_sweep(cfg("group_by=seed"), runs_dir=tmp_path)
    assert len(fat.specs) == 4 and len(fat.grid()) == len(plan.grid())
    assert plan.cache_dir == tmp_path / "cache"


def test_plan_rejects_bad_input_before_ray(tmp_path):
    with pytest.raises(PoxmInputError, match="did you mean 'synthetic'"):
        plan_sweep(cfg("datasets.0.name=synthetc"), runs_dir=tmp_path)
    with pytest.raises(PoxmInputError, match="methods.logging.lr"):
        plan_sweep(cfg("methods.logging.lr=0.1"), runs_dir=tmp_path)
    # a method's own options are checked by the methods layer (config.py is schema-only), still here, and
    # blamed on the override that gave them
    with pytest.raises(PoxmInputError, match=r"^override 'methods\.poxm\.suport=phi': methods\.poxm\.suport: "
                                             r"method 'poxm' has no option 'suport' "
                                             r"\(did you mean 'support'\?\) \(its keys: p, lam, lr, init, support\)$"):
        plan_sweep(cfg("methods.poxm.suport=phi"), runs_dir=tmp_path)
    with pytest.raises(PoxmInputError, match=r"^override 'methods\.dm\.support=candidates': methods\.dm\.support: "
                                             r"method 'dm' has no option 'support'"):
        plan_sweep(cfg("methods.dm.support=candidates"), runs_dir=tmp_path)
    assert not list(tmp_path.iterdir())                  # nothing written before the error


def test_potec_clusters_beyond_the_labels_are_refused_before_ray(tmp_path):
    """POTEC's k (label clusters) above a dataset's labels, where those are known before reading it: a
    synthetic dataset's n_labels, a registered dataset's published shapes (Bibtex: 159). One line naming
    the key, the dataset and the values that fit; a dataset of your own is checked at trial start."""
    with pytest.raises(PoxmInputError, match=r"^config key 'methods\.potec\.k': k=20 clusters exceed the 10 "
                                             r"labels of dataset synthetic; use k <= 10, e.g. k: \[2, 5\]$"):
        plan_sweep(cfg('methods.potec={"k": [2, 5, 20]}'), runs_dir=tmp_path)
    plan_sweep(cfg('methods.potec={"k": [2, 5, 10]}'), runs_dir=tmp_path)                 # k = L is fine
    bibtex = ['datasets=[{"name": "bibtex", "variants": [{"name": "A", "alpha": 0.5}]}]']
    with pytest.raises(PoxmInputError, match=r"k=200 clusters exceed the 159 labels of dataset bibtex"):
        plan_sweep(cfg(*bibtex, 'methods.potec={"k": [100, 200]}'), runs_dir=tmp_path, check_data=False)
    plan_sweep(cfg(*bibtex, 'methods.potec={"k": [100, 159]}'), runs_dir=tmp_path, check_data=False)
    assert not list(tmp_path.iterdir())                  # nothing written before the error


def test_write_plan_and_reload(tmp_path):
    plan = plan_sweep(cfg("methods.logging.init=null"), runs_dir=tmp_path)   # a default written out
    write_plan(plan)
    rd = plan.rd
    sw = json.loads(rd.sweep.read_text())
    assert sw["trials"] == plan.names and len(sw["grid"]) == len(plan.grid()) and sw["cache_dir"] == str(tmp_path / "cache")
    assert {"dataset", "variant", "method", "p", "lam", "seed"} <= set(sw["grid"][0]) and sw["git_commit"]
    again = plan_from_run_dir(rd.root)
    assert again.rd.root == rd.root and again.names == plan.names
    (rd.root / "config.input.yaml").unlink()                  # the resolved config.yaml alone also reloads
    assert plan_from_run_dir(rd.root).rd.root == rd.root


def test_driver_lock(tmp_path):
    rd = RunDir(tmp_path)
    acquire_driver(rd)
    acquire_driver(rd)                          # the same process may take it again
    release_driver(rd)
    import socket
    import subprocess
    import sys
    # the OS lock decides: a driver.json naming a live process whose lock is free is stale
    write_json(rd.driver, {"pid": os.getppid(), "host": socket.gethostname(), "started": 0})
    acquire_driver(rd)
    release_driver(rd)
    assert not rd.driver.exists()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
                               "print('held', flush=True); time.sleep(60)", str(rd.driver_lock)], stdout=subprocess.PIPE, text=True)   # another driver
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(PoxmInputError, match="in use"):
            acquire_driver(rd)
    finally:
        holder.kill()
        holder.wait()
    acquire_driver(rd)                          # its lock went with it
    release_driver(rd)


def test_status_from_files(tmp_path):
    plan = plan_sweep(cfg("group_by=seed"), runs_dir=tmp_path)
    write_plan(plan)
    rd = plan.rd
    a, b, c, _ = plan.names
    write_json(rd.trial(a) / "done.json", {"epoch": 10})
    write_json(rd.trial(a) / "timing.json", {"attempts": [{"run_trial_s": 12.5}, {"run_trial_s": 2.0}]})
    set_trial_state(rd.trial(b), "running", epoch=3, epochs=10, tries=3)    # killed twice, none recorded
    set_trial_state(rd.trial(c), "errored", error="WorkerGroupError: boom")
    rows = {r["trial"]: r for r in st.trial_table(rd)}
    assert [rows[n]["state"] for n in plan.names] == ["done", "interrupted", "errored", "pending"]
    assert rows[a]["attempts"] == 2 and rows[a]["compute_s"] == 14.5
    assert rows[b]["attempts"] == 3 and rows[c]["attempts"] == 0    # killed tries count
    text = st.status_text(rd.root)
    assert "done 1  running 0  interrupted 1  errored 1  pending 1" in text
    assert "WorkerGroupError: boom" in text and f" resume {rd.root}" in text
    acquire_driver(rd)                          # a live driver: 'running' is really running
    try:
        assert {r["trial"]: r["state"] for r in st.trial_table(rd)}[b] == "running"
    finally:
        release_driver(rd)
    for n in (b, c, plan.names[3]):             # every trial done, the driver gone before it gathered
        write_json(rd.trial(n) / "done.json", {"epoch": 10})
        set_trial_state(rd.trial(n), "done")
    text = st.status_text(rd.root)
    assert "done 4  running 0" in text and f" resume {rd.root}" in text
    rd.rows_csv.parent.mkdir(parents=True, exist_ok=True)
    rd.rows_csv.write_text("")                  # gathered: nothing to continue
    assert "continue with" not in st.status_text(rd.root)


def test_union_of_compute_intervals():
    assert _union([]) == 0.0
    assert _union([(0, 10)]) == 10
    assert _union([(0, 10), (5, 12), (20, 21)]) == 13          # overlap counted once
    assert _union([(5, 12), (0, 10), (1, 2)]) == 12
