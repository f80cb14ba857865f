"""Nothing in a received run directory decides where poxm sends a request, writes, deletes or reads
outside it (docs/orchestration.md, "What poxm trusts"): a tracking URI its config names gets no request
(and so none of the user's MLflow credentials) unless the user gives the same; a link inside it is
refused in one line; the prepare cache its sweep.json records is used only when the user gives it; a
stale driver.json is stale because the OS lock is free. Real listeners on 127.0.0.1."""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
import yaml
from tests.cli_peers import cli, one_line, planned

import orchestration.stages.sweep as sweep
from orchestration.rundir import RunDir, acquire_driver, driver_alive, release_driver, write_json
from orchestration.stages.plan import plan_from_run_dir

pytestmark = pytest.mark.usefixtures("no_user_settings")   # the user's settings reset around each test


@pytest.fixture
def reached(monkeypatch):
    """resume_sweep replaced by a marker: reaching it is `poxm: reached`, exit 130."""
    def marker(*a, **k):
        raise KeyboardInterrupt("reached")
    monkeypatch.setattr(sweep, "resume_sweep", marker)


def _name_server(rd: RunDir, uri: str) -> None:
    """What the issue's reproduction did: mlflow_runs.json gone, config.input.yaml names a server."""
    rd.mlflow_runs.unlink(missing_ok=True)
    data = yaml.safe_load(rd.config_input.read_text())
    data["mlflow"] = {"tracking_uri": uri}
    rd.config_input.write_text(yaml.safe_dump(data, sort_keys=False))


def test_a_server_named_by_the_run_config_gets_no_request(tmp_path, capsys, monkeypatch, silent, no_sweep):
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "canary-password")
    rd = planned(tmp_path)
    _name_server(rd, f"http://127.0.0.1:{silent.port}")
    for cmd in (["resume", rd.root], ["report", rd.root]):
        rc, out, err = cli(capsys, *cmd)
        one_line(rc, err, str(rd.config_input), "mlflow.tracking_uri", "--mlflow-uri")
    assert silent.conns == [] and silent.got == []


def test_the_run_config_server_is_used_when_the_user_gives_the_same(tmp_path, capsys, reached, silent):
    rd = planned(tmp_path)
    uri = f"http://127.0.0.1:{silent.port}"
    _name_server(rd, uri)
    rc, out, err = cli(capsys, "resume", rd.root, "--mlflow-uri", uri + "/")
    # past the run directory's checks: the user's server is asked (and, silent, refused in one line)
    one_line(rc, err, "--mlflow-uri", "answer")


def test_a_link_inside_the_run_directory_is_refused_and_its_target_untouched(tmp_path, capsys, no_sweep):
    rd = planned(tmp_path)
    target = tmp_path / "elsewhere"
    target.mkdir()
    name = rd.read_sweep()["trials"][0]
    rd.trials.mkdir(exist_ok=True)
    (rd.trials / name).symlink_to(target, target_is_directory=True)
    (target / ".rows.csv.tmp-1").write_text("someone else's file")
    for cmd in ("resume", "status", "report"):
        rc, out, err = cli(capsys, cmd, rd.root)
        one_line(rc, err, str(rd.trials / name), "symbolic link")
    with pytest.raises(Exception, match="symbolic link"):
        acquire_driver(rd)                       # `poxm run` of the same config: refused before it writes
    assert sorted(p.name for p in target.iterdir()) == [".rows.csv.tmp-1"]


def test_a_recorded_cache_dir_is_used_only_when_the_user_gives_it(tmp_path, capsys, reached):
    rd = planned(tmp_path)
    other = tmp_path / "their-cache"
    sw = rd.read_sweep()
    write_json(rd.sweep, {**sw, "cache_dir": str(other)})
    rc, out, err = cli(capsys, "resume", rd.root)
    one_line(rc, err, str(rd.sweep), str(other), f"--cache-dir {other}")
    assert not other.exists()
    rc, out, err = cli(capsys, "resume", rd.root, "--cache-dir", other)
    assert rc == 130 and "reached" in err, err       # the user's say-so: past every check
    mine = tmp_path / "my-cache"
    rc, out, err = cli(capsys, "resume", rd.root, "--cache-dir", mine)
    assert rc == 130 and "reached" in err, err
    from orchestration import rundir
    rundir.set_user_settings(cache_dir=str(mine))
    assert plan_from_run_dir(rd.root).cache_dir == mine.resolve()


def test_the_default_cache_beside_the_run_needs_no_flag(tmp_path, capsys, reached):
    rd = planned(tmp_path)
    assert rd.read_sweep()["cache_dir"] == str(rd.root.parent / "cache")
    assert plan_from_run_dir(rd.root).cache_dir == rd.root.parent / "cache"


def test_a_stale_driver_json_naming_a_live_process_does_not_block(tmp_path, capsys):
    rd = planned(tmp_path)
    other = subprocess.Popen(["sleep", "60"])          # a live process that holds no lock
    try:
        write_json(rd.driver, {"pid": other.pid, "host": socket.gethostname(), "started": 0})
        assert driver_alive(rd) is None
        rc, out, err = cli(capsys, "status", rd.root)
        assert "driver     not running" in out, out
        acquire_driver(rd)                           # the OS lock is free: the record is stale
        try:
            assert json.loads(rd.driver.read_text())["pid"] != other.pid
        finally:
            release_driver(rd)
    finally:
        other.kill()
        other.wait()


def test_a_held_lock_is_a_live_driver_whatever_driver_json_says(tmp_path, capsys):
    rd = planned(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
                               "print('held', flush=True); time.sleep(60)", str(rd.driver_lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        rd.driver.write_text("[1, 2]\n")                # odd, and no pid in it
        assert driver_alive(rd) is not None
        with pytest.raises(Exception, match="in use by a running driver"):
            acquire_driver(rd)
    finally:
        holder.kill()
        holder.wait()
    acquire_driver(rd)                                  # the holder's lock went with it
    release_driver(rd)
