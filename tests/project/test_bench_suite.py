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


def _all_label_eval_agrees_with_the_earlier_formulas(fig: dict, out: str) -> None:
    """The figures it prints on a GPU compare the all-label evaluation with the formulas it replaced, so
    those comparisons must hold at CPU shapes too."""
    assert fig["val_max_abs_diff"] < 1e-6 and fig["test_rankings_equal"]
    assert 0 < fig["test_truncated_mass"] < 1 and fig["val_s"] > 0 and fig["test_s"] > 0 and fig["metrics_s"] > 0


def _mlflow_points_created_the_runs_and_timed_them(fig: dict, out: str) -> None:
    """The MLflow set-up a sweep does before its trials, on a real SQLite store (a fresh temporary run
    directory): the runs it created and its time a point."""
    lines = out.splitlines()
    assert lines[0].startswith("quickstart.yaml: ") and lines[0].endswith("3 run(s) created")
    assert "one run per grid point" in lines[2] and "ms a point" in lines[2]


def _slate_quadrature_groups_bound_the_arrays(fig: dict, out: str) -> None:
    """POTEC-shaped rows need ~16 times the 300 nodes a chunk is sized for; grouped, the largest working set
    stays within the budget, and the values are the one chunk's within the quadrature's error."""
    assert fig["nodes_a_row"]["min"] > 16 * 300 and fig["groups"] > 1
    assert fig["one_chunk_elems"] > fig["budget_elems"] >= fig["grouped_elems"]
    assert fig["max_abs_difference"] < 1e-9


# what a benchmark's quick run must show beyond its figures being recorded (fig: its figures; out: its stdout)
QUICK_CHECKS = {"all-label-eval": _all_label_eval_agrees_with_the_earlier_formulas,
                "mlflow-points": _mlflow_points_created_the_runs_and_timed_them,
                "slate-quadrature": _slate_quadrature_groups_bound_the_arrays}


@pytest.mark.slow       # each benchmark a subprocess at CPU-sized shapes (seconds to a minute on 2 shared cores)
@pytest.mark.parametrize("name", QUICK)
def test_quick_form_runs_on_cpu_and_records_its_figures(name, tmp_path, capsys):
    """`python -m benchmarks NAME --quick` as `main`: the benchmark's script runs as the subprocess it
    always is (the entry point itself: test_the_entry_point_lists_the_benchmarks)."""
    perf = tmp_path / "perf.json"
    capsys.readouterr()
    assert main([name, "--quick", "--perf", str(perf)]) == 0
    out = capsys.readouterr().out
    if "skipped, no datasets" in out:
        pytest.skip(out.strip())
    entry = json.loads(perf.read_text())[name]
    assert entry["command"] == f"python -m benchmarks {name} --quick" and entry["card"].startswith("cpu")
    assert entry["value"]["wall_s"] > 0
    QUICK_CHECKS.get(name, lambda fig, out: None)(entry["value"], out)


def test_every_quick_check_names_a_benchmark_with_a_quick_form():
    assert set(QUICK_CHECKS) <= set(QUICK)


def test_the_entry_point_lists_the_benchmarks():
    out = subprocess.run([sys.executable, "-m", "benchmarks", "--list"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert [ln.split()[0] for ln in out.stdout.strip().splitlines()] == list(BENCHMARKS)


@pytest.mark.slow       # in-process, but it quiets Ray's and MLflow's loggers for the whole test run, as a sweep does
def test_mlflow_points_on_a_missing_config_is_one_line(capsys):
    from benchmarks import mlflow_points
    assert mlflow_points.main([str(ROOT / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.yaml" in err


def test_the_quadrature_benchmark_chunks_as_the_metrics_do():
    """bench_slate_quadrature.py imports NumPy and torch only (it runs on a bare GPU machine), so it holds its
    own copy of the GPU chunk's budget: the same as metrics/slate.py's."""
    from benchmarks.bench_slate_quadrature import GPU_CHUNK_ELEMS
    from poxm_core.metrics.slate import GPU_CHUNK_ELEMS as used
    assert GPU_CHUNK_ELEMS == used

