"""The worker side of a sweep's MLflow tracking: a trial's Train worker logs its heads to the runs the
driver created (orchestration.tracking.runs), per epoch and at the end, each run with its own duration
(from its trial's start to its last value: the heads of a trial train together) and, in tags, its share
of the trial's compute (orchestration.tracking.runs re-exports these names)."""
from __future__ import annotations

import math
import time
from typing import Mapping

from poxm_core.common.results import mlflow_name
from orchestration.tracking.names import metric_name, ui_value
from orchestration.tracking.store import client


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
        self.started: float | None = None      # when this attempt of the trial began training its heads

    def start(self) -> None:
        self.started = time.time()
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
        trainer's summary.json) give each run its share of it: head_costs, in tags (duration_tags)."""
        from mlflow.entities import Metric
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
            tags = duration_tags(self.started, costs.get(pt), seconds, len(costs))
            if tags:
                self.c.log_batch(rid, tags=tags)
            # the UI's Duration (end - start) is the run's own: the run was created before its trial
            # started (start_time cannot move), so its end is set that long after its start
            end = None if self.started is None else int(run.info.start_time + 1000 * (time.time() - self.started))
            self.c.set_terminated(rid, "FINISHED", end_time=end)

    def fail(self) -> None:
        for rid in self.prefix.values():
            try:
                self.c.set_terminated(rid, "FAILED")
            except Exception:  # noqa: BLE001  best effort while already failing
                pass


def duration_tags(started: float | None, own: float | None, seconds: float | None, heads: int):
    """A run's times as tags: 'started_at' / 'ended_at' (UTC, when its trial began training it and when
    its last value was logged: the run's own start and end, which the UI's Duration shows), and its
    share of the trial: 'trial_seconds' (the trial's compute), 'trial_heads', 'head_seconds' (this
    run's share: head_costs) and 'share_of_trial' (head_seconds / trial_seconds)."""
    from datetime import datetime, timezone

    from mlflow.entities import RunTag

    def iso(t: float) -> str:
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    tags = [] if started is None else [RunTag("started_at", iso(started)), RunTag("ended_at", iso(time.time()))]
    if seconds is not None and own is not None:
        tags += [RunTag("trial_seconds", f"{seconds:.1f}"), RunTag("trial_heads", str(heads)),
                 RunTag("head_seconds", f"{own:.1f}"),
                 RunTag("share_of_trial", f"{own / seconds:.3f}" if seconds > 0 else "nan")]
    return tags
