"""`poxm status RUN_DIR`: the sweep's trials and stages from the run directory's files (no Ray).

A trial is  done         trials/<t>/done.json exists
            running      state.json says running and a driver holds the run directory's lock (driver.lock)
            interrupted  state.json says running but no driver is alive (killed): `poxm resume` continues it
            errored      its last attempt failed (state.json holds the first line of the error)
            pending      not started
"""
from __future__ import annotations

import time

from pathlib import Path

from orchestration.cli_parser import poxm_command
from orchestration.rundir import RunDir, driver_alive, read_json
from orchestration.tracking.store import safe_uri
from poxm_core.common.errors import PoxmInputError

STATES = ("done", "running", "interrupted", "errored", "pending")


def _obj(path: Path) -> dict | None:
    """A JSON file that must hold an object (None when absent); anything else is one line naming it."""
    d = read_json(path)
    if d is not None and not isinstance(d, dict):
        raise PoxmInputError(f"{path}: expected a JSON object, got {type(d).__name__}")
    return d


def _num(path: Path, d: dict, key: str, default=0.0) -> float:
    """d[key] as a number (default when absent or empty); a value of another type is one line."""
    v = d.get(key, default)
    if v in ("", None):
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise PoxmInputError(f"{path}: key '{key}': expected a number, got {str(v)[:40]!r}")
    return v


def _text(path: Path, d: dict, key: str) -> str:
    v = d.get(key, "")
    return v if isinstance(v, (str, int, float)) and not isinstance(v, bool) else str(v)[:80]


def _trial_names(rd: RunDir, sw: dict) -> list[str]:
    """sweep.json's trial names: plain folder names, else one line (a name is a folder of trials/)."""
    names = sw.get("trials", [])
    if not isinstance(names, list):
        raise PoxmInputError(f"{rd.sweep}: key 'trials': expected a list of trial names, got {type(names).__name__}")
    for n in names:
        if not isinstance(n, str) or not n or n in (".", "..") or "/" in n or "\\" in n:
            raise PoxmInputError(f"{rd.sweep}: key 'trials': {str(n)[:60]!r} is not a trial name (a plain folder name)")
    return names


def _trial_row(rd: RunDir, name: str, alive: bool) -> dict:
    d = rd.trial(name)
    done, st = _obj(d / "done.json"), _obj(d / "state.json")
    st_path = d / ("done.json" if done is not None else "state.json")
    st = {"state": "done", **done} if done is not None else (st if st is not None else {"state": "pending"})
    state = st.get("state", "pending")
    state = state if state in STATES else "errored" if state == "failed" else "pending"
    if state == "running" and not alive:
        state = "interrupted"
    tpath = d / "timing.json"
    attempts = (_obj(tpath) or {}).get("attempts", [])
    if not isinstance(attempts, list) or not all(isinstance(a, dict) for a in attempts):
        raise PoxmInputError(f"{tpath}: key 'attempts': expected a list of objects")
    updated = _num(st_path, st, "updated", None)
    return {"trial": name, "state": state,
            "epoch": _text(st_path, st, "epoch"),
            "epochs": _text(st_path, st, "epochs") or (_text(st_path, st, "epoch") if state == "done" else ""),
            # tries: every start of the trial, killed ones included (state.json); attempts: finished ones
            "attempts": max(len(attempts), int(_num(st_path, st, "tries", 0))),
            "compute_s": round(sum(_num(tpath, a, "run_trial_s") for a in attempts), 1),
            "updated_s_ago": round(time.time() - updated) if updated is not None else "",
            "error": str(st.get("error", ""))[:300].splitlines()[0] if state == "errored" and st.get("error") else "",
            "input_error": bool(st.get("input_error")) and state == "errored"}


def trial_table(rd: RunDir) -> list[dict]:
    """One row per trial of sweep.json, from its files; odd but parseable JSON is one line naming the file."""
    sw = rd.read_sweep()
    alive = driver_alive(rd) is not None
    return [_trial_row(rd, name, alive) for name in _trial_names(rd, sw)]


def _ray_state(rd: RunDir) -> str:
    """Where Ray's state of this sweep is on this machine (orchestration.cluster.ray_state), if anywhere.
    The run's config is read as plain data: nothing it names is imported or opened."""
    from orchestration.cluster.ray_state import ray_state_dir
    storage = rd.recorded().get("storage_path")
    if storage:
        return (f"{str(storage).rstrip('/')}/{rd.root.name}/ray (resources.storage_path as the run records it; "
                "used only when you give the same --storage-path)")
    try:
        path = ray_state_dir(rd)
    except PoxmInputError:
        return "(no state key)"
    return str(path) if path.is_dir() else "(none on this machine: a resume starts a fresh Tune experiment)"


def _plugins_line(rd: RunDir) -> list[str]:
    """The plugins the run's config names: shown, never imported from the run directory."""
    named = rd.recorded().get("plugins") or []
    if not named:
        return []
    return [f"plugins    {', '.join(named)} (named by the run, not imported; `poxm resume`/`report` load them "
            f"only with --plugins {','.join(named)})"]


def status_text(run_dir) -> str:
    rd = RunDir.existing(run_dir)
    sw = rd.read_sweep()
    rows = trial_table(rd)
    counts = {s: sum(r["state"] == s for r in rows) for s in STATES}
    live = driver_alive(rd)
    ml = read_json(rd.mlflow_runs, {}) or {}
    ml = ml if isinstance(ml, dict) else {}
    grid = sw.get("grid", [])
    lines = [f"sweep      {_text(rd.sweep, sw, 'id') or rd.root.name}  ({len(rows)} trials, "
             f"{len(grid) if isinstance(grid, list) else '?'} grid points)",
             f"run dir    {rd.root}",
             f"driver     {'running (pid ' + str(live['pid']) + ')' if live else 'not running'}",
             f"mlflow     {safe_uri(str(ml['tracking_uri'])) if ml.get('tracking_uri') else '(not initialised yet)'}",
             "trials     " + "  ".join(f"{s} {counts[s]}" for s in STATES),
             f"results    {'yes' if rd.rows_csv.is_file() else 'no'}; report {'yes' if (rd.report / 'index.md').is_file() else 'no'}",
             f"ray state  {_ray_state(rd)}",
             *_plugins_line(rd),
             ""]
    if rows:
        w = max(len(r["trial"]) for r in rows)
        lines.append(f"{'trial':<{w}}  {'state':<11}  {'epoch':>7}  {'tries':>5}  {'compute_s':>9}  note")
        for r in rows:
            ep = f"{r['epoch']}/{r['epochs']}" if r["epoch"] != "" else ""
            note = r["error"] or (f"updated {r['updated_s_ago']} s ago" if r["state"] in ("running", "interrupted") else "")
            lines.append(f"{r['trial']:<{w}}  {r['state']:<11}  {ep:>7}  {r['attempts']:>5}  {r['compute_s']:>9}  {note}")
    # every trial done but the driver gone before gathering (killed at the end): the resume gathers and reports
    unreported = rows and not live and counts["done"] == len(rows) and not rd.rows_csv.is_file()
    if (counts["interrupted"] or counts["errored"] or (counts["pending"] and not live) or unreported) \
            and not sw.get("merged_from"):
        lines += ["", *resume_advice(rd, rows, ml)]
    return "\n".join(lines)


def resume_flags(rd: RunDir, ml: dict | None = None) -> tuple[list[str], list[str]]:
    """(flags, what they vouch for) of the `poxm resume` this run needs: what the run names and poxm
    takes only from the user (plugins, storage path, tracking URI, prepare cache); without them the
    resume would stop at its first check."""
    from orchestration.tracking.store import is_run_dir_store
    if ml is None:
        try:
            ml = read_json(rd.mlflow_runs, {}) or {}
        except PoxmInputError:
            ml = {}
    ml = ml if isinstance(ml, dict) else {}
    rec = rd.recorded()
    flags, why = [], []
    if rec.get("plugins"):
        flags.append(f"--plugins {','.join(rec['plugins'])}")
        why.append("plugins")
    if rec.get("storage_path"):
        flags.append(f"--storage-path {rec['storage_path']}")
        why.append("storage path")
    uri = rec.get("tracking_uri") or (str(ml["tracking_uri"]) if ml.get("tracking_uri") else None)
    if uri and not is_run_dir_store(rd.root, uri):
        flags.append(f"--mlflow-uri {safe_uri(uri)}")
        why.append("MLflow server")
    cache = _text(rd.sweep, rd.read_sweep(), "cache_dir")
    if cache and Path(cache).expanduser().resolve() != rd.root.parent / "cache":
        flags.append(f"--cache-dir {cache}")
        why.append("prepare cache")
    return flags, why


def resume_command(rd: RunDir, ml: dict | None = None) -> str:
    """The `poxm resume` that continues this run (resume_flags), as this shell calls poxm."""
    return " ".join([poxm_command(), "resume", str(rd.root), *resume_flags(rd, ml)[0]])


def resume_advice(rd: RunDir, rows: list[dict], ml: dict) -> list[str]:
    """The resume that continues this run, with every flag it needs (resume_flags), after what would
    refuse it (a ray/ folder inside, an input error a trial names)."""
    why = resume_flags(rd, ml)[1]
    out = []
    if (rd.root / "ray").exists():
        out.append(f"first remove {rd.root / 'ray'} (Ray's saved state never lives in a run directory)")
    if any(r.get("input_error") for r in rows):
        out.append("first fix the input each errored trial names above")
    out.append(f"continue with: {resume_command(rd, ml)}" + (f"   (the run's {', '.join(why)}: give them only if "
                                                              "they are yours)" if why else ""))
    return out
