"""torch.optim.Adam without importing torch._dynamo, which poxm never uses.

torch.optim imports torch._dynamo (and with it torch._inductor, sympy and more) the first time an
optimiser is built or stepped: Optimizer's add_param_group, zero_grad, state_dict and load_state_dict
are wrapped by `torch._disable_dynamo`, and Adam.step by `_use_grad_for_differentiable`, which calls
`torch._dynamo.graph_break()`. Both exist for torch.compile only. The import is most of a fresh GPU
trial's set-up, longest where the Python packages have no bytecode cache (docs/performance.md, "Figures
behind the code's comments").

`LeanAdam` is torch.optim.Adam with its step run as `_use_grad_for_differentiable` runs it, minus the
graph breaks (no-ops outside torch.compile): the same arithmetic, the same state_dict. `skip_dynamo_import`
gives the four wrapped Optimizer methods the function their wrapper would otherwise import dynamo to
build (it caches it under `__dynamo_disable` on the wrapped function; outside torch.compile it only calls
the original). Both change nothing in a process that has loaded torch._dynamo (e.g. to compile), and
where torch's layout differs they fall back to torch's own code: the import then happens as before.
"""
from __future__ import annotations

import sys

import torch

__all__ = ["LeanAdam", "adam", "skip_dynamo_import"]

_WRAPPED = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")
_ADAM_STEP = getattr(torch.optim.Adam.step, "__wrapped__", None)     # Adam.step without its dynamo wrapper


def skip_dynamo_import() -> None:
    """Mark torch.optim.Optimizer's dynamo-disabled methods as already resolved (see the module doc)."""
    if "torch._dynamo" in sys.modules:
        return
    for name in _WRAPPED:
        fn = getattr(getattr(torch.optim.Optimizer, name, None), "__wrapped__", None)
        if callable(fn) and getattr(fn, "__dynamo_disable", None) is None:
            setattr(fn, "__dynamo_disable", fn)


class LeanAdam(torch.optim.Adam):
    """torch.optim.Adam whose step does not import torch._dynamo (module doc)."""

    def step(self, closure=None):
        if _ADAM_STEP is None or "torch._dynamo" in sys.modules:
            return super().step(closure)
        prev = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(self.defaults["differentiable"])
            return _ADAM_STEP(self, closure)
        finally:
            torch.set_grad_enabled(prev)


def adam(params, **kwargs) -> torch.optim.Adam:
    """An Adam optimiser over `params` (torch.optim.Adam's keywords) that leaves torch._dynamo unloaded."""
    skip_dynamo_import()
    return LeanAdam(params, **kwargs)
