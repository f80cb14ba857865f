"""MLflow tracking of a sweep: one experiment, one parent run, one nested run per grid point.

Layout (docs/orchestration.md, "MLflow"):
  experiment   cfg.mlflow.experiment, default '<name>-<hash>' (the run directory's name)
  experiment   tag mlflow.experimentKind=custom_model_development; the store's empty 'Default' deleted
  parent run   name '<name>-<hash>', tags poxm.role=sweep, poxm.sweep, config_hash, git_commit, the
               standard mlflow.source.name / mlflow.user / mlflow.source.git.commit, and a description
               (mlflow.note.content, with the results and the claims' verdicts at the end); params: the
               resolved config, flattened ('training.epochs', 'datasets.0.variants.1.T'); no metrics: the
               summaries are tables (log_table: tables/results.json, claims.json, sweep.json); artifacts:
               config.yaml, sweep.json, results/*.csv, report/
  point runs   one per grid point (dataset, variant, method, p, lam, seed), tag mlflow.parentRunId,
               named by what differs first: 'A s0 poxm p10 λ.9' (+ dataset if several); params: every grid
               coordinate and training setting; per-epoch metrics (step = epoch): 'train/loss',
               'val/IS', 'val/sIS', 'val/SNIS', 'val/ESS' (+ '_se'); final metrics: 'test/R_at_5' ... ×100
               (poxm_core.common.results.mlflow_name: MLflow rejects '@'), 'val/<estimator>' of untrained heads;
               Duration (end - start) = the head's own share of its trial's compute (head_costs)

The driver creates the store, the experiment and every run id before any trial starts (concurrent
first use of a fresh sqlite store races on its schema migration), finds them by tags when they
exist (so a resumed sweep adds no duplicate), and writes the mapping to run_dir/mlflow_runs.json.
Train workers log to those ids with MlflowClient.log_batch and set them FINISHED.
"""
from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

from poxm_core.common.results import mlflow_name
from orchestration.tracking.store import (RUN_DIR_STORE, is_local_store, record_uri, relocate_store,  # noqa: F401
                                         resolve_uri, stored_uri)

ROLE_TAG, SWEEP_TAG, POINT_TAG, TRIAL_TAG = "poxm.role", "poxm.sweep", "poxm.point", "poxm.trial"
PARENT_TAG = "mlflow.parentRunId"
GRID = ("dataset", "variant", "method", "p", "lam", "seed")
_BATCH = 100  # params/tags per log_batch call (MLflow's limit); metrics go up to 1000


# --------------------------------------------------------------------------------------------
# the tracking URI: orchestration/tracking/store.py (re-exported: callers use tracking.resolve_uri etc.)

def client(uri: str):
    from mlflow import MlflowClient
    return MlflowClient(tracking_uri=uri)


# --------------------------------------------------------------------------------------------
# grid points

def point_key(p: Mapping) -> str:
    """'dataset|variant|method|p|lam|seed' with p/lam 'none' where unused: the point's identity tag."""
    def f(v):
        return "none" if v is None or (isinstance(v, float) and math.isnan(v)) else repr(v)
    return "|".join([str(p["dataset"]), str(p["variant"]), str(p["method"]), f(p["p"]), f(p["lam"]), str(p["seed"])])


def _short(v) -> str:
    """A number as short as it reads: 0.9 -> '.9', 0.05 -> '.05', 1.0 -> '1', 50 -> '50'."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    t = f"{v:g}" if isinstance(v, float) else str(v)
    return t[1:] if t.startswith("0.") else ("-" + t[2:] if t.startswith("-0.") else t)


def point_name(p: Mapping, with_dataset: bool = True) -> str:
    """A run's name, short enough for the UI's run-name column (~25 characters) and leading with
    what differs between the runs of a sweep: variant, seed, method, p, λ, then the dataset
    ('A s0 poxm p50 λ.9 bibtex'; 'B s1 dm bibtex'). `with_dataset=False` (a one-dataset sweep)
    leaves the dataset out: it is in the run's tags and params anyway."""
    parts = [str(p["variant"]), f"s{p['seed']}", str(p["method"])]
    if p["p"] is not None:
        parts.append(f"p{p['p']}")
    if p["lam"] is not None and not (isinstance(p["lam"], float) and math.isnan(p["lam"])):
        parts.append(f"λ{_short(p['lam'])}")
    if with_dataset:
        parts.append(str(p["dataset"]))
    return " ".join(parts)


def metric_name(key: str, split: str | None = None) -> str:
    """MLflow metric name with its split prefix, so the UI groups the charts: per-epoch 'loss' ->
    'train/loss', an estimate 'SNIS' -> 'val/SNIS'; final rows by their split: 'test/R_at_5'."""
    key = mlflow_name(key)
    if split is None:
        split = "train" if key in ("loss", "loss_se") else "val"
    return f"{split}/{key}"


PERCENT_SPLITS = ("test",)


def ui_value(split: str, metric: str, value: float) -> float:
    """A value as MLflow shows it: the test metrics (R@k, nDCR@k, PSR@k, P@k, ...: rates) ×100, the
    report's and the terminal's scale, rounded to 4 decimals; validation estimates, ESS and the loss in
    their own units (an estimate is an expected reward per slate, not a rate)."""
    if split in PERCENT_SPLITS and "@" in metric:
        return round(100.0 * float(value), 4)
    return float(value)


def _flat(prefix: str, d: Mapping) -> dict[str, str]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(_flat(key, v))
        else:
            out[key] = "none" if v is None else str(v)
    return out


MAX_PARAM_VALUE = 6000   # MLflow 3's limit on a param value's length


def flat_params(d, prefix: str = "") -> dict[str, str]:
    """A nested config as MLflow params: mappings and lists of mappings by key path
    ('datasets.0.variants.1.T'), other lists as their text ('[10, 20]'), None as 'none'. A key MLflow
    would reject is spelt as mlflow_name spells metrics ('...match.logging_to_skyline_R_at_5')."""
    out: dict[str, str] = {}
    items = d.items() if isinstance(d, Mapping) else enumerate(d)
    for k, v in items:
        key = f"{prefix}.{mlflow_name(str(k))}" if prefix else mlflow_name(str(k))
        if isinstance(v, Mapping) or (isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v)):
            out.update(flat_params(v, key))
        else:
            text = "none" if v is None else str(v)
            out[key] = text if len(text) <= MAX_PARAM_VALUE else text[:MAX_PARAM_VALUE - 3] + "..."
    return out


def standard_tags(git_commit: str | None = None, source: str = "poxm") -> dict[str, str]:
    """MLflow's own tags, which the UI shows as User, Source and Version columns."""
    import getpass
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = os.environ.get("USER", "unknown")
    tags = {"mlflow.user": user, "mlflow.source.name": source, "mlflow.source.type": "LOCAL"}
    sha = (git_commit or "").split("+")[0]
    if sha and sha != "unknown":
        tags["mlflow.source.git.commit"] = sha
    return tags


def point_params(cfg_dict: Mapping, point: Mapping, trial: str) -> dict[str, str]:
    """Every grid coordinate and training setting of a grid point, as MLflow params (strings)."""
    ds = next(d for d in cfg_dict["datasets"] if d["name"] == point["dataset"])
    var = next(v for v in ds["variants"] if v["name"] == point["variant"])
    params = {k: "none" if point[k] is None else str(point[k]) for k in GRID}
    # a variant matched to a logging quality has no T in the config (prepare solves it): its target instead
    T = str(var["T"]) if var.get("T") is not None else "solved: " + ", ".join(
        f"{k}={v}" for k, v in (var.get("match") or {}).items())
    params.update({"alpha": str(var["alpha"]), "beta": str(var["beta"]), "T": T,
                   "val_fraction": str(ds["val_fraction"]), "trial": trial, "device": str(cfg_dict["device"]),
                   "group_by": str(cfg_dict["group_by"])})
    try:   # the protocol the run ran under: 'paper' or 'paper+<the ablated settings>'
        from poxm_core.config.schema import TrainingConfig, protocol_name
        params["protocol"] = protocol_name(TrainingConfig(**cfg_dict["training"]))
    except Exception:
        params["protocol"] = "unknown"
    mc = dict(cfg_dict["methods"].get(point["method"], {}) or {})
    mc.pop("p", None)
    mc.pop("lam", None)
    if mc.get("lr") is None:   # the protocol's rate of the method's group, as the trainer resolves it
        from poxm_core.methods import get_method
        group = get_method(point["method"]).lr_group
        mc["lr"] = cfg_dict["training"]["lr_is" if group == "is" else "lr_supervised"]
    params.update(_flat("method", mc))
    params.update(_flat("training", cfg_dict["training"]))
    params.update(_flat("model", cfg_dict["model"]))
    if ds.get("synthetic"):
        params.update(_flat("synthetic", {k: v for k, v in ds["synthetic"].items() if v is not None}))
    return params


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


def ensure_parent(uri: str, exp_id: str, sweep: str, tags: Mapping[str, str],
                  params: Mapping[str, str] | None = None, description: str | None = None) -> str:
    """The sweep's parent run (found by tags, else created), set RUNNING; `params` (the resolved
    config, flattened) are logged where not logged yet (MLflow params cannot change), `description`
    becomes the run's note (mlflow.note.content)."""
    from mlflow.entities import Param

    c = client(uri)
    found = _search_all(c, exp_id, f"tags.`{ROLE_TAG}` = 'sweep' and tags.`{SWEEP_TAG}` = '{sweep}'")
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
            "Metrics: `train/loss` and `val/<estimator>` (IS, sIS, SNIS, ESS, with `_se`) per epoch (step = epoch), "
            "in their own units; `test/<metric>` (R_at_k, nDCR_at_k, PSR_at_k = R@k, nDCR@k, PSR@k) ×100 like the "
            "report, once at the end. A child's Duration is its own share of its trial's compute (tag "
            "`head_seconds`). This run's summaries are tables in its artifacts (`tables/results.json`, "
            "`tables/claims.json` with verdicts in words, `tables/sweep.json`), with the report (`report/`); "
            "its parameters are the resolved config.")


def ensure_points(uri: str, exp_id: str, parent: str, sweep: str, cfg_dict: Mapping,
                  points: Iterable[tuple[Mapping, str]], tags: Mapping[str, str],
                  point_tags: Mapping[str, Mapping[str, str]] | None = None,
                  on_progress: Callable[[dict[str, str]], None] | None = None, every: int = 64,
                  stop: threading.Event | None = None) -> dict[str, str]:
    """One run per grid point: the existing one (by tags poxm.sweep + poxm.point) or a new one with
    its params and tags, status SCHEDULED until its trial starts. Returns {point_key: run_id}, in the
    order of `points`. `on_progress(so far)`: called after the existing runs are found and then every
    `every` new runs (the trials waiting for theirs see them early); `stop` set: return what exists."""
    from mlflow.entities import Param

    c = client(uri)
    have: dict[str, str] = {}
    for r in sorted(_search_all(c, exp_id, f"tags.`{ROLE_TAG}` = 'point' and tags.`{SWEEP_TAG}` = '{sweep}'"),
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
                 **{k: "none" if point[k] is None else str(point[k]) for k in GRID}, **tags, **extra}
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
    """The run's description (mlflow.note.content) with `extra` in place of what an earlier call added."""
    if not extra:
        return
    note = c.get_run(run_id).data.tags.get("mlflow.note.content", "")
    note = note.split(NOTE_RESULTS)[0].rstrip()
    c.set_tag(run_id, "mlflow.note.content", f"{note}\n\n{NOTE_RESULTS}\n\n{extra}".lstrip())


NOTE_RESULTS = "---"


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


# --------------------------------------------------------------------------------------------
# worker side

def head_costs(points: list[tuple], seconds: float | None, timing: Mapping[str, float] | None) -> dict[tuple, float]:
    """Each head's own share of its trial's compute `seconds`, {(method, p, lam): seconds}. The heads of
    a trial train batched together and are not timed one by one; the trainer times the parts
    (`timing`: setup_s, train_s, eval_s, ...). The training time is shared among the heads that train
    (the logging policy trains nothing), the rest (set-up, evaluation, checkpoints) among all heads.
    Without `timing`, an even share of `seconds`."""
    if seconds is None or not points:
        return {pt: 0.0 for pt in points}
    from poxm_core.methods import get_method

    def trains(method: str) -> bool:
        try:
            return bool(get_method(method).trains)
        except Exception:  # noqa: BLE001  an unknown plugin method: counted as training
            return True
    n = len(points)
    train_s = float((timing or {}).get("train_s", 0.0) or 0.0)
    if not timing or train_s <= 0 or train_s > seconds:
        return {pt: seconds / n for pt in points}
    trained = [pt for pt in points if trains(pt[0])] or list(points)
    shared = (seconds - train_s) / n
    return {pt: shared + (train_s / len(trained) if pt in trained else 0.0) for pt in points}


class PointLogger:
    """Logs one trial's heads to their pre-created runs (rank 0 of the trial's Train workers).

    Per-epoch metrics (step = epoch) come from run_trial's on_epoch keys
    mlflow_name(f'{head.key}/{metric}'); an epoch already logged before a crash is not logged again,
    so a retried trial's curves equal an uninterrupted one's."""

    def __init__(self, uri: str, head_runs: Mapping[str, str]):
        """head_runs: {head.key ('poxm/p=10/lam=0.9'): run id}."""
        self.c = client(uri)
        self.prefix = {mlflow_name(k + "/"): rid for k, rid in head_runs.items()}
        self.logged: dict[str, int] = {}

    def start(self) -> None:
        for rid in self.prefix.values():
            self.c.update_run(rid, status="RUNNING")
            hist = self.c.get_metric_history(rid, metric_name("loss"))
            self.logged[rid] = max((m.step for m in hist), default=0)

    def log_epoch(self, epoch: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        per_run: dict[str, list] = {}
        for key, v in metrics.items():
            for pre, rid in self.prefix.items():
                if key.startswith(pre) and epoch > self.logged.get(rid, 0) and math.isfinite(float(v)):
                    per_run.setdefault(rid, []).append(Metric(metric_name(key[len(pre):]), float(v), now, int(epoch)))
                    break
        for rid, ms in per_run.items():
            self.c.log_batch(rid, metrics=ms)
            self.logged[rid] = epoch

    def log_final(self, df, head_runs_by_point: Mapping[tuple, str], seconds: float | None = None,
                  timing: Mapping[str, float] | None = None) -> None:
        """Final rows by split: 'test/R_at_5' ... (×100: ui_value), 'val/SNIS' ..., then FINISHED. Test
        metrics are logged once at step 0, so MLflow's charts draw them as one bar per run; their
        Monte-Carlo standard errors stay in results/rows.csv (as metrics they would add a chart each before
        the training curves); a final validation value keeps its epoch, and one whose per-epoch value was
        logged already is not logged twice. `seconds` (the trial's compute) and `timing` (its parts, the
        trainer's summary.json) give each run its own cost: head_cost."""
        from mlflow.entities import Metric, RunTag
        now = int(time.time() * 1000)
        fin = df[df["final"]]
        costs = head_costs(list(head_runs_by_point), seconds, timing)
        for pt, rid in head_runs_by_point.items():
            method, p, lam = pt
            sel = fin[(fin["method"] == method) & (fin["p"] == (-1 if p is None else p))]
            sel = sel[sel["lam"].isna()] if lam is None else sel[sel["lam"] == lam]
            run = self.c.get_run(rid)
            per_epoch = set(run.data.metrics) if self.logged.get(rid, 0) else set()
            ms = []
            for r in sel.itertuples(index=False):
                name = metric_name(r.metric, r.split)
                if name in per_epoch and int(r.epoch) <= self.logged.get(rid, 0):
                    continue
                step = 0 if r.split == "test" else int(r.epoch)
                if math.isfinite(r.value):
                    ms.append(Metric(name, ui_value(r.split, r.metric, r.value), now, step))
                if r.split != "test" and math.isfinite(r.stderr) and r.stderr > 0:
                    ms.append(Metric(name + "_se", float(r.stderr), now, step))
            for i in range(0, len(ms), 1000):
                self.c.log_batch(rid, metrics=ms[i:i + 1000])
            end = None
            if seconds is not None:
                own = costs[pt]
                self.c.log_batch(rid, tags=[RunTag("trial_seconds", f"{seconds:.1f}"),
                                            RunTag("trial_heads", str(len(costs))),
                                            RunTag("head_seconds", f"{own:.1f}")])
                # the UI's Duration (end - start) is the run's own cost, not its trial's wall time
                end = int(run.info.start_time + 1000 * own)
            self.c.set_terminated(rid, "FINISHED", end_time=end)

    def fail(self) -> None:
        for rid in self.prefix.values():
            try:
                self.c.set_terminated(rid, "FAILED")
            except Exception:  # noqa: BLE001  best effort while already failing
                pass
