"""A trial's deterministic mode sets torch's flag (on, warn-only) and restores it after, without importing
torch._inductor (torch.use_deterministic_algorithms would: seconds of a fresh process's first trial)."""
from __future__ import annotations

import subprocess
import sys

import torch

from poxm_core.training.trial_setup import deterministic, set_deterministic


def test_the_flag_is_set_inside_and_restored_after():
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    try:
        set_deterministic(False)
        with deterministic(True):
            assert torch.are_deterministic_algorithms_enabled()
            assert torch.is_deterministic_algorithms_warn_only_enabled()
            with deterministic(False):
                assert not torch.are_deterministic_algorithms_enabled()
            assert torch.are_deterministic_algorithms_enabled()
            assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert not torch.are_deterministic_algorithms_enabled()
        set_deterministic(True)          # not warn-only: an op without a deterministic kernel raises
        with deterministic(True):
            assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        set_deterministic(*before)


def test_a_fresh_process_does_not_import_inductor():
    code = ("import sys, torch\n"
            "from poxm_core.training.trial_setup import deterministic\n"
            "with deterministic(True):\n"
            "    assert torch.are_deterministic_algorithms_enabled()\n"
            "with deterministic(False):\n"
            "    assert not torch.are_deterministic_algorithms_enabled()\n"
            "print(sorted(m for m in sys.modules if m.startswith(('torch._inductor', 'torch._dynamo', 'sympy')))[:3])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
