"""POXM_RAY_PRELOAD: the modules every worker process of a local Ray imports when it starts."""
from __future__ import annotations

import pytest

from orchestration.ray_setup import PRELOAD_DEFAULT, preload_modules


def test_preload_setting():
    assert preload_modules({}) == [] and preload_modules({"POXM_RAY_PRELOAD": "0"}) == []
    assert preload_modules({"POXM_RAY_PRELOAD": "1"}) == list(PRELOAD_DEFAULT)
    assert preload_modules({"POXM_RAY_PRELOAD": " json , csv ,"}) == ["json", "csv"]


@pytest.mark.slow
def test_a_local_rays_workers_hold_the_preloaded_modules(monkeypatch):
    """A task that imports nothing finds the module already imported in its worker."""
    import ray

    from orchestration.ray_setup import ray_init

    def _loaded(name: str) -> bool:      # defined here: sent by value, nothing imported to find it
        import sys
        return name in sys.modules

    module = "orchestration.plan"          # imported by nothing a bare Ray worker loads
    monkeypatch.setenv("POXM_RAY_PRELOAD", module)
    assert ray_init(None, verbose=False)
    try:
        assert ray.get(ray.remote(_loaded).remote(module)) is True
        assert ray.get(ray.remote(_loaded).remote("orchestration.mps")) is False    # control
    finally:
        ray.shutdown()
