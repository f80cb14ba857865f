"""The gate limiting how many Ray Train jobs start at once (orchestration.startup_gate), without Ray:
its permits, their hand-back and the lease that takes back a permit never handed back."""
from __future__ import annotations

import asyncio

import pytest

from orchestration.startup_gate import StartupGate, permits
from poxm_core.config import load_config, resolved_dict
from poxm_core.errors import PoxmInputError


def test_automatic_permits_are_an_eighth_of_the_cpus_at_least_four():
    assert [permits(None, c) for c in (2, 16, 39, 40, 64, 128)] == [4, 4, 4, 5, 8, 16]
    assert permits(0, 64) == 0 and permits(3, 64) == 3


def test_a_third_job_waits_for_a_permit_handed_back():
    async def run():
        gate = StartupGate(2)
        await gate.acquire("a")
        await gate.acquire("b")
        third = asyncio.ensure_future(gate.acquire("c"))
        await asyncio.sleep(0.1)
        assert not third.done() and await gate.held() == ["a", "b"]
        assert await gate.release("x") is False            # never held: nothing handed back
        assert await gate.release("a") is True
        waited = await asyncio.wait_for(third, 2.0)
        assert waited >= 0.1 and await gate.held() == ["b", "c"]
        assert await gate.release("a") is False           # a second hand-back gives no extra permit
        fourth = asyncio.ensure_future(gate.acquire("d"))
        await asyncio.sleep(0.1)
        assert not fourth.done()
        fourth.cancel()
    asyncio.run(run())


def test_a_permit_never_handed_back_is_taken_back_after_its_lease():
    async def run():
        gate = StartupGate(1, lease_s=0.2)
        await gate.acquire("dead")
        waited = await asyncio.wait_for(gate.acquire("next"), 5.0)    # checked once a second
        assert 0.2 <= waited < 3 and await gate.held() == ["next"]
    asyncio.run(run())


def test_startup_concurrency_key():
    data = {"name": "s", "datasets": [{"name": "synthetic", "synthetic": {"n_train": 50, "n_test": 20, "n_features": 10,
                                                                          "n_labels": 8},
                                  "variants": [{"name": "A", "alpha": 0.5}]}], "methods": {"dm": {}}}
    assert "startup_concurrency" not in resolved_dict(load_config(data=data))["resources"]   # unset: not in the hash
    cfg = load_config(data=data, overrides=["resources.startup_concurrency=2"])
    assert cfg.resources.startup_concurrency == 2
    with pytest.raises(PoxmInputError, match="startup_concurrency"):
        load_config(data=data, overrides=["resources.startup_concurrency=-1"])
