"""Adam's update, written once: dense (`adam_update_`) and on a set of rows (`row_adam_update_`).

Every optimiser of the policies and of the batched heads calls these (the row-wise `RowAdam` of the
output layers, `NetworkStack`'s vectorised Adam, `training.batched.BatchedHeads`); the fused Triton
kernels (`poxm_core/accel`) compute the same update and are checked against these on first use.

One step, with t the step count, c1 = 1 - b1^t, c2 = 1 - b2^t (Kingma & Ba; torch.optim.Adam's
non-fused arithmetic, L2 weight decay added to the gradient):

    g <- g + wd p;   m <- m + (1 - b1)(g - m);   v <- b2 v + (1 - b2) g^2
    p <- p - (lr / c1) m / (sqrt(v) / sqrt(c2) + eps)

`step` is lr / c1 and `sqrt_c2` is sqrt(c2): floats, or tensors that broadcast against p (a rate per
column, or per row: each head its own rate and step count). The last product has two float orders,
kept as they are because results depend on them bit for bit:

    scale_after_divide=False   p <- p + (m * -step) / denom     output layers (`RowAdam.step`, batched heads)
    scale_after_divide=True    p <- p - (m / denom) * step      network stack; the sync-free row step
"""
from __future__ import annotations

import torch

__all__ = ["adam_update_", "row_adam_update_", "DeviceStepCount"]


@torch.no_grad()
def adam_update_(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, *, step, sqrt_c2,
                 betas: tuple[float, float], eps: float, weight_decay: float = 0.0,
                 scale_after_divide: bool = False) -> None:
    """One Adam step in place on p, m and v (all of one shape; g the gradient, not modified)."""
    b1, b2 = betas
    if weight_decay:
        g = g + weight_decay * p
    m.lerp_(g, 1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    denom = (v.sqrt() / sqrt_c2).add_(eps)
    if scale_after_divide:
        p.sub_(m / denom * step)
    else:
        p.addcdiv_(m * -step, denom)


@torch.no_grad()
def row_adam_update_(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, rows: torch.Tensor, *,
                     src: torch.Tensor | None = None, **adam) -> None:
    """`adam_update_` on the rows `rows` of p, m, v only ("lazy" Adam: other rows keep their bits); g holds
    the gradient of those rows, g[j] for row rows[j]; `adam` the keywords of `adam_update_`.

    src None: `rows` are unique; read and written back by indexing (a host synchronisation on a GPU).
    src given (`accel.static.static_unique`'s slots, fixed shape, sync-free): rows[j] for j < r are the
    unique rows and src[j] = j; padding slots have src[j] = 0 and write slot 0's new value to slot 0's row."""
    if src is None:
        ps, ms, vs = p[rows], m[rows], v[rows]
        adam_update_(ps, g, ms, vs, **adam)
        p[rows], m[rows], v[rows] = ps, ms, vs
        return
    dst = rows.index_select(0, src)
    ps, ms, vs = p.index_select(0, rows), m.index_select(0, rows), v.index_select(0, rows)
    adam_update_(ps, g, ms, vs, **adam)
    for full, part in ((p, ps), (m, ms), (v, vs)):
        full.index_copy_(0, dst, part.index_select(0, src))


class DeviceStepCount:
    """The step count of an optimiser kept on the device as `self.t` (float64, 0-dim), so that one step
    serves the eager loop and a captured CUDA graph (the graph advances it); `step_count` reads it."""

    @property
    def step_count(self) -> int:
        """Steps taken (reads the device counter: a host synchronisation, for checkpoints and reports)."""
        return int(self.t.item())

    @step_count.setter
    def step_count(self, n: int) -> None:
        self.t.fill_(float(n))
