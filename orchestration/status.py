"""`poxm status RUN_DIR`: the sweep's trials and stages from the run directory's files (no Ray).

A trial is  done         trials/<t>/done.json exists
            running      state.json says running and the driver (driver.json) is alive
            interrupted  state.json says running but no driver is alive (killed): `poxm resume` continues it
            errored      its last attempt failed (state.json holds the first line of the error)
            pending      not started
"""
from __future__ import annotations

import time

from orchestration.rundir import RunDir, driver_alive, read_json, trial_state
from orchestration.tracking.store import safe_uri

STATES = ("done", "running", "interrupted", "errored", "pending")


def trial_table(rd: RunDir) -> list[dict]:
    sw = rd.read_sweep()
    alive = driver_alive(rd) is not None
    out = []
    for name in sw.get("trials", []):
        st = trial_state(rd.trial(name))
        state = st.get("state", "pending")
        if state == "running" and not alive:
            state = "interrupted"
        timing = read_json(rd.trial(name) / "timing.json", {"attempts": []}) or {"attempts": []}
        out.append({"trial": name, "state": state,
                    "epoch": st.get("epoch", ""), "epochs": st.get("epochs", st.get("epoch", "") if state == "done" else ""),
                    # tries: every start of the trial, killed ones included (state.json); attempts: finished ones
                    "attempts": max(len(timing["attempts"]), int(st.get("tries", 0) or 0)),
                    "compute_s": round(sum(a.get("run_trial_s", 0.0) for a in timing["attempts"]), 1),
                    "updated_s_ago": round(time.time() - st["updated"]) if "updated" in st else "",
                    "error": st.get("error", "") if state == "errored" else ""})
    return out


def _ray_state(rd: RunDir) -> str:
    """Where Ray's state of this sweep is on this machine (orchestration.cluster.ray_state), if anywhere.
    The run's config is read as plain data: nothing it names is imported or opened."""
    from orchestration.cluster.ray_state import ray_state_dir
    from poxm_core.common.errors import PoxmInputError
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
    lines = [f"sweep      {sw.get('id', rd.root.name)}  ({len(rows)} trials, {len(sw.get('grid', []))} grid points)",
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
    if counts["interrupted"] or counts["errored"] or (counts["pending"] and not live) or unreported:
        lines.append("")
        lines.append(f"continue with: poxm resume {rd.root}")
    return "\n".join(lines)
