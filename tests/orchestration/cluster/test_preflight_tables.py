"""A logged table's support is checked before Ray starts and before anything is written: a negative or
vanishing propensity, a missing column or a malformed file is one line from `poxm run` (and `poxm
resume`), exit 2, and no run directory is left for `poxm status` to suggest resuming."""
from __future__ import annotations

import pandas as pd
import pytest
import yaml
from tests.cli_peers import cli, one_line

pytestmark = pytest.mark.usefixtures("no_user_settings")   # the user's settings reset around each test


def _config(tmp_path, **over):
    df = pd.DataFrame({"a": [0, 1, 2, 1] * 10, "k": [1, 2, 1, 2] * 10, "r": [0, 1, 0, 0] * 10,
                       "ps": [0.25, 0.5, 0.5, 0.1] * 10, "x": [0.1, 0.2, 0.3, 0.4] * 10})
    for k, v in over.items():
        df[k] = v
    log = tmp_path / "log.csv"
    df.to_csv(log, index=False)
    cfg = {"name": "tables", "data_root": str(tmp_path),
           "datasets": [{"name": "mine", "logged": {"source": "table", "path": str(log), "columns": {
               "action": "a", "position": "k", "reward": "r", "propensity": "ps", "context": ["x"]}},
               "variants": [{"name": "U", "selector": "logging"}]}],
           "training": {"epochs": 1}, "methods": {"logging": {}, "dm": {}}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path, log


@pytest.mark.parametrize("over,needles", [
    ({"ps": [0.25, -0.5, 0.5, 0.1] * 10}, ["row 2 (line 3), column 'ps'", "[1e-06, 1]", "got -0.5"]),
    ({"ps": [0.25, 5e-324, 0.5, 0.1] * 10}, ["row 2 (line 3), column 'ps'", "[1e-06, 1]"]),
    ({"a": [0, 1, 10**15, 1] * 10}, ["row 3 (line 4), column 'a'", "expected an action id"]),
])
def test_bad_support_is_one_line_before_ray_and_leaves_no_run_directory(tmp_path, capsys, no_sweep, over, needles):
    cfg, log = _config(tmp_path, **over)
    runs = tmp_path / "runs"
    rc, out, err = cli(capsys, "run", cfg, "--runs-dir", runs, "mlflow.enabled=false")
    one_line(rc, err, str(log), *needles)
    assert not runs.exists()


def test_a_missing_column_is_one_line_before_ray(tmp_path, capsys, no_sweep):
    cfg, log = _config(tmp_path)
    pd.read_csv(log).drop(columns=["ps"]).to_csv(log, index=False)
    runs = tmp_path / "runs"
    rc, out, err = cli(capsys, "run", cfg, "--runs-dir", runs, "mlflow.enabled=false")
    one_line(rc, err, str(log), "column 'ps': required column missing")
    assert not runs.exists()


def test_resume_checks_the_tables_again_before_anything_is_written(tmp_path, capsys, no_sweep):
    from orchestration.stages.plan import plan_sweep, write_plan
    from poxm_core.config.schema import load_config
    cfg, log = _config(tmp_path)
    plan = plan_sweep(load_config(cfg, ["mlflow.enabled=false"]), runs_dir=tmp_path / "runs")
    write_plan(plan)
    pd.read_csv(log).assign(ps=-1.0).to_csv(log, index=False)        # the table changed since
    before = sorted(p.name for p in plan.rd.root.rglob("*"))
    rc, out, err = cli(capsys, "resume", plan.rd.root)
    one_line(rc, err, str(log), "[1e-06, 1]")
    assert sorted(p.name for p in plan.rd.root.rglob("*")) == before
