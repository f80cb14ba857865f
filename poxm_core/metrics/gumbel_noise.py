"""The Monte-Carlo slate metrics' Gumbel noise (metrics/slate.py), seeded per block of rows: a fixed function
of (seed, row block), so the chunk size never changes the draws. NumPy's on the host, torch's on a device
(other draws, the same distribution)."""
from __future__ import annotations

import numpy as np
import torch

from poxm_core.common.seeds import torch_generator

_NOISE_BLOCK = 64        # rows per independently seeded noise block: results do not depend on chunking

__all__ = ["block_gumbel", "torch_gumbel"]


def _gumbel(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """`rng.gumbel(size=shape)` from the same draws: NumPy's Gumbel is -log(-log(1 - u)) with u =
    next_double = (raw >> 11) * 2^-53, one 64-bit draw per value (numpy/random/src/distributions:
    random_gumbel), and `rng.random` yields exactly those u. Computed vectorised (several times faster;
    `random` fills and the logs run without the GIL, so chunks evaluated by threads overlap); equal to
    rng.gumbel up to the last bit of NumPy's vectorised log (1 ulp on a fraction of the values,
    tests/poxm_core/training/test_fast_paths.py). A draw u = 0, which random_gumbel rejects and redraws (probability
    2^-53 a value), falls back to rng.gumbel itself."""
    state = rng.bit_generator.state
    u = rng.random(int(np.prod(shape)))
    if u.size and not u.all():
        rng.bit_generator.state = state
        return rng.gumbel(size=shape)
    np.subtract(1.0, u, out=u)
    np.log(u, out=u)
    np.negative(u, out=u)
    np.log(u, out=u)
    np.negative(u, out=u)
    return u.reshape(shape)


def block_gumbel(seed: int, a: int, b: int, S: int, m: int) -> np.ndarray:
    """Gumbel noise (b-a, S, m) for rows a..b-1 (a multiple of _NOISE_BLOCK): a fixed function of
    (seed, row block), so the chunk size never changes the draws."""
    parts = []
    for blk_start in range(a, b, _NOISE_BLOCK):
        r = min(b, blk_start + _NOISE_BLOCK) - blk_start
        rng = np.random.default_rng([seed, blk_start // _NOISE_BLOCK])
        parts.append(_gumbel(rng, (r, S, m)))
    return np.concatenate(parts, axis=0)


def torch_gumbel(seed: int, a: int, b: int, S: int, m: int, device) -> torch.Tensor:
    """Gumbel noise (b-a, S, m) float64 on `device` for rows a..b-1 (a multiple of _NOISE_BLOCK), from the
    stream (seed, "mc-slates", row block) on the device: a fixed function of them on one device, so the
    chunk size never changes the draws (other draws than the NumPy path's; the same distribution)."""
    out = torch.empty((b - a, S, m), dtype=torch.float64, device=device)
    for blk_start in range(a, b, _NOISE_BLOCK):
        r = min(b, blk_start + _NOISE_BLOCK) - blk_start
        gen = torch_generator(seed, "mc-slates", blk_start // _NOISE_BLOCK, device=device)
        u = torch.rand((r, S, m), dtype=torch.float64, device=device, generator=gen)
        # -log(-log(1 - u)); an endpoint draw (u = 0, or 1 on a backend that returns it) would give an
        # infinite key: clamped to a finite one (about 690 from the bound), as likely as 2^-53 a value
        out[blk_start - a:blk_start - a + r] = -torch.log((-torch.log1p(-u)).clamp_(min=1e-300, max=1e300))
    return out
