"""What a trial sets up in torch without importing torch._dynamo / torch._inductor (seconds of a fresh
process's first trial): the deterministic flag (on, warn-only, restored after) and its dense Adam
optimisers (the same steps as torch.optim.Adam, bit for bit)."""
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


def test_a_dense_optimiser_does_not_import_dynamo():
    """torch.optim imports torch._dynamo on an optimiser's first build and step; poxm's dense optimisers
    (poxm_core.optim.torch_lean) run a build, steps, zero_grad and a state_dict round trip without it."""
    code = ("import sys, torch\n"
            "from poxm_core.optim.torch_lean import adam\n"
            "p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))\n"
            "opt = adam([p], lr=0.1)\n"
            "(p ** 2).sum().backward(); opt.step(); opt.zero_grad()\n"
            "opt.load_state_dict(opt.state_dict())\n"
            "print('torch._dynamo' in sys.modules, [round(v, 6) for v in p.tolist()])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split(" ", 1)
    assert out[0] == "False"
    # Adam's first step moves each coordinate by lr against the sign of its gradient: 1 - 0.1, -2 + 0.1
    assert out[1].strip() == "[0.9, -1.9]"


def test_lean_adam_steps_as_torch_adam_bit_for_bit():
    from poxm_core.optim.torch_lean import adam
    g = torch.Generator().manual_seed(3)
    init = [torch.randn(5, 4, generator=g), torch.randn(4, generator=g)]
    targets = [torch.randn(5, 4, generator=g), torch.randn(4, generator=g)]
    runs = []
    for make in (lambda ps: torch.optim.Adam(ps, lr=0.05, weight_decay=0.01),
                 lambda ps: adam(ps, lr=0.05, weight_decay=0.01)):
        ps = [torch.nn.Parameter(t.clone()) for t in init]
        opt = make(ps)
        for _ in range(7):
            sum(((p - t) ** 2).sum() for p, t in zip(ps, targets)).backward()
            opt.step()
            opt.zero_grad()
        runs.append((ps, opt.state_dict()))
    (a, sa), (b, sb) = runs
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], init[0])
    assert sa["param_groups"] == sb["param_groups"]
    for k in sa["state"]:
        assert all(torch.equal(sa["state"][k][n], sb["state"][k][n]) for n in ("step", "exp_avg", "exp_avg_sq"))
