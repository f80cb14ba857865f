"""--fast-first (./scripts/test.sh --all, what .ci/run runs): both tiers in one pytest run, collected and
imported once; the tests not marked slow first, the slow ones only when none of those failed. Hooks that
tests/conftest.py imports (and tests/project/test_tier_order.py checks in a pytest of its own)."""
from __future__ import annotations

import pytest

_FAST_FAILED = "_poxm_fast_failed"     # session attribute: the fast tier's failures, taken as the slow tier starts


def pytest_addoption(parser):
    parser.addoption("--fast-first", action="store_true",
                     help="run the tests not marked slow first, and the slow ones only when none of those failed "
                          "(./scripts/test.sh --all: both tiers in one run, collected and imported once)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--fast-first"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is not None)     # stable: file order kept


def pytest_runtest_setup(item):
    """The first slow test ends the run when a fast one failed, as a fast tier of its own would. The count is
    taken once, as the slow tier starts: a slow test's own failure never stops the rest of the slow tier."""
    session = item.session
    if not session.config.getoption("--fast-first") or item.get_closest_marker("slow") is None:
        return
    if not hasattr(session, _FAST_FAILED):
        setattr(session, _FAST_FAILED, session.testsfailed)
    failed = getattr(session, _FAST_FAILED)
    if failed:
        session.shouldstop = f"{failed} fast test(s) failed: the slow tests were not run"
        pytest.skip(session.shouldstop)
