"""Seeds that add up (docs/orchestration.md, "Adding seeds").

  poxm resume RUN_DIR --add-seeds 2,3   `extend_plan`: the sweep in RUN_DIR planned with the new seeds
                                        added; its finished trials keep their done.json and do not run
  poxm report RUN_A RUN_B ... [--out]   `merge_report`: one report over the finished trials of several
                                        runs of one config (the same config apart from name, seeds and
                                        which variants each ran)

A merged report lives in a directory of its own (default `<runs dir of RUN_A>/<name>-merged-<hash>`,
the hash of the runs' names): config.yaml (the first run's, seeds and variants the union), sweep.json
(`merged_from` and the union of the grids), results/ and report/. `poxm report MERGED_DIR` builds it
again from the same runs. The runs themselves are only read.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from orchestration.report.instances import load_arrays
from orchestration.stages.plan import SweepPlan, plan_from_run_dir, plan_sweep
from orchestration.rundir import (NON_IDENTITY_KEYS, RunDir, driver_alive, read_json, recomputed_trials, write_json)
from poxm_core.common.atomic import publish, write_text
from poxm_core.config.schema import SweepConfig, config_hash, resolved_dict, resolved_yaml
from poxm_core.common.errors import PoxmInputError
from poxm_core.common.results import INSTANCES

# Keys that may differ between the runs of one merged report (besides those that change no number).
FREE_KEYS = ("name", "seeds")


# --------------------------------------------------------------------------------------------
# poxm resume RUN_DIR --add-seeds

def parse_seeds(text: str) -> list[int]:
    """'2,3', '2 3' or '[2, 3]' -> [2, 3]; one line naming --add-seeds for anything else."""
    parts = [p for p in re.split(r"[\s,]+", str(text).strip().strip("[]").strip()) if p]
    try:
        seeds = [int(p) for p in parts]
    except ValueError:
        raise PoxmInputError(f"--add-seeds: expected integers such as 2,3, got {text!r}") from None
    if not seeds:
        raise PoxmInputError(f"--add-seeds: expected at least one seed, e.g. --add-seeds 2,3, got {text!r}")
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise PoxmInputError(f"--add-seeds: seed(s) {twice} given twice")
    return seeds


def extend_plan(run_dir: str | os.PathLike, seeds: list[int]) -> SweepPlan:
    """The plan of the sweep in `run_dir` with `seeds` added to its config. Everything is checked here
    (the run directory, the seeds, the extended config, no driver running) and nothing is written:
    `sweep.execute` writes sweep.json and the config once the plan is complete."""
    plan = plan_from_run_dir(run_dir)
    have = list(plan.cfg.seeds)
    overlap = [s for s in seeds if s in have]
    if overlap:
        raise PoxmInputError(f"{run_dir}: --add-seeds {overlap}: already seeds of this sweep (seeds {have}); "
                             "give only new seeds")
    live = driver_alive(plan.rd)
    if live is not None:
        raise PoxmInputError(f"{run_dir}: run directory in use by a running driver (pid {live['pid']}); "
                             "wait for it or stop it first")
    rd = plan.rd
    cfg = rd.load_config([f"seeds={have + list(seeds)}"])     # as data: orchestration.rundir.load_run_config
    new = plan_sweep(cfg, rd.root.parent, plan.cache_dir, run_dir=rd)
    new.id_seeds = plan.id_seeds if plan.id_seeds is not None else have
    return new


def tune_covers(plan: SweepPlan) -> bool:
    """Whether the Ray Tune experiment under ray/ holds every trial of the plan, so that Tuner.restore
    continues it. After seeds were added it does not (a restored Tuner takes no new trials): a fresh
    Tuner then runs over every trial, and the finished ones return at once (their done.json)."""
    covered = plan.rd.read_sweep().get("tune_trials")
    if recomputed_trials(plan.rd, plan.names):   # finished once in Tune's state: only a fresh Tuner runs them
        return False
    return covered is None or set(plan.names) <= set(covered)


def tune_caught_up(plan: SweepPlan) -> None:
    """After a Tuner over every trial of the plan has finished: the Tune experiment covers them."""
    sw = plan.rd.read_sweep()
    if "tune_trials" in sw:
        sw.pop("tune_trials")
        write_json(plan.rd.sweep, sw)


# --------------------------------------------------------------------------------------------
# poxm report RUN_A RUN_B ...

def _identity(cfg: SweepConfig) -> dict:
    d = resolved_dict(cfg)
    for k in (*NON_IDENTITY_KEYS, *FREE_KEYS):
        d.pop(k, None)
    return d


def _show(v, width: int = 60) -> str:
    text = json.dumps(v, default=str) if isinstance(v, (dict, list)) else str(v)
    return text if len(text) <= width else text[:width - 3] + "..."


def _first_difference(a, b, key: str = ""):
    """(key, a value, b value) of the first difference, walking `a` in its order; None if equal.
    A dataset's variants are matched by name: a variant only one side has is not a difference."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            sub = f"{key}.{k}" if key else str(k)
            if k not in a or k not in b:
                return sub, a.get(k, "(absent)"), b.get(k, "(absent)")
            if k == "variants" and isinstance(a[k], list) and isinstance(b[k], list):
                named_b = {v.get("name"): v for v in b[k]}
                for i, v in enumerate(a[k]):
                    if v.get("name") in named_b:
                        diff = _first_difference(v, named_b[v.get("name")], f"{sub}.{i}")
                        if diff:
                            return diff
                continue
            diff = _first_difference(a[k], b[k], sub)
            if diff:
                return diff
        return None
    if (isinstance(a, list) and isinstance(b, list) and len(a) == len(b)
            and all(isinstance(x, dict) for x in a + b)):     # datasets by position; a grid list as a whole
        for i, (x, y) in enumerate(zip(a, b)):
            diff = _first_difference(x, y, f"{key}.{i}")
            if diff:
                return diff
        return None
    return None if a == b else (key, a, b)


class _Run:
    def __init__(self, given: str):
        self.given = given
        self.rd = RunDir.existing(given)
        self.sweep = self.rd.read_sweep()
        if self.sweep.get("merged_from"):
            raise PoxmInputError(f"{given}: a merged report, not a run; give the runs it was merged from "
                                 f"({', '.join(self.sweep['merged_from'])})")
        self.cfg = self.rd.load_config()
        self.grid = self.sweep.get("grid")
        if not isinstance(self.grid, list):
            raise PoxmInputError(f"{given}: sweep.json has no grid points; run `poxm resume {given}` first")

    @property
    def cells(self) -> set[tuple[str, str, int]]:
        """(dataset, variant, seed) of every grid point."""
        return {(g["dataset"], g["variant"], int(g["seed"])) for g in self.grid}

    @property
    def variants(self) -> list[tuple[str, str]]:
        return list(dict.fromkeys((g["dataset"], g["variant"]) for g in self.grid))

    def finished_rows(self) -> pd.DataFrame | None:
        frames = []
        for name in self.sweep.get("trials", []):
            d = self.rd.trial(name)
            if (d / "done.json").is_file() and (d / "rows.csv").is_file():
                frames.append(pd.read_csv(d / "rows.csv"))
        return pd.concat(frames, ignore_index=True) if frames else None


def _merge_instances(files: list[Path], out: Path) -> None:
    """The runs' per-instance test values in one results/test_instances.npz (keys name their seed, so
    runs that differ in seeds never collide); none written when a run kept none (the claims then use
    the seed term alone, for every run alike)."""
    if not files or not all(f.is_file() for f in files):
        return
    arrays = load_arrays(files)
    with open(out, "wb") as fh:
        np.savez_compressed(fh, **arrays)


def check_runs(given: list[str]) -> list[_Run]:
    """The runs of one merged report, checked: distinct, one config apart from name, seeds and the
    variants each ran; no (dataset, variant, seed) in two runs; a variant every run shares."""
    if len({str(Path(g).expanduser().resolve()) for g in given}) != len(given):
        raise PoxmInputError(f"report: a run directory is given twice ({' '.join(given)})")
    runs = [_Run(g) for g in given]
    first = runs[0]
    for r in runs[1:]:
        diff = _first_difference(_identity(first.cfg), _identity(r.cfg))
        if diff:
            key, va, vb = diff
            raise PoxmInputError(f"{key} differs: {first.given} ({_show(va)}) vs {r.given} ({_show(vb)}); "
                                 "a report merges runs of one config (only name, seeds and variants may differ)")
    for i, r in enumerate(runs):
        for q in runs[:i]:
            clash = sorted({c[2] for c in r.cells & q.cells})
            if clash:
                raise PoxmInputError(f"{q.given} and {r.given} both hold seed(s) {clash}: a report merges runs "
                                     "of distinct seeds")
    shared = set(first.variants)
    for r in runs[1:]:
        shared &= set(r.variants)
    if not shared:
        have = "; ".join(f"{r.given} has {', '.join('/'.join(x) for x in r.variants)}" for r in runs)
        raise PoxmInputError(f"report: no (dataset, variant) shared by every run ({have})")
    return runs


def merged_config(runs: list[_Run]) -> SweepConfig:
    """The first run's config with the seeds (in order of appearance) and every dataset's variants the union."""
    d = resolved_dict(runs[0].cfg)
    d["seeds"] = list(dict.fromkeys(s for r in runs for s in r.cfg.seeds))
    for i, ds in enumerate(d["datasets"]):
        names = {v["name"] for v in ds["variants"]}
        for r in runs[1:]:
            for v in resolved_dict(r.cfg)["datasets"][i]["variants"]:
                if v["name"] not in names:
                    ds["variants"].append(v)
                    names.add(v["name"])
    return SweepConfig.model_validate(d)


def default_out(runs: list[_Run]) -> Path:
    ids = sorted(r.rd.root.name for r in runs)
    return runs[0].rd.root.parent / f"{runs[0].cfg.name}-merged-{config_hash({'runs': ids})}"


def _check_out(out: Path, runs: list[_Run]) -> None:
    for r in runs:
        if out == r.rd.root or r.rd.root in out.parents or out in r.rd.root.parents:
            raise PoxmInputError(f"--out {out}: inside or around run {r.given}; pick a directory of its own")
    if out.exists():
        if not out.is_dir():
            raise PoxmInputError(f"--out {out}: exists and is not a directory")
        if any(out.iterdir()) and not (read_json(out / "sweep.json", {}) or {}).get("merged_from"):
            raise PoxmInputError(f"--out {out}: exists and is not a merged report; pick a new directory")


def merge_report(given: list[str], out: str | os.PathLike | None = None, say=print) -> tuple[Path, Path | None]:
    """One report over the finished trials of `given` runs (see the module docstring) in `out`; returns
    (out, its report/ or None when it could not be built). Every check comes before anything is
    written; the directory is built beside `out`, swapped in, and its report/ built there (a failure
    puts the previous directory back)."""
    from orchestration.stages.gather import select_and_report

    runs = check_runs(list(given))
    out = Path(out).expanduser().resolve() if out is not None else default_out(runs)
    _check_out(out, runs)
    cfg = merged_config(runs)
    frames = [f for f in (r.finished_rows() for r in runs) if f is not None]
    from poxm_core.common.results import COLUMNS
    rows = pd.concat(frames, ignore_index=True)[COLUMNS] if frames else pd.DataFrame(columns=COLUMNS)
    preps = [pd.read_csv(r.rd.prepare_csv) for r in runs if r.rd.prepare_csv.is_file()]

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.merge.tmp-", dir=out.parent))
    old = None
    try:
        trd = RunDir(tmp)
        write_text(trd.config, resolved_yaml(cfg))
        write_json(trd.sweep, {"name": cfg.name, "merged_from": [str(r.rd.root) for r in runs],
                               "seeds": list(cfg.seeds), "trials": [],
                               "grid": [g for r in runs for g in r.grid]})
        trd.results.mkdir()
        rows.to_csv(trd.rows_csv, index=False, columns=COLUMNS)
        if preps:
            pd.concat(preps, ignore_index=True).to_csv(trd.prepare_csv, index=False)
        _merge_instances([r.rd.results / INSTANCES for r in runs], trd.results / INSTANCES)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.merge.old-", dir=out.parent))
            publish(out, old / "out")
        publish(tmp, out)
        tmp = None
        report = select_and_report(RunDir(out), cfg.selection.criterion, rows, say)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        elif old is not None or out.exists():
            shutil.rmtree(out, ignore_errors=True)
        if old is not None:
            if (old / "out").exists():
                publish(old / "out", out)
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    say(f"merged {len(runs)} runs ({len(rows)} result rows, seeds {list(cfg.seeds)}) into {out}")
    return out, report


def is_merged(run_dir: str | os.PathLike) -> bool:
    f = Path(run_dir).expanduser() / "sweep.json"
    return f.is_file() and bool((read_json(f, {}) or {}).get("merged_from"))


def remerge(run_dir: str | os.PathLike, say=print) -> tuple[Path, Path | None]:
    """`poxm report MERGED_DIR`: merge its runs again into it."""
    runs = (read_json(Path(run_dir) / "sweep.json", {}) or {})["merged_from"]
    return merge_report(runs, out=run_dir, say=say)
