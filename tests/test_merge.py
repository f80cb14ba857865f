"""Seeds that add up, without Ray: `poxm resume RUN --add-seeds` and `poxm report RUN_A RUN_B` check
their input before anything is written (run directories byte-identical after a refusal), and the
plan of an extended sweep keeps its run directory, MLflow and storage id. The end-to-end tests (real
Ray, real trials) are in test_merge_e2e.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestration.cli import main
from orchestration.merge import _first_difference, extend_plan, parse_seeds
from orchestration.plan import plan_from_run_dir, plan_sweep, write_plan
from orchestration.rundir import sweep_id
from poxm_core.config import load_config
from poxm_core.errors import PoxmInputError

DATA = {
    "name": "merge",
    "seeds": [0, 1],
    "datasets": [{"name": "synthetic", "synthetic": {"n_train": 50, "n_test": 20, "n_features": 30, "n_labels": 10},
                  "variants": [{"name": "A", "alpha": 0.5}, {"name": "B", "alpha": 0.5, "beta": 1.0}]}],
    "training": {"epochs": 2},
    "methods": {"logging": {}, "poxm": {"p": [2, 4], "lam": [0.5]}},
}


def cfg(*overrides):
    return load_config(data=json.loads(json.dumps(DATA)), overrides=list(overrides))


def planned(runs: Path, *overrides) -> Path:
    """A run directory as `poxm run` leaves it before any trial (config.yaml, config.input.yaml, sweep.json)."""
    plan = plan_sweep(cfg(*overrides), runs_dir=runs)
    write_plan(plan)
    return plan.rd.root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def refused(capsys, argv: list[str], *needles: str) -> str:
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("poxm: error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_parse_seeds():
    assert parse_seeds("2,3") == [2, 3] and parse_seeds("[2, 3]") == [2, 3] and parse_seeds("4") == [4]
    for bad, msg in (("two", "expected integers"), ("", "at least one"), ("2,2", "given twice")):
        with pytest.raises(PoxmInputError, match=msg):
            parse_seeds(bad)


def test_first_difference_walks_in_order_and_matches_variants_by_name():
    a = {"training": {"epochs": 20, "lr": 1}, "datasets": [{"name": "d", "variants": [{"name": "A", "T": 1},
                                                                                      {"name": "B", "T": 2}]}]}
    b = json.loads(json.dumps(a))
    assert _first_difference(a, b) is None
    b["training"] = {"epochs": 10, "lr": 2}
    assert _first_difference(a, b) == ("training.epochs", 20, 10)
    b = json.loads(json.dumps(a))
    b["datasets"][0]["variants"] = [{"name": "B", "T": 2}]              # a subset of the variants: not a difference
    assert _first_difference(a, b) is None
    b["datasets"][0]["variants"] = [{"name": "B", "T": 3}]              # the same variant, other settings
    assert _first_difference(a, b) == ("datasets.0.variants.1.T", 2, 3)


def test_extended_plan_keeps_the_run_directory_and_reloads(tmp_path):
    root = planned(tmp_path, "seeds=[0]")
    plan = extend_plan(root, [3, 1])
    assert plan.rd.root == root and plan.id == root.name and plan.cfg.seeds == [0, 3, 1]
    assert plan.id_seeds == [0] and sweep_id(plan.cfg) != root.name
    assert {s.seed for s in plan.specs} == {0, 1, 3} and len(plan.specs) == 3 * 2 * 2
    assert json.loads((root / "sweep.json").read_text())["trials"] != plan.names     # nothing written yet
    write_plan(plan)
    sw = json.loads((root / "sweep.json").read_text())
    assert sw["id"] == root.name and sw["id_seeds"] == [0] and sw["seeds"] == [0, 3, 1]
    assert sw["tune_trials"] == [n for n in plan.names if "-s0-" in n]    # what the Ray Tune experiment holds
    again = plan_from_run_dir(root)
    assert again.cfg.seeds == [0, 3, 1] and again.names == plan.names and again.id == root.name
    # seeds added twice, then the original config again: refused (it would drop the added seeds)
    assert extend_plan(root, [7]).id_seeds == [0]
    with pytest.raises(PoxmInputError, match="were added to this sweep; continue it with `poxm resume"):
        write_plan(plan_sweep(cfg("seeds=[0]"), runs_dir=tmp_path))


def test_add_seeds_overlapping_the_sweep_is_refused_and_writes_nothing(tmp_path, capsys):
    root = planned(tmp_path, "seeds=[0,1]")
    before = snapshot(root)
    refused(capsys, ["resume", root, "--add-seeds", "1,2"], str(root), "[1]", "already seeds of this sweep")
    refused(capsys, ["resume", root, "--add-seeds", "x"], "--add-seeds")
    assert snapshot(root) == before and sorted(p.name for p in tmp_path.iterdir()) == [root.name]


def test_report_over_runs_of_different_configs_names_the_key(tmp_path, capsys):
    a = planned(tmp_path, "seeds=[0]")
    b = planned(tmp_path, "seeds=[1]", "training.epochs=3")
    before = {a: snapshot(a), b: snapshot(b)}
    refused(capsys, ["report", a, b], f"training.epochs differs: {a} (2) vs {b} (3)")
    refused(capsys, ["report", a, b, "--out", tmp_path / "m"], "training.epochs differs")
    c = planned(tmp_path, "seeds=[2]", "name=other")                      # name and seeds may differ: not this key
    d = planned(tmp_path, "seeds=[3]", "methods.poxm.lam=[0.9]")
    refused(capsys, ["report", c, d], "methods.poxm.lam differs", "[0.5]", "[0.9]")
    assert {r: snapshot(r) for r in (a, b)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(r.name for r in (a, b, c, d))


def test_report_over_runs_with_no_shared_variant_or_shared_seeds_is_refused(tmp_path, capsys):
    only_a = json.loads(json.dumps(DATA))
    only_a["datasets"][0]["variants"] = [{"name": "A", "alpha": 0.5}]
    only_a["name"] = "only-a"
    only_b = json.loads(json.dumps(DATA))
    only_b["datasets"][0]["variants"] = [{"name": "B", "alpha": 0.5, "beta": 1.0}]
    only_b["name"] = "only-b"
    roots = []
    for data, seeds in ((only_a, [0]), (only_b, [1])):
        plan = plan_sweep(load_config(data=data, overrides=[f"seeds={seeds}"]), runs_dir=tmp_path)
        write_plan(plan)
        roots.append(plan.rd.root)
    before = {r: snapshot(r) for r in roots}
    refused(capsys, ["report", *roots], "no (dataset, variant) shared by every run", "synthetic/A", "synthetic/B")
    both = planned(tmp_path, "seeds=[0,5]")
    refused(capsys, ["report", both, roots[0]], f"{both} and {roots[0]} both hold seed(s) [0]")
    refused(capsys, ["report", both, both], "given twice")
    assert {r: snapshot(r) for r in roots} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(r.name for r in (*roots, both))
