"""The policy interface (docs/protocol.md, docs/estimators.md): a torch module that scores given label ids for a batch.

A policy is two parts with two optimisers:

    features   h_psi(x) in R^h: dense trainable layers on the frozen encoder output z = g_phi(x)
               (and, for the network policy, the sparse input x itself); torch.optim.Adam
    output     s(x, y) = W[y] . h(x) + b[y], W (L, h), b (L,): row-sparse (`RowScorer` / `RowAdam`),
               so a loss that asks for the p labels of Phi^p(x) reads and updates only those rows

`policy.scorer(batch)` is the `score(ids)` a method's loss receives (ids (B, m) -> (B, m) logits,
None -> (B, L) logits for the full-softmax methods); `policy.step(scorer)` applies one optimiser
step to the rows the loss touched and to the dense layers. `policy.features_of(Z, X, rows)` gives the
features of any rows in chunks without gradient (evaluation; `features_on` the same from device tensors). The shared dense layers are cheap:
O(B * (nnz(x) + d) * h) per step, independent of L.

Implementations live in their own modules and are registered in `registry.py`.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from poxm_core.policy.heads import HeadParams, RowAdam, RowScorer
from poxm_core.optim.torch_lean import adam

__all__ = ["Policy", "Bag"]

Bag = tuple[torch.Tensor, torch.Tensor, torch.Tensor]   # EmbeddingBag (indices, offsets, weights)

_FEATURE_ROWS = 8192


class Policy(nn.Module):
    """Base class: subclasses define `features(z, bag)` and their dense layers (may be none)."""
    name: ClassVar[str] = ""
    reads_sparse: ClassVar[bool] = False     # needs the batch's sparse input (Batch.bag)

    def __init__(self, out: HeadParams, lr: float, weight_decay: float, device: torch.device) -> None:
        super().__init__()
        self.out = out
        self.device = device
        self.out_opt = RowAdam(tuple(out.W.shape), device, lr=lr, weight_decay=weight_decay)
        self.lr, self.weight_decay = lr, weight_decay
        self.dense_opt: torch.optim.Optimizer | None = None

    def _finish(self) -> None:
        """Call at the end of a subclass __init__: moves the dense layers and builds their optimiser."""
        self.to(self.device)
        params = [p for p in self.parameters() if p.requires_grad]
        if params:
            # torch.optim.Adam's arithmetic; built so that it does not import torch._dynamo (seconds of set-up)
            self.dense_opt = adam(params, lr=self.lr, weight_decay=self.weight_decay)

    @property
    def n_labels(self) -> int:
        return int(self.out.W.shape[0])

    # ---- the one method a policy must define ----------------------------------------------
    def features(self, z: torch.Tensor, bag: Bag | None) -> torch.Tensor:
        raise NotImplementedError

    # ---- inside a training step -----------------------------------------------------------------
    @property
    def shared_stack(self) -> nn.Module | None:
        """The module holding this policy's dense layers together with other heads' (a `NetworkStack`:
        one forward and one optimiser step per batch for all its heads), or None."""
        return None

    def step_features(self, z: torch.Tensor, bag: Bag | None, stacked: dict) -> torch.Tensor:
        """This head's features in a training step; `stacked` maps id(shared stack) to that stack's
        joint forward of the batch. A policy without a shared stack computes its own."""
        return self.features(z, bag)

    # ---- shared ---------------------------------------------------------------------------------
    def scorer(self, z: torch.Tensor, bag: Bag | None, grad: bool = True) -> RowScorer:
        return RowScorer(self.out, self.features(z, bag), grad=grad)

    def step(self, scorer: RowScorer) -> None:
        self.out_opt.step(self.out, scorer)
        if self.dense_opt is not None:
            self.dense_opt.step()
            self.dense_opt.zero_grad(set_to_none=True)

    @torch.no_grad()
    def features_of(self, Z: np.ndarray, X: sp.csr_matrix | None, rows: np.ndarray | None = None) -> np.ndarray:
        """(len(rows), h) float32 features of the given rows (all rows when None), no gradient."""
        from poxm_core.model.core import csr_to_bag

        rows = np.arange(Z.shape[0]) if rows is None else np.asarray(rows)
        was = self.training
        self.eval()
        out = []
        for a in range(0, rows.size, _FEATURE_ROWS):
            r = rows[a:a + _FEATURE_ROWS]
            z = torch.as_tensor(np.ascontiguousarray(Z[r]), dtype=torch.float32, device=self.device)
            bag = csr_to_bag(X[r], self.device) if self.reads_sparse else None
            out.append(self.features(z, bag).float().cpu().numpy())
        self.train(was)
        return np.concatenate(out, axis=0) if out else np.zeros((0, int(self.out.W.shape[1])), np.float32)

    @torch.no_grad()
    def features_on(self, Z: torch.Tensor, X, rows: torch.Tensor) -> torch.Tensor:
        """`features_of` from device-resident inputs: Z (n, d) tensor, X a `training.batches.DeviceCSR`
        (None when the policy does not read the sparse input), rows (m,) int64 on Z's device. Returns
        (m, h) float32 on the device, in the same chunks as `features_of` (the same numbers)."""
        was = self.training
        self.eval()
        out = []
        for a in range(0, rows.numel(), _FEATURE_ROWS):
            r = rows[a:a + _FEATURE_ROWS]
            bag = X.gather(r)[:3] if self.reads_sparse else None
            out.append(self.features(Z.index_select(0, r), bag).float())
        self.train(was)
        return torch.cat(out) if out else Z.new_zeros((0, int(self.out.W.shape[1])))

    def own_tensors(self) -> list[torch.Tensor]:
        """Every trained tensor of this head alone (its output layer, its own dense layers; a shared
        stack's policy adds its column block there): what a divergence check reads."""
        return [self.out.W, self.out.b, *self.parameters()]

    def state(self) -> dict:
        return {"W": self.out.W, "b": self.out.b, "opt": self.out_opt.state_dict(),
                "dense": self.state_dict(), "dense_opt": self.dense_opt.state_dict() if self.dense_opt else None}

    def load_state(self, s: dict) -> None:
        self.out.W.copy_(s["W"])
        self.out.b.copy_(s["b"])
        self.out_opt.load_state_dict(s["opt"])
        self.load_state_dict(s["dense"])
        if self.dense_opt is not None and s.get("dense_opt") is not None:
            self.dense_opt.load_state_dict(s["dense_opt"])
