"""What a remote cluster's Ray workers are handed: Ray Train's poll interval and poxm's trial switches
when they are set, never a secret; a local Ray's workers inherit the driver's environment."""
from __future__ import annotations

from orchestration.cluster.ray_setup import TRAIN_POLL_ENV, worker_env


def test_a_remote_clusters_workers_are_handed_the_poll_interval():
    assert worker_env({TRAIN_POLL_ENV: "0.5", "HOME": "/root"}) == {TRAIN_POLL_ENV: "0.5"}
    assert worker_env({"HOME": "/root"}) == {}



def test_the_trial_switches_go_to_a_remote_clusters_workers():
    env = {"POXM_VALIDATION_OVERLAP": "0", "POXM_CUDA_GRAPHS": "0", "POXM_EVAL_THREADS": "4", "POXM_TOKEN": "x"}
    assert worker_env(env) == {"POXM_VALIDATION_OVERLAP": "0", "POXM_CUDA_GRAPHS": "0", "POXM_EVAL_THREADS": "4"}


def test_bytecode_hint_when_python_writes_none_and_the_module_has_none(tmp_path, monkeypatch):
    """The note appears only when PYTHONDONTWRITEBYTECODE is set and the module has no bytecode where
    Python looks; compiled once (py_compile, as compileall does), it is gone."""
    import importlib
    import py_compile
    import sys

    from orchestration.cluster.ray_setup import bytecode_hint
    (tmp_path / "poxm_hint_probe.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    monkeypatch.setattr(sys, "pycache_prefix", None)
    assert bytecode_hint("poxm_hint_probe", environ={}) is None
    hint = bytecode_hint("poxm_hint_probe", environ={"PYTHONDONTWRITEBYTECODE": "1"})
    assert hint is not None and "poxm_hint_probe has none" in hint and "compileall" in hint
    py_compile.compile(str(tmp_path / "poxm_hint_probe.py"))
    assert bytecode_hint("poxm_hint_probe", environ={"PYTHONDONTWRITEBYTECODE": "1"}) is None
    assert bytecode_hint("no_such_module_here", environ={"PYTHONDONTWRITEBYTECODE": "1"}) is None
