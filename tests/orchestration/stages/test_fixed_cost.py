"""A sweep's fixed cost: what every `poxm` process and every trial process imports before it works.

Each `poxm` command builds the whole parser; the `ope` subcommand's module imported the report (torch,
SciPy's statistics, matplotlib) for it, seconds before a sweep could start. A trial process imported
scipy.stats for one normal quantile, about a fifth of its imports. Each check runs in a fresh interpreter.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from poxm_process import REPO

HEAVY = ("torch", "scipy.stats", "matplotlib", "mlflow", "orchestration.report.build")


def _imported_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + f"\nimport sys, json\nprint(json.dumps([m for m in {HEAVY!r} "
                          "if m in sys.modules]))"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_the_command_line_parser_imports_no_report_and_no_torch():
    assert _imported_after("from orchestration.cli_parser import build_parser\nbuild_parser()") == set()


@pytest.mark.slow
def test_a_trial_process_imports_no_scipy_stats_mlflow_or_report():
    got = _imported_after("import orchestration.stages.trial\nfrom poxm_core.training import HeadSpec, TrialSpec, "
                          "run_trial\nfrom poxm_core.prepare.pipeline import load_variant")
    assert got == {"torch"}


def test_normal_quantile_is_scipys_norm_ppf():
    import numpy as np
    from scipy.stats import norm

    from poxm_core.estimators.base import normal_quantile
    assert normal_quantile(0.975) == pytest.approx(1.959963984540054, abs=1e-15)
    qs = np.linspace(1e-6, 1 - 1e-6, 2001)
    assert all(normal_quantile(q) == float(norm.ppf(q)) for q in qs)      # the same floats


def test_the_report_package_imports_nothing_heavy():
    # importing a light part of the report (the claims' declarations) must not import the whole report
    code = ("import sys, orchestration.report, orchestration.report.claims_registry\n"
            "print(sorted(m for m in ('orchestration.report.build', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
