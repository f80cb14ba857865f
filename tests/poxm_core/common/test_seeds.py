"""poxm_core.common.seeds: the one named scheme (pinned values: a change would move every trained number),
the kept tagged stream, and where generators may be seeded (new code goes through poxm_core.common.seeds)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from poxm_core.common.seeds import rng, stable_seed, tagged_rng, torch_generator

ROOT = Path(__file__).resolve().parents[3]


def test_stable_seed_pinned_values():
    # sha256(b"0/batches/1")[:8] little-endian, top bit cleared: written down from the formula once
    assert stable_seed(0, "batches", 1) == 3131761497007632283
    assert stable_seed(3, "poxm/p=10/lam=0.9", "init") == 6636946028745709461
    assert stable_seed(0, "batches", 1) != stable_seed(0, "batches", 2) < 2 ** 63


def test_stable_seed_does_not_depend_on_the_process_hash_seed():
    code = "from poxm_core.common.seeds import stable_seed; print(stable_seed(0, 'batches', 1))"
    outs = {subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                           env={"PYTHONHASHSEED": h, "PATH": ""}).stdout.strip() for h in ("1", "2")}
    assert outs == {"3131761497007632283"}


def test_a_stream_is_its_own_and_the_same_in_a_fresh_process():
    """A stream (seed, *names) draws the same numbers whatever the global generators did in between (a
    resumed trial, heads evaluated in another order) and in another process; changing the seed, a name
    or their order gives another stream."""
    a = rng(4, "negatives", 2).random(5)
    t = torch.randperm(50, generator=torch_generator(4, "negatives", 2))
    np.random.seed(7)
    torch.manual_seed(999)
    np.random.random(3), torch.rand(3)
    assert np.array_equal(rng(4, "negatives", 2).random(5), a)
    assert torch.equal(torch.randperm(50, generator=torch_generator(4, "negatives", 2)), t)
    keys = [(4, "negatives", 2), (5, "negatives", 2), (4, "negatives", 3), (4, "batches", 2), (4, 2, "negatives")]
    draws = {k: tuple(rng(*k).integers(0, 2 ** 62, 2).tolist()) for k in keys}
    assert len(set(draws.values())) == len(keys)
    perms = {k: tuple(torch.randperm(40, generator=torch_generator(*k)).tolist()) for k in keys}
    assert len(set(perms.values())) == len(keys)
    code = "from poxm_core.common.seeds import rng; print(rng(4, 'negatives', 2).integers(0, 2 ** 62, 2).tolist())"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONHASHSEED": "3", "PATH": ""}).stdout.strip()
    assert out == str(list(draws[keys[0]]))


def test_tagged_stream_is_the_kept_formula():
    # the validation split of every cached prepare artifact depends on these draws
    assert tagged_rng(0, "validation").integers(0, 1000, 3).tolist() == [111, 84, 841]
    want = np.random.default_rng(np.random.SeedSequence([7, *b"logging-sample"])).random(4)
    np.testing.assert_array_equal(tagged_rng(7, "logging-sample").random(4), want)


# Where a generator may be seeded by hand: poxm_core/common/seeds.py and the kept streams its docstring lists.
ALLOWED = {
    "SeedSequence": {"poxm_core/common/seeds.py", "poxm_core/bandit/policy.py"},
    "default_rng": {"poxm_core/common/seeds.py", "poxm_core/metrics/gumbel_noise.py", "poxm_core/data/synthetic.py",
                    "poxm_core/data/registry.py", "poxm_core/data/splits.py", "poxm_core/estimators/base.py", "orchestration/report/aggregate.py",
                    "poxm_core/prepare/clusters.py"},
    "manual_seed": {"poxm_core/common/seeds.py", "poxm_core/model/logging_model.py", "poxm_core/training/epoch.py",
                    "poxm_core/policy/registry.py", "poxm_core/accel/triton_adam.py",
                    "poxm_core/bandit/known_answer_learners.py"},
}


def test_seeding_happens_only_in_the_documented_places():
    found: dict[str, set[str]] = {k: set() for k in ALLOWED}
    for pkg in ("poxm_core", "orchestration"):
        for p in (ROOT / pkg).rglob("*.py"):
            code = "\n".join(line.split("#")[0] for line in p.read_text().splitlines())
            code = re.sub(r'"""(?:.|\n)*?"""', "", code)          # docstrings may name them
            for k in ALLOWED:
                if re.search(rf"\b{k}\(", code):
                    found[k].add(str(p.relative_to(ROOT)))
    extra = {k: sorted(v - ALLOWED[k]) for k, v in found.items() if v - ALLOWED[k]}
    assert extra == {}, f"seed a new stream with poxm_core.common.seeds (stable_seed / rng / torch_generator): {extra}"
    assert all(found[k] for k in ALLOWED)                             # the scan sees them at all
