"""The track stage of a sweep (MLflow, created once in the driver): the store, the experiment and the
parent run before anything runs; one run per grid point after prepare; every run closed at the end
(or on an interruption) so that nothing stays RUNNING.
"""
from __future__ import annotations

import threading
from pathlib import Path

from orchestration.tracking import runs as tracking
from orchestration.stages.plan import SweepPlan
from orchestration.rundir import git_commit, sweep_hash, write_json
from poxm_core.config.schema import protocol_name, resolved_dict
from poxm_core.common.errors import PoxmInputError


def stage_track(plan: SweepPlan, cli_uri: str | None) -> tuple[str, str, str, dict]:
    cfg = plan.cfg
    uri = tracking.resolve_uri(plan.rd.root, cli_uri, cfg.mlflow.tracking_uri)
    if plan.storage is not None and not uri.startswith(("http://", "https://", "databricks")):
        # the trials log from nodes that do not see the run directory, where the default store lives
        raise PoxmInputError(f"config key 'resources.storage_path': trials then run where {uri} may not be "
                             "reachable; use an MLflow server (mlflow.tracking_uri or --mlflow-uri http://...) "
                             "or mlflow.enabled=false")
    exp_name = cfg.mlflow.experiment or plan.id
    exp_id = tracking.init_store(uri, exp_name, plan.rd.mlartifacts)
    commit = git_commit()
    tags = {"config_hash": sweep_hash(cfg), "git_commit": commit, "sweep_name": cfg.name,
            "protocol": protocol_name(cfg.training), **tracking.standard_tags(commit)}
    cfg_dict = resolved_dict(cfg)
    cfg_dict.pop("runs_dir", None)        # a machine path, and not what the sweep computes
    note = tracking.sweep_description(cfg_dict, plan.id, len(plan.specs), len(plan.grid()),
                                      protocol_name(cfg.training))
    owner = {tracking.OWNER_TAG: str(plan.rd.read_sweep().get("state_key") or "")}   # this run directory's runs only
    parent = tracking.ensure_parent(uri, exp_id, plan.id, {**tags, "run_dir": plan.rd.root.name, **owner},
                                    params=tracking.flat_params(cfg_dict), description=note)
    return uri, exp_id, parent, tags


def stage_points(plan: SweepPlan, uri: str, exp_id: str, parent: str, tags: dict,
                 prepared: dict, order: list[str] | None = None, publish: bool = False,
                 stop: threading.Event | None = None) -> tracking.SweepRuns:
    """One MLflow run per grid point (found or created), with the data checksums of `prepared`
    ({(dataset, seed): {variant: record}}, those known so far); ids to mlflow_runs.json. `order`: the
    trials whose points come first (the rest after, in grid order). `publish`: mlflow_runs.json also
    while they are created, every few points (trials waiting for their runs read it: PointsStage)."""
    from orchestration.stages.gather import data_checksum
    checks = {}
    for (d, s), variants in prepared.items():
        for v, record in variants.items():
            checks[(d, v, s)] = data_checksum(record)
    grid = plan.grid()
    if order:
        rank = {t: i for i, t in enumerate(order)}
        grid = sorted(grid, key=lambda g: rank.get(g["trial"], len(rank)))     # stable: grid order within a trial
    ptags = {tracking.point_key(g): {"dataset_checksum": checks[(g["dataset"], g["variant"], g["seed"])]}
             for g in grid if (g["dataset"], g["variant"], g["seed"]) in checks}

    def write(points: dict[str, str]) -> None:
        runs = tracking.SweepRuns(uri, exp_id, parent, points)
        write_json(plan.rd.mlflow_runs, {**runs.to_dict(), "tracking_uri": tracking.record_uri(uri, plan.rd.root)})

    points = tracking.ensure_points(uri, exp_id, parent, plan.id, resolved_dict(plan.cfg),
                                    [(g, g["trial"]) for g in grid], tags, ptags,
                                    on_progress=write if publish else None, stop=stop)
    write(points)
    return tracking.SweepRuns(uri, exp_id, parent, points)


class PointsStage:
    """stage_points on a thread while the trials start (a local run directory: the jobs read
    mlflow_runs.json), the points of the first jobs first; each trial waits for its own runs only
    (orchestration.stages.trial.wait_for_runs). Creating every point's run of a large grid takes about a
    minute on a local SQLite store, which the trials used to wait for (docs/performance.md).

    `result()`: the SweepRuns (its error raised there); `stop()`: no more runs created, those made so
    far (for closing them after an interruption); `tag_checksums(prepared)`: after the prepare stage,
    the data checksums added (once every run exists). A failure marks the sweep failed for Tune's
    stopper (orchestration.stages.prepare.PrepareFailed), so that no trial waits for runs that never come."""

    def __init__(self, plan: SweepPlan, uri: str, exp_id: str, parent: str, tags: dict, order: list[str]):
        self.plan, self.uri, self.exp_id, self.parent, self.tags = plan, uri, exp_id, parent, tags
        self._stop = threading.Event()
        self._runs: tracking.SweepRuns | None = None
        self._exc: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(order,), name="poxm-points", daemon=True)
        self._thread.start()

    def _run(self, order: list[str]) -> None:
        try:
            self._runs = stage_points(self.plan, self.uri, self.exp_id, self.parent, self.tags, {}, order=order,
                                      publish=True, stop=self._stop)
        except BaseException as exc:      # noqa: BLE001 -- raised again by result() in the main thread
            self._exc = exc
            from orchestration.stages.prepare import mark_failed
            mark_failed(self.plan)

    def result(self) -> tracking.SweepRuns:
        self._thread.join()
        if self._exc is not None:
            raise self._exc
        assert self._runs is not None
        return self._runs

    def failed(self) -> BaseException | None:
        return self._exc if not self._thread.is_alive() else None

    def stop(self) -> tracking.SweepRuns:
        """Stop creating runs; the runs that exist (from mlflow_runs.json when the thread failed)."""
        self._stop.set()
        self._thread.join()
        if self._runs is not None:
            return self._runs
        from orchestration.rundir import read_json
        ml = read_json(self.plan.rd.mlflow_runs, None) or {}
        return tracking.SweepRuns(self.uri, self.exp_id, self.parent, dict(ml.get("points") or {}))

    def tag_checksums(self, prepared: dict) -> None:
        self._thread.join()
        if self._exc is None and not self._stop.is_set():
            stage_points(self.plan, self.uri, self.exp_id, self.parent, self.tags, prepared)


def close_tracking(plan: SweepPlan, runs: tracking.SweepRuns, done: list, errored: list, summary: dict,
                   report: Path | None) -> None:
    """Point runs FINISHED / FAILED / KILLED, the selected points tagged, the parent run's summary
    tables, note and artifacts logged and the parent ended."""
    rd = plan.rd
    status = {tracking.point_key(g): "FINISHED" if g["trial"] in done else ("FAILED" if g["trial"] in errored
                                                                            else "KILLED")
              for g in plan.grid()}
    tracking.close_points(runs, status)
    if report is not None and rd.selection_csv.is_file():
        import pandas as pd
        from orchestration.selection import RunSelection
        chosen = RunSelection.from_frame(pd.read_csv(rd.selection_csv)).selection     # the run's criterion, oracle
        tracking.tag_selected(runs, chosen.to_dict("records"))
    ok = not errored and len(done) == len(plan.specs)
    tracking.finish_parent(runs, ok, summary_tables(rd.root, report, summary),
                           [(rd.config, "sweep"), (rd.sweep, "sweep"), (rd.results, "results")]
                           + ([(report, "report")] if report is not None else []),
                           note_extra=headline_note(rd.root, report))


HEADLINE = ("R@5", "nDCR@5", "PSR@5")


def summary_tables(run_root: Path, report: Path | None, summary: dict | None = None) -> dict:
    """The parent run's summaries as tables the UI renders (MlflowClient.log_table; the run's
    Artifacts tab): 'tables/results.json' (the headline results), 'tables/claims.json' (the claims,
    verdicts in words), 'tables/sweep.json' (counts and timings). Empty tables are left out."""
    out = {"tables/results.json": result_table(run_root), "tables/claims.json": claim_table(report)}
    if summary:
        out["tables/sweep.json"] = sweep_table(summary)
    return {k: v for k, v in out.items() if v is not None and len(v)}


def sweep_table(summary: dict):
    """The sweep summary's numbers (wall time, trial compute, trial counts, ...): one row each."""
    import pandas as pd
    return pd.DataFrame([{"what": k, "value": v} for k, v in summary.items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "finished_at"])


def result_table(run_root: Path):
    """The headline results: for each dataset, variant and method, the test R@5, nDCR@5 and PSR@5 ×100
    (the report's scale) of the (p, λ) the sweep's criterion chose on validation, mean over seeds, with
    the seeds and the (p, λ) chosen (from results/selection.csv and rows.csv); None without them."""
    import pandas as pd
    res = Path(run_root) / "results"
    if not (res / "selection.csv").is_file() or not (res / "rows.csv").is_file():
        return None
    from orchestration.selection import RunSelection
    sel = RunSelection.from_frame(pd.read_csv(res / "selection.csv")).honest().copy()
    rows = pd.read_csv(res / "rows.csv")
    rows = rows[(rows["split"] == "test") & rows["final"].astype(bool) & rows["metric"].isin(HEADLINE)]
    if sel.empty or rows.empty:
        return None
    keys = ["dataset", "variant", "method", "seed", "p", "lam"]
    for f in (sel, rows):
        f["lam"] = f["lam"].astype(float).fillna(-1.0)
        f["p"] = f["p"].astype(int)
    got = sel[keys].merge(rows[keys + ["metric", "value"]], on=keys)
    out = []
    for (d, v, m), g in got.groupby(["dataset", "variant", "method"], sort=False):
        pts = g.drop_duplicates(["seed", "p", "lam"])
        ps = sorted({int(x) for x in pts["p"] if x >= 0})
        lams = sorted({float(x) for x in pts["lam"] if x >= 0})
        row = {"dataset": d, "variant": v, "method": m, "seeds": int(pts["seed"].nunique()),
               "p": "/".join(map(str, ps)) or "—", "λ": "/".join(f"{x:g}" for x in lams) or "—"}
        for metric in HEADLINE:
            vals = g[g["metric"] == metric]["value"]
            row[f"test {metric} ×100"] = round(100 * float(vals.mean()), 2) if len(vals) else None
        out.append(row)
    return pd.DataFrame(out)


def claim_table(report: Path | None):
    """The report's claims, one row per claim, dataset, variant and criterion: Δ and its 95 % interval
    (×100 as in the report; none below the seed count a verdict needs), the seeds that agree, and the
    verdict in words ('holds', 'fails', 'undecided', 'too few seeds'); None without claims."""
    import math

    import pandas as pd
    from orchestration.report.claims import read_claims
    from orchestration.report.inference import MIN_SEEDS
    frame = read_claims(report) if report is not None else None
    if frame is None or not len(frame):
        return None

    def num(x):
        return None if x is None or not math.isfinite(float(x)) else round(float(x), 2)

    out = []
    for r in frame.itertuples(index=False):
        enough = int(r.n) >= MIN_SEEDS
        out.append({"claim": r.claim_text, "dataset": str(r.dataset), "variant": str(r.variant),
                    "criterion": str(r.criterion), "metric": str(r.metric), "Δ": num(r.diff),
                    "95 % CI low": num(r.ci_lo) if enough else None, "95 % CI high": num(r.ci_hi) if enough else None,
                    "seeds > 0": str(r.signs), "seeds": int(r.n), "verdict": str(r.verdict)})
    return pd.DataFrame(out)


def _markdown(frame) -> str:
    def cell(x):
        return "—" if x is None or (isinstance(x, float) and x != x) else str(x)
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def headline_note(run_root: Path, report: Path | None) -> str | None:
    """The lead of the parent run's description: what the run shows, the results table with its notes
    (report/first_screen.py), then the claims' verdicts in words; below the seeds a verdict needs, the
    line on how to get verdicts before the claims."""
    from orchestration.report import first_screen as FS
    from orchestration.report.claims import read_claims
    from orchestration.report.inputs import read_prepare
    res, claims = result_table(run_root), claim_table(report)
    frame = FS.selection_frame(run_root)
    parts = [] if frame is None else FS.phenomenon_lines(frame)
    if res is not None and len(res):
        parts.append("**Results** (test, ×100, selected (p, λ), mean over seeds):\n\n" + _markdown(res))
        if frame is not None:
            parts += FS.below_logging_notes(frame, read_prepare(Path(run_root) / "results" / "prepare.csv"))
    if FS.needs_seeds(read_claims(report) if report is not None else None):
        line = FS.verdict_line(FS.shown_run(run_root), FS.run_seeds(run_root), merged=FS.is_merged(run_root))
        parts += [f"**{FS.VERDICT_LEAD}**{line[len(FS.VERDICT_LEAD):]}"] if line else []
    if claims is not None and len(claims):
        crit = claims["criterion"].iloc[0]
        c = claims[claims["criterion"] == crit]
        parts.append(f"**Claims** ({crit}; Δ ×100; verdict in words):\n\n"
                     + _markdown(c[["claim", "dataset", "variant", "Δ", "seeds > 0", "verdict"]]))
    return "\n\n".join(parts) or None


def abort_tracking(plan: SweepPlan, runs: tracking.SweepRuns | None, parent: tuple[str, str] | None) -> None:
    """After an interruption or a failure: nothing stays RUNNING (errors here must not hide the original)."""
    from orchestration.stages.trial import done_trials
    if runs is not None:
        try:
            done = done_trials(plan.rd.root, plan.names)
            tracking.close_points(runs, {tracking.point_key(g): "FINISHED" if g["trial"] in done else "KILLED"
                                         for g in plan.grid()})
        except Exception:  # noqa: BLE001  the original error matters more
            pass
    if parent is not None:
        try:
            tracking.client(parent[0]).set_terminated(parent[1], "KILLED")
        except Exception:  # noqa: BLE001
            pass
