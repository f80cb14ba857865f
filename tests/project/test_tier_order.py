"""--fast-first in a pytest run of its own (pytester): the order of the tiers, the stop after a failed fast
test, and a slow test's failure that leaves the rest of the slow tier running."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parents[1]     # tests/tier_order.py is imported from here

MODULE = """
import pytest

@pytest.mark.slow
def test_slow_a():
    assert {slow_a_passes}

@pytest.mark.slow
def test_slow_b():
    pass

def test_fast():
    assert {fast_passes}
"""


@pytest.fixture
def run_tiers(pytester, monkeypatch):
    """tests/tier_order.py's hooks in a conftest of their own, over three tests, in a pytest subprocess."""
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    pytester.makeconftest("from tier_order import pytest_addoption, pytest_collection_modifyitems, "
                          "pytest_runtest_setup  # noqa: F401\n")
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")

    def run(fast_passes: bool, slow_a_passes: bool):
        pytester.makepyfile(test_tiers=MODULE.format(fast_passes=fast_passes, slow_a_passes=slow_a_passes))
        return pytester.runpytest_subprocess("--fast-first", "-v", "-p", "no:cacheprovider")
    return run


def _order(result) -> list[str]:
    return [line.split("::")[1].split()[0] for line in result.outlines if "test_tiers.py::" in line]


def test_fast_tests_run_first_and_all_slow_ones_follow(run_tiers):
    r = run_tiers(fast_passes=True, slow_a_passes=True)
    assert _order(r) == ["test_fast", "test_slow_a", "test_slow_b"]
    r.assert_outcomes(passed=3)


def test_a_failed_fast_test_skips_the_slow_tier(run_tiers):
    r = run_tiers(fast_passes=False, slow_a_passes=True)
    r.assert_outcomes(failed=1, skipped=1)          # the first slow test skipped, then the run stops
    assert "1 fast test(s) failed: the slow tests were not run" in r.stdout.str()


def test_a_failed_slow_test_does_not_stop_the_slow_tier(run_tiers):
    r = run_tiers(fast_passes=True, slow_a_passes=False)
    r.assert_outcomes(passed=2, failed=1)           # test_slow_b still ran
    assert "fast test(s) failed" not in r.stdout.str()
