"""Seed derivation: the one named scheme, and the older streams that stay as they are.

THE SCHEME (new code uses only this): every random stream is named by the run's seed and the path of
names of what draws from it, e.g. (seed, "batches", epoch) or (seed, head key, "negatives", epoch):

    stable_seed(seed, *names) -> int                  63-bit, sha256 of "seed/name/...", independent
                                                      of PYTHONHASHSEED, the process and the order of draws
    rng(seed, *names)         -> np.random.Generator  default_rng(stable_seed(seed, *names))
    torch_generator(seed, *names) -> torch.Generator  (CPU, or device=) manual_seed(stable_seed(seed, *names))

Naming a stream by its path makes draws independent of what else runs (a head trained alone or in a
group, a resumed trial, threads evaluating heads in any order all draw the same numbers). The trainer
and the evaluation use it: batches, negatives, head initialisation, test and validation slates (and,
on a GPU, the Monte-Carlo slate noise: (seed, "mc-slates", block index) on the device), and so do the
logged-feedback streams: a log's fixed test part (split_seed, "logged-data", "test-split"), the folds of the
OPE reward model and the bootstrap resamples of `poxm ope` (seed, "logged-ope", ...), and a dataset's test
split re-drawn for each run seed (split.seed, "data-split", run seed; data/splits.py).

STREAMS THAT STAY (their numbers are in cached prepare artifacts and published results, so a
different derivation would change them; new code must not copy them):
  tagged_rng(seed, tag)   default_rng(SeedSequence([seed, *tag bytes])): the logging model's alpha
                          sample and shuffle (model/logging_model.py), the validation split and the
                          slate simulation (bandit/simulate.py), the known-answer world (bandit/known_answer.py)
  bandit.policy.noise_key SeedSequence(entropy).generate_state(1, uint64): the keys of the variants'
                          frozen Gumbel noise (counter-based, bandit/policy.py)
  default_rng([seed, k])  the synthetic generator (data/synthetic.py: [seed, 0], a chunk [seed, 1, c]), the Monte-Carlo
                          slate noise blocks of the stochastic metrics (metrics/gumbel_noise.py, k = block index)
  default_rng(seed)       a user-given seed used as is: the test split of a declared dataset
                          (split.seed, data/splits.py), the bootstrap of an estimate or an aggregate, the
                          k-means++ draws of label clusters (prepare/clusters.py: the published OBD clusters)
  torch.manual_seed(seed) the logging model's initialisation (global torch RNG, model/logging_model.py), the
                          known-answer learners' initialisation (bandit/known_answer_learners.py)
  Generator().manual_seed(0 | 1)  the fixed random problem a fused Triton kernel is checked on at its
                          first use (accel/triton_adam.py; no result depends on it)
  seed ^ 0x5EED           the policy network's dense-layer initialisation next to the output layer's
                          own generator (policy/registry.py; the seed itself is stable_seed(..., "init"))
"""
from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["stable_seed", "rng", "torch_generator", "tagged_rng"]


def stable_seed(*parts) -> int:
    """A 63-bit seed from any printable parts (independent of PYTHONHASHSEED)."""
    h = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


def rng(seed: int, *names) -> np.random.Generator:
    """The NumPy generator of the stream (seed, *names)."""
    return np.random.default_rng(stable_seed(seed, *names))


def torch_generator(seed: int, *names, device=None):
    """A torch.Generator of the stream (seed, *names), on the CPU or on `device`."""
    import torch

    gen = torch.Generator() if device is None else torch.Generator(device=device)
    return gen.manual_seed(stable_seed(seed, *names))


def tagged_rng(seed: int, tag: str) -> np.random.Generator:
    """The older tagged stream (see the module doc: kept because cached artifacts depend on it)."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), *tag.encode()]))
