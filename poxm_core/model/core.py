"""The shared core model (docs/protocol.md): a sparse encoder g_phi(x) in R^d and a linear head over L labels.

    g_phi(x) = LayerNorm(tanh(E^T (x / ||x||_2) + c))        E: (D, d), c: (d,)
    s_theta(x, y) = w_y . g_phi(x) + b_y                       W: (L, d), b: (L,)
    p_hat(y | x) = sigmoid(s_theta(x, y))                     (one-vs-all logistic model)

Why this encoder: the sparse product E^T x is an `EmbeddingBag(mode="sum")` with the CSR values as
per-sample weights, so a batch costs O(nnz * d) and never densifies x. Rows are L2-normalised first so
that binary bag-of-words and TF-IDF inputs land on the same scale (with E ~ N(0, 1) at init each unit
is ~N(0, 1) before tanh). tanh keeps every unit bounded; LayerNorm then fixes the scale of g(x), so the
heads trained later on the *frozen* encoder (every trial) see features of unit variance whatever the
dataset, and one learning rate fits all datasets.

The encoder is frozen after the logging model is trained: `encode` computes g(x) once, and trials
train only heads on the cached (n, d) outputs.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from poxm_core.common.csr import check_csr
from poxm_core.common.errors import PoxmInputError


def resolve_device(name: str | torch.device) -> torch.device:
    """'cpu' | 'cuda' | 'cuda:N' | 'auto' (cuda when available) -> torch.device."""
    if isinstance(name, torch.device):
        return name
    if not isinstance(name, str):
        raise TypeError(f"device: expected 'cpu', 'cuda' or 'auto', got {type(name).__name__}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise PoxmInputError(f"device '{name}': CUDA is not available on this machine (use device=cpu or auto)")
        return torch.device(name)
    if name == "cpu":
        return torch.device("cpu")
    raise PoxmInputError(f"device '{name}': expected 'cpu', 'cuda' or 'auto'")


def csr_to_bag(X: sp.csr_matrix, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """CSR rows -> (indices, offsets, per-sample weights) for `nn.EmbeddingBag`, rows L2-normalised."""
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    counts = np.diff(X.indptr)
    w = X.data.astype(np.float32) / np.repeat(norms, counts).astype(np.float32)
    return (torch.as_tensor(X.indices.astype(np.int64), device=device),
            torch.as_tensor(X.indptr[:-1].astype(np.int64), device=device),
            torch.as_tensor(w, device=device))


def dense_targets(labels, device: torch.device, n_labels: int | None = None) -> torch.Tensor:
    """(m, L) float32 0/1 targets of a batch's CSR label rows. Only for a batch or micro-batch: m is
    bounded by the batch size or the memory budget, never the whole data set.

    `labels` may also be the padded form the CUDA-graph loop gathers (`training.batches.padded_labels`):
    an (m, k) int64 tensor of label ids with padding id L (`n_labels`), scattered on the device with a
    fixed shape and no host synchronisation; the same 0/1 matrix."""
    if isinstance(labels, torch.Tensor):
        L = int(n_labels)
        t = torch.zeros((labels.shape[0], L + 1), dtype=torch.float32, device=device)
        t.scatter_(1, labels, 1.0)
        return t[:, :L]
    t = torch.zeros(labels.shape, dtype=torch.float32, device=device)
    rows = np.repeat(np.arange(labels.shape[0]), np.diff(labels.indptr))
    t[torch.as_tensor(rows, device=device), torch.as_tensor(labels.indices.astype(np.int64), device=device)] = 1.0
    return t


class SparseEncoder(nn.Module):
    """g_phi: sparse (n, D) -> dense (n, d). See the module docstring for the formula and why."""

    def __init__(self, n_features: int, dim: int) -> None:
        super().__init__()
        if n_features <= 0 or dim <= 0:
            raise ValueError(f"n_features and dim must be > 0, got {n_features}, {dim}")
        self.bag = nn.EmbeddingBag(n_features, dim, mode="sum")
        self.bias = nn.Parameter(torch.zeros(dim))
        self.norm = nn.LayerNorm(dim)

    @property
    def n_features(self) -> int:
        return int(self.bag.num_embeddings)

    @property
    def dim(self) -> int:
        return int(self.bag.embedding_dim)

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        h = self.bag(indices, offsets, per_sample_weights=weights)
        return self.norm(torch.tanh(h + self.bias))

    def encode_csr(self, X: sp.csr_matrix, device: torch.device) -> torch.Tensor:
        return self(*csr_to_bag(X, device))


class CoreModel(nn.Module):
    """Encoder + linear head. `head.weight` is W (L, d), `head.bias` is b (L,)."""

    def __init__(self, encoder: SparseEncoder, head: nn.Linear) -> None:
        super().__init__()
        if head.in_features != encoder.dim:
            raise ValueError(f"head.in_features={head.in_features} != encoder.dim={encoder.dim}")
        self.encoder = encoder
        self.head = head

    @classmethod
    def build(cls, n_features: int, n_labels: int, dim: int) -> "CoreModel":
        return cls(SparseEncoder(n_features, dim), nn.Linear(dim, n_labels))

    @property
    def n_labels(self) -> int:
        return int(self.head.out_features)

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Logits s(x, y) for all labels: (n, L). Callers bound n so that n * L fits memory."""
        return self.head(self.encoder(indices, offsets, weights))

    def head_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(W (L, d) float32, b (L,) float32) as numpy."""
        return (self.head.weight.detach().cpu().numpy().astype(np.float32, copy=True),
                self.head.bias.detach().cpu().numpy().astype(np.float32, copy=True))


def _check_X(X: object, n_features: int) -> sp.csr_matrix:
    check_csr("X", X)
    if X.shape[1] != n_features:
        raise ValueError(f"X: expected {n_features} feature columns (the encoder's D), got {X.shape[1]}")
    return X  # type: ignore[return-value]


@torch.no_grad()
def encode(model: CoreModel | SparseEncoder, X: sp.csr_matrix, device: str | torch.device = "cpu",
           batch_size: int = 4096) -> np.ndarray:
    """Frozen encoder outputs g_phi(x) for every row of X: (n, d) float32, computed in row batches."""
    enc = model.encoder if isinstance(model, CoreModel) else model
    X = _check_X(X, enc.n_features)
    if batch_size <= 0:
        raise ValueError(f"batch_size must be > 0, got {batch_size}")
    dev = resolve_device(device)
    was_training = enc.training
    enc.eval()
    enc.to(dev)
    out = np.empty((X.shape[0], enc.dim), dtype=np.float32)
    for start in range(0, X.shape[0], batch_size):
        stop = min(start + batch_size, X.shape[0])
        out[start:stop] = enc.encode_csr(X[start:stop], dev).float().cpu().numpy()
    enc.train(was_training)
    return out
