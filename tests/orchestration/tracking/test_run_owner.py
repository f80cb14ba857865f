"""Two run directories of one config on one MLflow store never share runs: each finds only its own
parent (tagged with its run directory's key) and the points under it; continuing a run directory finds
its runs again (no duplicates); runs of a poxm that tagged no owner are adopted once."""
from __future__ import annotations

import pytest
from tests.cli_peers import write_cfg

from orchestration.stages.plan import plan_sweep, write_plan
from orchestration.stages.track import stage_points, stage_track
from orchestration.tracking import runs as tracking
from poxm_core.config.schema import load_config

pytestmark = pytest.mark.usefixtures("no_user_settings")   # the user's settings reset around each test


def _plan(tmp_path, runs: str):
    plan = plan_sweep(load_config(write_cfg(tmp_path / "c.yaml")), runs_dir=tmp_path / runs)
    write_plan(plan)
    return plan


def test_two_run_directories_of_one_config_keep_their_own_runs(tmp_path):
    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    a, b = _plan(tmp_path, "runs-a"), _plan(tmp_path, "runs-b")
    assert a.id == b.id and a.rd.root != b.rd.root                   # the same sweep id
    uri, exp, parent_a, tags = stage_track(a, shared)
    points_a = stage_points(a, uri, exp, parent_a, tags, {}).points
    _, _, parent_b, tags_b = stage_track(b, shared)
    points_b = stage_points(b, uri, exp, parent_b, tags_b, {}).points
    assert parent_a != parent_b
    assert set(points_a.values()).isdisjoint(points_b.values()) and points_a.keys() == points_b.keys()
    c = tracking.client(uri)
    assert {c.get_run(r).data.tags[tracking.PARENT_TAG] for r in points_b.values()} == {parent_b}
    # continuing A: its own runs again, nothing new
    assert stage_track(a, shared)[2] == parent_a
    assert stage_points(a, uri, exp, parent_a, tags, {}).points == points_a
    assert len(c.search_runs([exp], max_results=1000)) == 2 * (1 + len(points_a))


def test_runs_without_an_owner_are_adopted_once(tmp_path):
    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    a, b = _plan(tmp_path, "runs-a"), _plan(tmp_path, "runs-b")
    uri, exp, parent, tags = stage_track(a, shared)
    c = tracking.client(uri)
    c.delete_tag(parent, tracking.OWNER_TAG)                           # as an older poxm left it
    assert stage_track(b, shared)[2] == parent                         # adopted by the first to continue it
    assert c.get_run(parent).data.tags[tracking.OWNER_TAG] == b.rd.read_sweep()["state_key"]
    assert stage_track(a, shared)[2] != parent                         # and then it is B's alone
