"""Policies built on the frozen encoder (docs/protocol.md).

linear    h(x) = z = g_phi(x): the output layer alone on the frozen features (the earlier design;
          an ablation now).
network   h(x) = U z + V^T x~ + c: trainable layers between the frozen encoder and the output layer,
          reading the frozen features z (d) AND the sparse input x~ (x / ||x||_2, an EmbeddingBag
          V (D, h)). It is the analogue of AttentionXML's trainable attention + fully connected layers
          on its frozen LSTM: the frozen part summarises the text, the trained part reads the tokens.
          Why the sparse input: a 256-d encoder fitted on alpha = 20 % of the data caps every method
          (Bibtex: best linear model on z 55 P@1, one-vs-all linear on the raw features 63-64);
          why linear (no activation): measured on Bibtex, tanh/ReLU + LayerNorm + dropout variants
          reached 58-61 P@1 against 63 for the linear layer (docs/protocol.md).
end2end   the same architecture with every learned layer trained from a fresh init, the encoder g_phi
          too where the network reads it (the paper's skyline: AttentionXML trained end to end).
Init 'fresh': V ~ N(0, 1/h), U and c torch's default, W ~ N(0, 0.01^2), b = 0 (seeded).
Init 'logging' (ablation): U = I, V = 0, c = 0, (W, b) = the logging head, so the policy starts
exactly at the logging model's scores (needs h = d).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from poxm_core.common.errors import PoxmInputError
from poxm_core.policy.base import Bag, Policy
from poxm_core.policy.stack import NetworkStack
from poxm_core.policy.heads import HeadParams

__all__ = ["LinearPolicy", "NetworkPolicy", "EndToEndPolicy", "fresh_output"]


def fresh_output(L: int, h: int, gen: torch.Generator, device: torch.device) -> HeadParams:
    W = torch.randn((L, h), generator=gen, dtype=torch.float32) * 0.01
    return HeadParams(W.to(device), torch.zeros(L, dtype=torch.float32, device=device))


def logging_output(W0: np.ndarray, b0: np.ndarray, device: torch.device) -> HeadParams:
    return HeadParams(torch.tensor(np.asarray(W0), dtype=torch.float32, device=device),
                      torch.tensor(np.asarray(b0), dtype=torch.float32, device=device))


class LinearPolicy(Policy):
    name = "linear"

    def __init__(self, out: HeadParams, lr: float, weight_decay: float, device: torch.device) -> None:
        super().__init__(out, lr, weight_decay, device)
        self._finish()

    def features(self, z: torch.Tensor, bag: Bag | None) -> torch.Tensor:
        return z

    @torch.no_grad()
    def features_of(self, Z, X, rows=None) -> np.ndarray:
        return np.asarray(Z if rows is None else Z[np.asarray(rows)], dtype=np.float32)

    @torch.no_grad()
    def features_on(self, Z: torch.Tensor, X, rows: torch.Tensor) -> torch.Tensor:
        return Z.index_select(0, rows)


class NetworkPolicy(Policy):
    """Head k of a `NetworkStack` (policy/stack.py): h(x) = U_k z + V_k^T x~ + c_k. The stack owns and
    steps the dense layers of all its heads at once; this object owns the head's output layer."""
    name = "network"
    reads_sparse = True

    def __init__(self, out: HeadParams, lr: float, weight_decay: float, device: torch.device, *,
                 stack: "NetworkStack", index: int) -> None:
        super().__init__(out, lr, weight_decay, device)
        self.stack = [stack]          # a list: not registered as a submodule (the stack is shared)
        self.index = index
        self._finish()

    def features(self, z: torch.Tensor, bag: Bag | None) -> torch.Tensor:
        if bag is None:
            raise PoxmInputError("the network policy reads the sparse input: the batch has no Batch.bag")
        return self.stack[0].head_features(self.index, z, bag)

    def from_stacked(self, stacked: torch.Tensor) -> torch.Tensor:
        """This head's block of the stack's joint forward (B, H h) -> (B, h), gradient kept."""
        h = self.stack[0].h
        return stacked[:, self.index * h:(self.index + 1) * h]

    @property
    def shared_stack(self) -> NetworkStack:
        return self.stack[0]

    def own_tensors(self) -> list[torch.Tensor]:
        st, h = self.stack[0], self.stack[0].h
        cols = slice(self.index * h, (self.index + 1) * h)
        return [*super().own_tensors(), *(p[..., cols] for p in st.parameters())]

    def step_features(self, z: torch.Tensor, bag: Bag | None, stacked: dict) -> torch.Tensor:
        return self.from_stacked(stacked[id(self.stack[0])])


class EndToEndPolicy(Policy):
    """The paper's skyline: the methods' architecture with every learned layer trained, from a fresh init.

    The paper's skyline is AttentionXML trained end to end (its LSTM too) where the methods freeze the
    LSTM. Here the methods' network reads what `training.network_inputs` says:
      sparse          h(x) = V^T x~ + c: no learned layer is frozen (x~ is the TF-IDF input itself), so
                      end to end is this same network; it differs from `skyline` only by its init draw.
      sparse+encoder  h(x) = U g_phi(x) + V^T x~ + c with g_phi a fresh `SparseEncoder` trained too (the
                      methods read the frozen, logging-fitted g_phi instead).
    z from the batch is unused either way."""
    name = "end2end"
    reads_sparse = True

    def __init__(self, out: HeadParams, lr: float, weight_decay: float, device: torch.device, *,
                 n_features: int, dim: int, gen: torch.Generator, use_encoder: bool = True) -> None:
        from poxm_core.model.core import SparseEncoder

        super().__init__(out, lr, weight_decay, device)
        h = int(out.W.shape[1])
        self.use_encoder = bool(use_encoder)
        self.V = nn.EmbeddingBag(n_features, h, mode="sum")
        self.c = nn.Parameter(torch.zeros(h))
        if self.use_encoder:
            self.encoder = SparseEncoder(n_features, dim)
            self.U = nn.Linear(dim, h, bias=False)
        with torch.no_grad():
            self.V.weight.copy_(torch.randn((n_features, h), generator=gen) / h ** 0.5)
            if self.use_encoder:
                self.encoder.bag.weight.copy_(torch.randn((n_features, dim), generator=gen))
                bound = 1.0 / dim ** 0.5
                self.U.weight.copy_(torch.rand((h, dim), generator=gen) * 2 * bound - bound)
        self._finish()

    def features(self, z: torch.Tensor, bag: Bag | None) -> torch.Tensor:
        if bag is None:
            raise PoxmInputError("the end-to-end policy reads the sparse input: the batch has no Batch.bag")
        h = self.V(bag[0], bag[1], per_sample_weights=bag[2]) + self.c
        if self.use_encoder:
            h = h + self.U(self.encoder(bag[0], bag[1], bag[2]))
        return h
