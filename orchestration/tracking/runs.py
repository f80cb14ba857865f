"""MLflow tracking of a sweep: one experiment, one parent run, one nested run per grid point.

Layout (docs/orchestration.md, "MLflow"):
  experiment   cfg.mlflow.experiment, default '<name>-<hash>' (the run directory's name)
  experiment   tag mlflow.experimentKind=custom_model_development; the store's empty 'Default' deleted
  parent run   name '<name>-<hash>', tags poxm.role=sweep, poxm.sweep, config_hash, git_commit, the
               standard mlflow.source.name / mlflow.user / mlflow.source.git.commit, and a description
               (mlflow.note.content, led at the end of the sweep by the results and the claims, or how to get
               verdicts, then what the sweep is); params: the
               resolved config, flattened ('training.epochs', 'datasets.0.variants.1.T'); no metrics: the
               summaries are tables (log_table: tables/results.json, claims.json, sweep.json); artifacts:
               config.yaml, sweep.json, results/*.csv, report/
  point runs   one per grid point (dataset, variant, method, p, lam, seed), tag mlflow.parentRunId,
               named by what differs first: 'A s0 poxm p10 λ.9' (+ dataset if several); params: every grid
               coordinate and training setting; per-epoch metrics (step = epoch): 'train/loss',
               'val/IS', 'val/sIS', 'val/SNIS', 'val/ESS' (+ '_se'); final metrics: 'test/R_at_5' ... ×100
               (poxm_core.common.results.mlflow_name: MLflow rejects '@'), 'val/<estimator>' of untrained heads;
               a description naming the units (names.point_note); Duration (end - start) = the run's own, from
               its trial's start to its last value, tags started_at / ended_at; its share of the trial's
               compute in tags head_seconds, share_of_trial (worker.duration_tags)

The driver creates the store, the experiment and every run id before any trial starts (concurrent
first use of a fresh sqlite store races on its schema migration), finds them by tags when they
exist (so a resumed sweep adds no duplicate), and writes the mapping to run_dir/mlflow_runs.json.
Train workers log to those ids with MlflowClient.log_batch and set them FINISHED.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

from orchestration.tracking.names import (GRID, MAX_PARAM_VALUE, PARENT_TAG, PERCENT_SPLITS, POINT_TAG,  # noqa: F401
                                          ROLE_TAG, SWEEP_TAG, TRIAL_TAG, flat_params, metric_name, point_key,
                                          point_name, point_note, point_params, standard_tags, ui_value)
from orchestration.tracking.store import (RUN_DIR_STORE, client, is_local_store, record_uri, relocate_store,  # noqa: F401
                                         resolve_uri, stored_uri)
from orchestration.tracking.worker import PointLogger, head_costs  # noqa: F401  (the worker side)

_BATCH = 100  # params/tags per log_batch call (MLflow's limit); metrics go up to 1000

# Run names, tags and params: orchestration/tracking/names.py; the URI: orchestration/tracking/store.py;
# the worker's logger: orchestration/tracking/worker.py (all re-exported: callers use tracking.point_key etc.)


# --------------------------------------------------------------------------------------------
# driver side

@dataclass(frozen=True)
class SweepRuns:
    """What the workers need: the URI and the run ids (what mlflow_runs.json holds)."""
    uri: str
    experiment_id: str
    parent: str
    points: dict[str, str]          # point_key -> run id

    def to_dict(self) -> dict:
        return {"tracking_uri": self.uri, "experiment_id": self.experiment_id, "parent_run_id": self.parent,
                "points": self.points}


def init_store(uri: str, experiment: str, artifact_root: Path | None) -> str:
    """Create (or find) the experiment once, in the driver, before any worker touches the store.

    With a local sqlite store, artifacts go to `artifact_root` (run_dir/mlartifacts) instead of a
    ./mlruns next to whatever the cwd is."""
    import mlflow
    c = client(uri)
    exp = c.get_experiment_by_name(experiment)
    if exp is None:
        loc = artifact_root.resolve().as_uri() if (artifact_root is not None and is_local_store(uri)) else None
        try:
            return _mark_model_training(c, c.create_experiment(experiment, artifact_location=loc))
        except mlflow.exceptions.MlflowException:
            exp = c.get_experiment_by_name(experiment)   # created meanwhile by another driver
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        c.restore_experiment(exp.experiment_id)
    return _mark_model_training(c, exp.experiment_id)


def _mark_model_training(c, exp_id: str) -> str:
    # The experiment's kind for MLflow 3's UI. MLflow 3.17's UI no longer reads it (its experiment
    # page follows the URL's ?workflowType= or the browser's last choice, default GenAI; see ui.py),
    # but other versions and `mlflow.search_experiments` do; and the empty "Default" experiment that
    # a fresh SQLite store creates is deleted, so the UI lists only the sweep's.
    c.set_experiment_tag(exp_id, "mlflow.experimentKind", "custom_model_development")
    if is_local_store(str(c.tracking_uri)):
        drop_empty_default(c)
    return exp_id


def drop_empty_default(c) -> bool:
    """Delete (soft: the store does not recreate it) the store's 'Default' experiment when it has no
    runs; True if it did."""
    try:
        exp = c.get_experiment("0")
    except Exception:  # noqa: BLE001  no default experiment in this store
        return False
    if exp is None or exp.name != "Default" or exp.lifecycle_stage != "active":
        return False
    if c.search_runs(["0"], max_results=1, run_view_type=3):   # ViewType.ALL
        return False
    c.delete_experiment("0")
    return True


def _search_all(c, exp_id: str, filter_string: str) -> list:
    out, token = [], None
    while True:
        page = c.search_runs([exp_id], filter_string=filter_string, max_results=1000, page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


OWNER_TAG = "poxm.run_dir_key"   # the run directory's own key (sweep.json state_key): whose runs these are


def owned(found: list, owner: str | None) -> list:
    """The parent runs of `found` that belong to the run directory keyed `owner`: those tagged with it,
    else those of a poxm that tagged no owner (adopted by the first run directory that continues
    them); never another run directory's. No owner: all of them."""
    if not owner:
        return found
    mine = [r for r in found if r.data.tags.get(OWNER_TAG) == owner]
    return mine or [r for r in found if OWNER_TAG not in r.data.tags]


def ensure_parent(uri: str, exp_id: str, sweep: str, tags: Mapping[str, str],
                  params: Mapping[str, str] | None = None, description: str | None = None) -> str:
    """The sweep's parent run (found by tags, else created), set RUNNING; `params` (the resolved
    config, flattened) are logged where not logged yet (MLflow params cannot change), `description`
    becomes the run's note (mlflow.note.content). With tags[OWNER_TAG] (the run directory's own key),
    only a parent of that run directory is found (`owned`): two run directories of one config on one
    server never share runs."""
    from mlflow.entities import Param

    c = client(uri)
    found = _search_all(c, exp_id, f"tags.`{ROLE_TAG}` = 'sweep' and tags.`{SWEEP_TAG}` = '{sweep}'")
    found = owned(found, tags.get(OWNER_TAG))
    if found:
        run = sorted(found, key=lambda r: r.info.start_time)[0]
        rid, have = run.info.run_id, dict(run.data.params)
        c.update_run(rid, status="RUNNING")
    else:
        rid = c.create_run(exp_id, run_name=sweep, tags={ROLE_TAG: "sweep", SWEEP_TAG: sweep, **tags}).info.run_id
        have = {}
    _log_tags(c, rid, {**tags, **({"mlflow.note.content": description} if description else {})})
    new = [Param(k, v) for k, v in (params or {}).items() if k not in have]
    for i in range(0, len(new), _BATCH):
        c.log_batch(rid, params=new[i:i + _BATCH])
    return rid


def sweep_description(cfg_dict: Mapping, sweep: str, n_trials: int, n_points: int, protocol: str) -> str:
    """The parent run's note: what the sweep is and how its runs and metrics are named (Markdown)."""
    ds = ", ".join(f"{d['name']} ({', '.join(v['name'] for v in d['variants'])})" for d in cfg_dict["datasets"])
    methods = ", ".join(cfg_dict["methods"])
    return (f"**POXM sweep `{sweep}`**: {n_trials} trial(s), {n_points} grid point(s); seeds {cfg_dict['seeds']}.\n\n"
            f"- datasets (variants): {ds}\n- methods: {methods}\n"
            f"- protocol: {protocol}; selection criterion: {cfg_dict.get('selection', {}).get('criterion', 'IS')}; "
            f"epochs: {cfg_dict['training']['epochs']}\n\n"
            "Child runs are named `variant seed method p λ` (+ dataset when there are several: "
            "`A s0 poxm p10 λ.9`); their params `method`, `variant`, `p`, `lam`, `seed` and metrics `val/IS` "
            "(the validation estimate) and `test/R_at_5` are the runs table's columns (`poxm ui` sets them). "
            "Metrics: `train/loss` and `val/<estimator>` (IS, sIS, SNIS, with `_se`: an expected reward per slate, "
            "0 to the slate size, not a rate; `val/ESS`: instances) per epoch (step = epoch); `test/<metric>` "
            "(R_at_k, nDCR_at_k, PSR_at_k = R@k, nDCR@k, PSR@k) ×100 like the report, once at the end. A child's "
            "Duration is its own (its trial's start to its last value; the heads of a trial train together), its "
            "share of the trial's compute the tags `head_seconds` and `share_of_trial`. This run's summaries are tables in its artifacts (`tables/results.json`, "
            "`tables/claims.json` with verdicts in words, `tables/sweep.json`), with the report (`report/`); "
            "its parameters are the resolved config.")


def ensure_points(uri: str, exp_id: str, parent: str, sweep: str, cfg_dict: Mapping,
                  points: Iterable[tuple[Mapping, str]], tags: Mapping[str, str],
                  point_tags: Mapping[str, Mapping[str, str]] | None = None,
                  on_progress: Callable[[dict[str, str]], None] | None = None, every: int = 64,
                  stop: threading.Event | None = None) -> dict[str, str]:
    """One run per grid point: the existing one (by tags poxm.sweep + poxm.point, under `parent`) or a new one with
    its params and tags, status SCHEDULED until its trial starts. Returns {point_key: run_id}, in the
    order of `points`. `on_progress(so far)`: called after the existing runs are found and then every
    `every` new runs (the trials waiting for theirs see them early); `stop` set: return what exists."""
    from mlflow.entities import Param

    c = client(uri)
    have: dict[str, str] = {}
    note = point_note(int((cfg_dict.get("model") or {}).get("slate_size") or 5))     # the units, on each run's page
    # the points of this parent only: another run directory's sweep of the same config has its own parent
    for r in sorted(_search_all(c, exp_id, f"tags.`{ROLE_TAG}` = 'point' and tags.`{SWEEP_TAG}` = '{sweep}' "
                                           f"and tags.`{PARENT_TAG}` = '{parent}'"),
                    key=lambda r: r.info.start_time):
        have.setdefault(r.data.tags.get(POINT_TAG, ""), r.info.run_id)
    keyed = [(point_key(p), p, t) for p, t in points]
    out = {key: have[key] for key, _, _ in keyed if key in have}
    if on_progress is not None:
        on_progress(dict(out))
    created = 0
    for key, point, trial in keyed:
        if stop is not None and stop.is_set():
            break
        extra = dict((point_tags or {}).get(key, {}))
        if key in have:
            out[key] = have[key]
            if extra:
                _log_tags(c, have[key], extra)
            continue
        ptags = {ROLE_TAG: "point", SWEEP_TAG: sweep, POINT_TAG: key, TRIAL_TAG: trial, PARENT_TAG: parent,
                 **{k: "none" if point[k] is None else str(point[k]) for k in GRID}, **tags,
                 "mlflow.note.content": note, **extra}
        run = c.create_run(exp_id, run_name=point_name(point, with_dataset=len(cfg_dict["datasets"]) > 1),
                           tags=ptags)
        params = [Param(k, v) for k, v in point_params(cfg_dict, point, trial).items()]
        for i in range(0, len(params), _BATCH):
            c.log_batch(run.info.run_id, params=params[i:i + _BATCH])
        c.update_run(run.info.run_id, status="SCHEDULED")
        out[key] = run.info.run_id
        created += 1
        if on_progress is not None and created % every == 0:
            on_progress(dict(out))
    return {key: out[key] for key, _, _ in keyed if key in out}


def _log_tags(c, run_id: str, tags: Mapping[str, str]) -> None:
    from mlflow.entities import RunTag
    items = [RunTag(k, str(v)) for k, v in tags.items()]
    for i in range(0, len(items), _BATCH):
        c.log_batch(run_id, tags=items[i:i + _BATCH])


def close_points(runs: SweepRuns, status_by_key: Mapping[str, str]) -> dict[str, int]:
    """End every point run that is not FINISHED: FAILED for errored trials, KILLED for ones never
    run; returns a count per final status. Nothing is left RUNNING or SCHEDULED."""
    c = client(runs.uri)
    counts: dict[str, int] = {}
    by_id = {r.info.run_id: r for r in _search_all(c, runs.experiment_id,
                                                    f"tags.`{PARENT_TAG}` = '{runs.parent}'")}
    for key, rid in runs.points.items():
        r = by_id.get(rid) or c.get_run(rid)
        st = r.info.status
        if st != "FINISHED":
            st = status_by_key.get(key, "KILLED")
            if st == "FINISHED":    # the trial finished but the worker did not close it (killed at the end)
                c.set_terminated(rid, "FINISHED")
            else:
                c.set_terminated(rid, st)
        counts[st] = counts.get(st, 0) + 1
    return counts


def log_metrics(c, run_id: str, metrics: Mapping[str, float]) -> int:
    """Log the finite values of `metrics` (step 0) on one run, 1000 per batch (MLflow's limit); returns how many."""
    from mlflow.entities import Metric
    now = int(time.time() * 1000)
    ms = [Metric(k, float(v), now, 0) for k, v in metrics.items() if v is not None and math.isfinite(float(v))]
    for i in range(0, len(ms), 1000):
        c.log_batch(run_id, metrics=ms[i:i + 1000])
    return len(ms)


def log_tables(c, run_id: str, tables: Mapping[str, object]) -> None:
    """Each {artifact file: DataFrame} as an MLflow table (MlflowClient.log_table: a JSON artifact the
    run's Artifacts tab shows as a table)."""
    for name, frame in tables.items():
        c.log_table(run_id, data=frame, artifact_file=name)


def set_note(c, run_id: str, extra: str | None) -> None:
    """The run's description (mlflow.note.content) led by `extra` (the results: what the page opens on),
    in place of what an earlier call put there, then the sweep's own description below a rule."""
    if not extra:
        return
    note = c.get_run(run_id).data.tags.get("mlflow.note.content", "")
    if note.startswith(NOTE_LEAD):           # an earlier call's results first: keep what follows them
        note = note.split(f"\n{NOTE_RESULTS}\n", 1)[1] if f"\n{NOTE_RESULTS}\n" in note else ""
    else:                                    # the description alone, or results at its end (older poxm)
        note = note.split(NOTE_RESULTS)[0]
    c.set_tag(run_id, "mlflow.note.content", f"{NOTE_LEAD}\n\n{extra}\n\n{NOTE_RESULTS}\n\n{note.strip()}".rstrip())


NOTE_RESULTS = "---"
NOTE_LEAD = "### Results"


def finish_parent(runs: SweepRuns, ok: bool, tables: Mapping[str, object], artifacts: Iterable[tuple[Path, str]],
                  note_extra: str | None = None) -> None:
    """Summary tables, artifacts (files or folders, with their artifact path), the description's results
    and the end status of the parent run."""
    c = client(runs.uri)
    log_tables(c, runs.parent, tables)
    set_note(c, runs.parent, note_extra)
    for path, where in artifacts:
        path = Path(path)
        if path.is_dir():
            c.log_artifacts(runs.parent, str(path), where)
        elif path.is_file():
            c.log_artifact(runs.parent, str(path), where or None)
    c.set_terminated(runs.parent, "FINISHED" if ok else "FAILED")


def tag_selected(runs: SweepRuns, selection_rows: Iterable[Mapping]) -> None:
    """Tag the grid-point runs chosen by selection: poxm.selected = 'is' / 'oracle' / 'is,oracle'."""
    c = client(runs.uri)
    chosen: dict[str, list[str]] = {}
    for row in selection_rows:
        p = None if int(row["p"]) < 0 else int(row["p"])
        lam = None if row["lam"] is None or (isinstance(row["lam"], float) and math.isnan(row["lam"])) else float(row["lam"])
        key = point_key({"dataset": row["dataset"], "variant": row["variant"], "method": row["method"],
                         "p": p, "lam": lam, "seed": int(row["seed"])})
        chosen.setdefault(key, []).append(str(row["selection"]))
    for key, sels in chosen.items():
        if key in runs.points:
            c.set_tag(runs.points[key], "poxm.selected", ",".join(sorted(set(sels))))
