"""benchmarks/bench_all_label_eval.py on a CPU at small shapes: the figures it prints on a GPU compare
the all-label evaluation with the formulas it replaced, so those comparisons must hold here too."""
from __future__ import annotations

import json

import pytest


@pytest.mark.slow   # about 4 s, mostly importing the training stack
def test_all_label_eval_benchmark_agrees_with_the_earlier_formulas(capsys):
    from benchmarks import bench_all_label_eval as bench
    assert bench.main(["--device", "cpu", "--labels", "1000", "--n-val", "120", "--n-test", "120",
                       "--max-support", "64", "--old-frac", "0.5"]) == 0
    fig = json.loads(capsys.readouterr().out)
    assert fig["val_max_abs_diff"] < 1e-6 and fig["test_rankings_equal"]
    assert 0 < fig["test_truncated_mass"] < 1 and fig["val_s"] > 0 and fig["test_s"] > 0 and fig["metrics_s"] > 0
