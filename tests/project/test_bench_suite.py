"""The benchmark suite (`python -m benchmarks`): one registry, a one-line list, named figures written to
perf.json with card, commit, date and command; every benchmark with a quick form runs on a CPU (slow)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.__main__ import figures, main, record
from benchmarks.registry import BENCHMARKS

ROOT = Path(__file__).resolve().parents[2]
QUICK = [b.name for b in BENCHMARKS.values() if b.quick is not None]


def test_every_benchmark_names_a_script_and_a_quick_form_or_why_not():
    for b in BENCHMARKS.values():
        assert (ROOT / "benchmarks" / b.script).is_file(), b.name
        assert b.description and b.machine and isinstance(b.full, tuple), b.name
        assert (b.quick is None) == bool(b.why_no_quick), f"{b.name}: a quick form, or the reason it has none"


def test_list_prints_one_line_each(capsys):
    assert main(["--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == list(BENCHMARKS)
    assert all(BENCHMARKS[ln.split()[0]].description in ln for ln in lines)


def test_unknown_name_is_one_line_with_the_nearest(capsys):
    assert main(["stpe"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'stpe'" in err and "did you mean 'step'" in err


def test_no_quick_form_says_why_and_runs_nothing(capsys):
    name = next(b.name for b in BENCHMARKS.values() if b.quick is None)
    assert main([name, "--quick"]) == 0
    assert BENCHMARKS[name].why_no_quick in capsys.readouterr().out


def test_figures_are_the_last_json_object_printed():
    out = 'timing...\n{"a": 1}\nmore\n{\n "b": {"c": 2.5}\n}\n'
    assert figures(out) == {"b": {"c": 2.5}}
    assert figures("no json here\n") == {}
    assert figures('{"x": 1} trailing text\n') == {}


def test_record_keeps_other_entries_and_stamps_the_figure(tmp_path):
    perf = tmp_path / "perf.json"
    perf.write_text(json.dumps({"_about": "kept", "old": {"value": 1}}))
    record(perf, "step", {"wall_s": 1.5, "samples_per_s": 10.0}, "python -m benchmarks step")
    data = json.loads(perf.read_text())
    assert data["_about"] == "kept" and data["old"] == {"value": 1}
    e = data["step"]
    assert e["value"] == {"wall_s": 1.5, "samples_per_s": 10.0} and e["command"] == "python -m benchmarks step"
    assert e["card"] and e["date"].count("-") == 2 and e["commit"]


@pytest.mark.slow       # each a subprocess at CPU-sized shapes (seconds to a minute on 2 shared cores)
@pytest.mark.parametrize("name", QUICK)
def test_quick_form_runs_on_cpu_and_records_its_figures(name, tmp_path):
    perf = tmp_path / "perf.json"
    out = subprocess.run([sys.executable, "-m", "benchmarks", name, "--quick", "--perf", str(perf)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    if "skipped, no datasets" in out.stdout:
        pytest.skip(out.stdout.strip())
    entry = json.loads(perf.read_text())[name]
    assert entry["command"] == f"python -m benchmarks {name} --quick" and entry["card"].startswith("cpu")
    assert entry["value"]["wall_s"] > 0
