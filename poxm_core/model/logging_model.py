"""The logging model (docs/protocol.md): the core model trained with full labels on a random fraction alpha
of the training instances, one-vs-all logistic loss (BCE with logits), Adam, mini-batches.

    loss(batch B) = (1/|B|) sum_{i in B} sum_{y in [L]} BCE(s(x_i, y), 1{y in Y*_i})

(summed over labels so that the rare positives of a large L are not divided away; Adam is invariant to
the overall scale anyway). The bias is initialised to the label's prior log-odds on the sample, so the
first steps are spent on the features, not on learning that every label is rare.

Memory: the logits of a batch are (B, L). For very large L (Amazon-670K) a batch is split into
micro-batches of m = max(1, budget / (L * 16 bytes)) rows (budget = `mcfg.topk_chunk_mb`; 16 bytes
per logit covers the logits, the dense 0/1 target, the gradient and the loss terms), and their
gradients are accumulated: the optimisation is the same as with the full batch, and peak memory is
bounded by the budget whatever L.

Deterministic on CPU given `seed`: torch.manual_seed for the initialisation, a numpy generator
seeded by (seed, "logging-sample") for the alpha sample and by (seed, "logging-shuffle") for batches.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from poxm_core.config.schema import ModelConfig
from poxm_core.common.csr import check_csr
from poxm_core.model.core import CoreModel, csr_to_bag, dense_targets, resolve_device
from poxm_core.optim.torch_lean import adam
from poxm_core.common.seeds import tagged_rng

_BYTES_PER_LOGIT = 16


def alpha_sample(n: int, alpha: float, seed: int, rows: np.ndarray | None = None) -> np.ndarray:
    """Sorted row ids of the logging model's training sample: round(alpha * n) rows drawn without
    replacement from `rows` (default all n rows), capped at len(rows), at least 1."""
    if not (0.0 < alpha <= 1.0):
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    pool = np.arange(n, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    if pool.size == 0:
        raise ValueError("rows: no training instances to sample the logging model's data from")
    m = min(pool.size, max(1, int(round(alpha * n))))
    return np.sort(tagged_rng(seed, "logging-sample").choice(pool, size=m, replace=False))


def micro_batch_rows(n_labels: int, chunk_mb: int) -> int:
    """Rows per micro-batch so that the (m, L) logit tensors stay within `chunk_mb` MiB."""
    return max(1, int(chunk_mb * 2**20 // (n_labels * _BYTES_PER_LOGIT)))


def train_logging_model(X: sp.csr_matrix, Y: sp.csr_matrix, mcfg: ModelConfig, alpha: float, seed: int,
                        device: str | torch.device = "cpu", progress: bool = True,
                        rows: np.ndarray | None = None) -> CoreModel:
    """Train the core model one-vs-all on round(alpha * n) instances drawn (seeded) from `rows`.

    X: (n, D) CSR features, Y: (n, L) CSR 0/1 labels of the training split. `rows` (optional) are the
    instances the sample may come from (prepare passes the non-validation rows, so the validation
    slice is held out from every gradient step, docs/data.md); alpha stays a fraction of all n.
    Returns the trained CoreModel on CPU in eval mode.
    """
    check_csr("X", X)
    check_csr("Y", Y)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but Y has {Y.shape[0]}")
    dev = resolve_device(device)
    sample = alpha_sample(X.shape[0], alpha, seed, rows)
    Xs, Ys = X[sample], Y[sample]
    Ys.sort_indices()
    n, L = Ys.shape

    torch.manual_seed(int(seed))
    model = CoreModel.build(X.shape[1], L, mcfg.dim)
    with torch.no_grad():
        prior = (np.asarray(Ys.getnnz(axis=0), dtype=np.float64) + 0.5) / (n + 1.0)
        model.head.bias.copy_(torch.as_tensor(np.log(prior) - np.log1p(-prior), dtype=torch.float32))
    model.to(dev).train()
    opt = adam(model.parameters(), lr=mcfg.lr, weight_decay=mcfg.weight_decay)   # torch.optim.Adam, without torch._dynamo
    micro = micro_batch_rows(L, mcfg.topk_chunk_mb)
    shuffle = tagged_rng(seed, "logging-shuffle")
    n_batches = math.ceil(n / mcfg.batch_size)

    bar = tqdm(total=mcfg.epochs * n_batches, desc=f"logging model (n={n}, L={L})", disable=not progress,
               leave=False)
    for _epoch in range(mcfg.epochs):
        order = shuffle.permutation(n)
        total = torch.zeros((), device=dev)  # summed on the device: no sync per step
        for bstart in range(0, n, mcfg.batch_size):
            batch = order[bstart:bstart + mcfg.batch_size]
            opt.zero_grad(set_to_none=True)
            for mstart in range(0, batch.size, micro):
                mb = batch[mstart:mstart + micro]
                logits = model(*csr_to_bag(Xs[mb], dev))
                loss = F.binary_cross_entropy_with_logits(logits, dense_targets(Ys[mb], dev),
                                                          reduction="sum") / batch.size
                loss.backward()
                total += loss.detach()
            opt.step()
            bar.update(1)
        bar.set_postfix(loss=f"{float(total) * mcfg.batch_size / n:.3f}")
    bar.close()
    return model.cpu().eval()
