"""Seeds that add up, without Ray: `poxm resume RUN --add-seeds` and `poxm report RUN_A RUN_B` check
their input before anything is written (run directories byte-identical after a refusal), and the
plan of an extended sweep keeps its run directory, MLflow and storage id. The end-to-end tests (real
Ray, real trials) are in test_merge_e2e.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestration.cli import main
from orchestration.stages.merge import _first_difference, extend_plan, parse_seeds
from orchestration.stages.plan import plan_from_run_dir, plan_sweep, write_plan
from orchestration.rundir import sweep_id
from poxm_core.config.schema import load_config
from poxm_core.common.errors import PoxmInputError

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
    configs = {f: (root / f).read_bytes() for f in ("config.yaml", "config.input.yaml")}
    write_plan(plan)
    for f, text in configs.items():          # cut short after sweep.json: the old config still reloads
        (root / f).write_bytes(text)
    cut = plan_from_run_dir(root)
    assert cut.cfg.seeds == [0] and cut.id == root.name
    write_plan(cut)
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


def fake_trials(root: Path, value) -> None:
    """Every trial of the planned run in `root` finished, with final rows whose values come from
    value(seed, method, p, lam, split, metric): val SNIS for the selection, test R@5 for the tables."""
    from poxm_core.common.results import COLUMNS
    sw = json.loads((root / "sweep.json").read_text())
    for name in sw["trials"]:
        pts = [g for g in sw["grid"] if g["trial"] == name]
        rows = [{"dataset": g["dataset"], "variant": g["variant"], "method": g["method"],
                 "p": -1 if g["p"] is None else g["p"], "lam": g["lam"], "seed": g["seed"], "split": split,
                 "metric": metric, "value": value(g, split, metric), "stderr": 0.01, "epoch": 2, "final": True}
                for g in pts for split, metric in (("val", "IS"), ("val", "SNIS"), ("test", "R@5"))]
        d = root / "trials" / name
        d.mkdir(parents=True)
        import pandas as pd
        pd.DataFrame(rows, columns=COLUMNS).to_csv(d / "rows.csv", index=False)
        (d / "done.json").write_text("{}")


@pytest.mark.slow
def test_merged_report_is_the_union_of_the_runs_rows(tmp_path, capsys):
    """Runs over seeds [0] and [1, 2] merged equal one run over [0, 1, 2] (here: its rows put together
    and selected by orchestration.selection.select); the runs are not touched; a second merge into
    the same directory replaces it."""
    import pandas as pd

    from orchestration.stages.merge import merge_report
    from orchestration.selection import select_run

    def value(g, split, metric):     # a different best (p, lam) per seed, known by construction
        best = {0: 2, 1: 4, 2: 2}[g["seed"]]
        return (1.0 if g["p"] == best else 0.5) + 0.1 * g["seed"] if split == "val" else 0.2 + (g["p"] or 0) / 100
    a = planned(tmp_path / "runs", "seeds=[0]")
    b = planned(tmp_path / "runs", "seeds=[1,2]", "name=more")
    for r in (a, b):
        fake_trials(r, value)
    before = {r: snapshot(r) for r in (a, b)}
    out, report = merge_report([str(a), str(b)], say=lambda m: None)
    assert out.parent == tmp_path / "runs" and out.name.startswith("merge-merged-")
    assert {r: snapshot(r) for r in (a, b)} == before
    rows = pd.read_csv(out / "results" / "rows.csv")
    assert sorted(rows["seed"].unique()) == [0, 1, 2] and len(rows) == 3 * 2 * 3 * 3   # seeds x variants x points x rows
    sel = pd.read_csv(out / "results" / "selection.csv")
    pd.testing.assert_frame_equal(sel, select_run(rows).frame().reset_index(drop=True), check_dtype=False)
    chosen = sel[(sel.selection == "is") & (sel.method == "poxm")]          # IS, the default criterion
    assert {(int(r.seed), int(r.p)) for r in chosen.itertuples()} == {(0, 2), (1, 4), (2, 2)}
    assert yaml_seeds(out) == [0, 1, 2]
    sw = json.loads((out / "sweep.json").read_text())
    assert sw["merged_from"] == [str(a), str(b)] and len(sw["grid"]) == 3 * 2 * 3
    assert report is not None and (report / "index.md").is_file()
    # `poxm report MERGED_DIR` merges the same runs again into it; `poxm resume` refuses it
    (out / "stale").write_text("x")
    assert main(["report", str(out)]) == 0 and not (out / "stale").exists()
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []
    refused(capsys, ["resume", out], "a report merged from 2 runs", f"poxm report {out}")


def yaml_seeds(run_dir: Path) -> list[int]:
    import yaml
    return yaml.safe_load((run_dir / "config.yaml").read_text())["seeds"]
