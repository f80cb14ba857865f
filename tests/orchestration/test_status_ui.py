"""`poxm status` reads odd run-directory JSON as data (one line naming the file, never a traceback) and
suggests only a resume that gets past every check (the flags a run needs named); `poxm ui --host` off
loopback says what it exposes; the fault-injection switches say they are on."""
from __future__ import annotations

import shlex

import pytest
from tests.cli_peers import cli, http_server, one_line, planned

import orchestration.stages.sweep as sweep
from orchestration.rundir import set_trial_state, write_json
from orchestration.stages import epoch_reports
from poxm_core.common.errors import PoxmInputError

pytestmark = pytest.mark.usefixtures("no_user_settings")   # the user's settings reset around each test


@pytest.mark.parametrize("file,content,needle", [
    ("state.json", [1, 2], "expected a JSON object, got list"),
    ("state.json", {"state": "running", "tries": "abc"}, "key 'tries': expected a number"),
    ("state.json", {"state": "running", "updated": "yesterday"}, "key 'updated': expected a number"),
    ("done.json", "finished", "expected a JSON object, got str"),
    ("timing.json", {"attempts": "many"}, "key 'attempts': expected a list of objects"),
    ("timing.json", {"attempts": [{"run_trial_s": "fast"}]}, "key 'run_trial_s': expected a number"),
])
def test_odd_trial_json_is_one_line_naming_the_file(tmp_path, capsys, file, content, needle):
    rd = planned(tmp_path)
    name = rd.read_sweep()["trials"][0]
    write_json(rd.trial(name) / file, content)
    rc, out, err = cli(capsys, "status", rd.root)
    one_line(rc, err, str(rd.trial(name) / file), needle)


@pytest.mark.parametrize("patch,needle", [
    ({"trials": "all"}, "key 'trials': expected a list"),
    ({"trials": ["../../elsewhere"]}, "is not a trial name"),
    ({"trials": [{"a": 1}]}, "is not a trial name"),
])
def test_odd_sweep_json_is_one_line(tmp_path, capsys, patch, needle):
    rd = planned(tmp_path)
    write_json(rd.sweep, {**rd.read_sweep(), **patch})
    rc, out, err = cli(capsys, "status", rd.root)
    one_line(rc, err, str(rd.sweep), needle)


def test_a_sweep_json_that_is_no_object_is_one_line(tmp_path, capsys):
    rd = planned(tmp_path)
    rd.sweep.write_text("[]\n")
    rc, out, err = cli(capsys, "status", rd.root)
    one_line(rc, err, str(rd.sweep), "not a poxm sweep record")


class _MLflowLike(__import__("http.server").server.BaseHTTPRequestHandler):
    def do_GET(self):       # noqa: N802
        body = b'{"experiment": {"experiment_id": "0"}}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_the_suggested_resume_gets_past_every_check(tmp_path, capsys, monkeypatch):
    """A run that records a storage path, a tracking server and another prepare cache: `status` names
    each as a flag, and the command it prints gets past all of resume's checks (to the sweep itself)."""
    srv = http_server(_MLflowLike)
    try:
        uri = f"http://127.0.0.1:{srv.server_address[1]}"
        rd = planned(tmp_path, resources={"storage_path": str(tmp_path / "store")}, mlflow={"tracking_uri": uri})
        write_json(rd.sweep, {**rd.read_sweep(), "cache_dir": str(tmp_path / "big-cache")})
        set_trial_state(rd.trial(rd.read_sweep()["trials"][0]), "running", epoch=1)     # killed: interrupted
        rc, out, err = cli(capsys, "status", rd.root)
        line = next(x for x in out.splitlines() if x.startswith("continue with: "))
        args = shlex.split(line.removeprefix("continue with: ").split("   (")[0])
        args = args[args.index("resume"):]
        assert {"--storage-path", "--mlflow-uri", "--cache-dir"} <= set(args), args

        def reached(*a, **k):
            raise KeyboardInterrupt("reached")
        monkeypatch.setattr(sweep, "resume_sweep", reached)
        rc, out, err = cli(capsys, *args)
        assert rc == 130 and err.strip() == "poxm: reached", err
        rc, out, err = cli(capsys, "resume", rd.root)          # without them: refused at the first check
        assert rc == 2
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_planted_ray_folder_is_said_before_the_resume(tmp_path, capsys):
    rd = planned(tmp_path)
    set_trial_state(rd.trial(rd.read_sweep()["trials"][0]), "errored", error="boom")
    (rd.root / "ray").mkdir()
    rc, out, err = cli(capsys, "status", rd.root)
    assert f"first remove {rd.root / 'ray'}" in out


def test_ui_off_loopback_says_what_it_exposes_before_it_serves(tmp_path, capsys):
    from orchestration.tracking.ui import exposure_line, serve
    rd = planned(tmp_path)
    rd.mlflow_db.write_bytes(b"")

    def stop(host, port):           # the port check comes right after the warning: stop there
        raise PoxmInputError("stopped before serving")
    with pytest.raises(PoxmInputError, match="stopped"):
        serve(rd.root, "0.0.0.0", 5999, check_port=stop)
    err = capsys.readouterr().err
    assert err.startswith("poxm: warning: --host 0.0.0.0 exposes") and "REST API" in err and "without a login" in err
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert exposure_line(host, 5000) is None
    assert exposure_line("192.0.2.1", 5000) is not None


def test_fault_injection_switches_say_they_are_on(tmp_path, capsys, monkeypatch, no_sweep):
    from orchestration.cli import FAULT_SWITCHES, fault_injection_lines
    from orchestration.stages.packing import OOM_ENV
    assert set(FAULT_SWITCHES) == {epoch_reports.CRASH_ENV, epoch_reports.HOLD_ENV, OOM_ENV}
    assert fault_injection_lines({}) == []
    monkeypatch.setenv(epoch_reports.CRASH_ENV, "2")
    rd = planned(tmp_path)
    rc, out, err = cli(capsys, "resume", rd.root, "--address", "not a host:1")
    lines = err.strip().splitlines()
    assert lines[0].startswith(f"poxm: warning: fault injection {epoch_reports.CRASH_ENV}='2' is set")
    assert len(lines) == 2 and lines[1].startswith("poxm: error: ")


def test_the_end_of_a_failed_sweep_names_the_resume_that_works(tmp_path, capsys):
    """A sweep run with its own --cache-dir ends with errored trials: the resume it suggests gives that
    cache (without it, resume refuses the recorded one in one line)."""
    from types import SimpleNamespace

    from orchestration.cli_commands import _outcome
    rd = planned(tmp_path)
    write_json(rd.sweep, {**rd.read_sweep(), "cache_dir": str(tmp_path / "big-cache")})
    out = SimpleNamespace(run_dir=rd.root, report=None, ok=False, errored=["t"], n_trials=2, done=["u"])
    assert _outcome(out) == 1
    err = capsys.readouterr().err
    assert f"resume {rd.root} --cache-dir {tmp_path / 'big-cache'}`" in err, err
