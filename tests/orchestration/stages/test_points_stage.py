"""MLflow point runs created beside the trials (orchestration.stages.track.PointsStage): in the order the
jobs need them, published to mlflow_runs.json every few points, stoppable; and a trial waiting for its
own runs there (orchestration.stages.trial.wait_for_runs)."""
from __future__ import annotations

import threading
import time

import pytest

from orchestration.stages.handoff import head_points
from orchestration.rundir import write_json
from orchestration.stages.trial import wait_for_runs

SPEC = {"name": "t", "dataset": "d", "variant": "A", "seed": 0,
        "heads": [{"method": "poxm", "p": 10, "lam": 0.9}, {"method": "dm", "p": None, "lam": None}]}


def test_a_trial_waits_until_every_one_of_its_points_is_in_the_file(tmp_path):
    f = tmp_path / "mlflow_runs.json"
    keys = head_points(SPEC)
    assert len(keys) == 2 and len(set(keys.values())) == 2
    first, second = list(keys.values())

    def publish():
        f.write_text("{")                                               # not JSON yet: read again
        time.sleep(0.1)
        write_json(f, {"points": {first: "r1"}})                        # one of its two points so far
        time.sleep(0.2)
        write_json(f, {"points": {first: "r1", second: "r2", "other": "r9"}})

    t = threading.Thread(target=publish)
    t0 = time.perf_counter()
    t.start()
    runs = wait_for_runs(str(f), "sqlite:///x.db", SPEC, poll_s=0.05)
    t.join()
    assert time.perf_counter() - t0 >= 0.3
    assert runs.uri == "sqlite:///x.db" and runs.heads == {k: {first: "r1", second: "r2"}[p] for k, p in keys.items()}


def test_a_trial_whose_points_never_come_fails_in_one_line(tmp_path):
    with pytest.raises(RuntimeError, match="mlflow_runs.json: the MLflow runs of trial t did not appear") as exc:
        wait_for_runs(str(tmp_path / "mlflow_runs.json"), "sqlite:///x.db", SPEC, poll_s=0.05, timeout_s=0.2)
    assert "\n" not in str(exc.value)


@pytest.mark.slow
def test_points_come_in_launch_order_published_as_they_are_made_and_stop(tmp_path):
    """A real SQLite store: the runs of the trials named first are created first, the file is rewritten
    while they are made, a stopped stage leaves the runs made so far, and a second stage over the same
    sweep finds them all (none duplicated)."""
    from orchestration.tracking import runs as tracking
    from orchestration.stages.plan import plan_sweep, write_plan
    from orchestration.stages.track import PointsStage, stage_points, stage_track
    from orchestration.rundir import read_json
    from poxm_core.config.schema import load_config

    cfg = load_config(data={"name": "pts", "seeds": [0, 1],
                            "datasets": [{"name": "synthetic", "synthetic": {"n_train": 50, "n_test": 20, "n_features": 10,
                                                                              "n_labels": 8},
                                          "variants": [{"name": "A", "alpha": 0.5}, {"name": "B", "alpha": 0.5}]}],
                            "methods": {"dm": {}, "poxm": {"p": [2, 3], "lam": [0.5, 1.0]}}})
    plan = plan_sweep(cfg, tmp_path / "runs", tmp_path / "cache")
    plan.rd.root.mkdir(parents=True)
    write_plan(plan)
    uri, exp, parent, tags = stage_track(plan, None)
    names = [s.name for s in plan.specs]
    order = list(reversed(names))
    seen: list[int] = []
    orig = tracking.ensure_points

    def spy(*a, **kw):
        user = kw["on_progress"]
        kw["on_progress"] = lambda out: (seen.append(len(out)), user(out))
        kw["every"] = 2
        return orig(*a, **kw)
    tracking.ensure_points = spy
    try:
        runs = stage_points(plan, uri, exp, parent, tags, {}, order=order, publish=True)
    finally:
        tracking.ensure_points = orig
    grid = plan.grid()
    assert len(runs.points) == len(grid) and seen[0] == 0 and seen == sorted(seen) and len(seen) > 3
    by_trial = {g["trial"]: tracking.point_key(g) for g in grid}
    # created in the given order: the last trial's points have the smallest start times
    c = tracking.client(uri)
    start = {k: c.get_run(r).info.start_time for k, r in runs.points.items()}
    assert start[by_trial[order[0]]] <= start[by_trial[order[-1]]]
    assert read_json(plan.rd.mlflow_runs)["points"] == runs.points
    # again (a resumed sweep): found, none created; a stopped stage returns what exists
    stage = PointsStage(plan, uri, exp, parent, tags, names)
    assert stage.result().points == runs.points
    assert len(tracking._search_all(c, exp, f"tags.`{tracking.ROLE_TAG}` = 'point'")) == len(grid)
    stopped = PointsStage(plan, uri, exp, parent, tags, names)
    assert stopped.stop().points == runs.points and stopped.failed() is None
    # a stage stopped before its first new run: only what existed (here nothing, another sweep)
    plan2 = plan_sweep(load_config(data={**cfg.model_dump(exclude_unset=True), "name": "pts2"}), tmp_path / "runs",
                       tmp_path / "cache")
    plan2.rd.root.mkdir(parents=True)
    write_plan(plan2)
    ev = threading.Event()
    ev.set()
    assert stage_points(plan2, uri, exp, parent, tags, {}, publish=True, stop=ev).points == {}
    assert read_json(plan2.rd.mlflow_runs)["points"] == {}
