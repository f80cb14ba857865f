"""The policy registry: name -> class, and `build_policies`, the one place a trial's policies are made."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from poxm_core.common.errors import PoxmInputError, nearest
from poxm_core.policy.base import Policy
from poxm_core.policy.heads import draw_in_threads
from poxm_core.policy.network import EndToEndPolicy, LinearPolicy, NetworkPolicy, fresh_output, logging_output
from poxm_core.policy.stack import NetworkStack

__all__ = ["POLICIES", "PolicyRequest", "build_policies"]

POLICIES: dict[str, type[Policy]] = {c.name: c for c in (LinearPolicy, NetworkPolicy, EndToEndPolicy)}


@dataclass(frozen=True)
class PolicyRequest:
    """One head's policy: architecture `name`, init 'fresh' | 'logging', Adam rate, seed of its init,
    and `group`: network heads of one group share a `NetworkStack` (trained in the same steps)."""
    name: str
    init: str
    lr: float
    seed: int
    group: str = "main"


def build_policies(reqs: list[PolicyRequest], *, W0: np.ndarray, b0: np.ndarray, n_features: int | None,
                   hidden: int, weight_decay: float, device: torch.device,
                   use_encoder: bool = False, input_adam: str = "dense") -> tuple[list[Policy], dict[str, NetworkStack]]:
    """The policies of `reqs` (same order) and the network stacks by group.

    Linear policies read the frozen encoder's features (width d = W0.shape[1]); the others have width
    `hidden` (d under init='logging', which copies the logging head (W0, b0) into the output layer)."""
    L, d = W0.shape
    out, stacks, members = [], {}, {}
    for r in reqs:
        if r.name not in POLICIES:
            raise PoxmInputError(f"training.policy: unknown policy '{r.name}'" + nearest(r.name, POLICIES))
        if r.name != "linear" and n_features is None:
            raise PoxmInputError(f"training.policy={r.name} reads the sparse input, but the prepared data has no "
                                 "X_train (re-run `poxm prepare`)")
        if r.name == "network":
            members.setdefault(r.group, []).append(r)
    for g, rs in members.items():
        logging_init = [r.init == "logging" for r in rs]
        if any(logging_init) and (hidden != d or not use_encoder):
            raise PoxmInputError(f"training.init=logging with the network policy needs training.hidden = model.dim "
                                 f"({d}, got {hidden}) and training.network_inputs=sparse+encoder")
        stacks[g] = NetworkStack(n_features, d, hidden, [r.init for r in rs],
                                 [torch.Generator().manual_seed(int(r.seed) ^ 0x5EED) for r in rs],
                                 [r.lr for r in rs], weight_decay, device, use_encoder=use_encoder,
                                 input_adam=input_adam)
    index = {g: 0 for g in members}
    gens = [torch.Generator().manual_seed(int(r.seed)) for r in reqs]

    def fresh(k: int):     # the fresh output layers of linear and network heads, drawn in threads
        r = reqs[k]
        if r.name in ("linear", "network") and r.init != "logging":
            return fresh_output(L, d if r.name == "linear" else hidden, gens[k], device)
        return None
    fresh_heads = draw_in_threads(fresh, len(reqs))
    for r, gen, new_head in zip(reqs, gens, fresh_heads):
        if r.name == "linear":
            head = logging_output(W0, b0, device) if r.init == "logging" else new_head
            out.append(LinearPolicy(head, r.lr, weight_decay, device))
        elif r.name == "network":
            head = logging_output(W0, b0, device) if r.init == "logging" else new_head
            out.append(NetworkPolicy(head, r.lr, weight_decay, device, stack=stacks[r.group], index=index[r.group]))
            index[r.group] += 1
        else:
            out.append(EndToEndPolicy(fresh_output(L, hidden, gen, device), r.lr, weight_decay, device,
                                      n_features=n_features, dim=d, gen=gen, use_encoder=use_encoder))
    return out, stacks
