"""Core model: encoder formula vs a NumPy re-implementation, batching, devices, logging-model training."""
import numpy as np
import pytest
import scipy.sparse as sp
import torch

from poxm_core.config.schema import ModelConfig
from poxm_core.common.errors import PoxmInputError
from poxm_core.model import CoreModel, alpha_sample, encode, resolve_device, train_logging_model
from poxm_core.model import logging_model


def _X(n=7, D=6, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=0.5, random_state=seed, format="csr", dtype=np.float32)
    X.data[:] = rng.uniform(0.5, 2.0, X.nnz).astype(np.float32)
    X = X.tolil(); X[2, :] = 0; X = X.tocsr(); X.eliminate_zeros()   # one empty row
    return X


def test_encoder_matches_numpy_formula():
    torch.manual_seed(0)
    model = CoreModel.build(6, 4, dim=5)
    with torch.no_grad():
        model.encoder.bias.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0, 0.5]))
        model.encoder.norm.weight.copy_(torch.tensor([1.0, 2.0, 0.5, 1.0, 1.5]))
        model.encoder.norm.bias.copy_(torch.tensor([0.0, 0.1, -0.1, 0.2, 0.0]))
    X = _X()
    E = model.encoder.bag.weight.detach().numpy().astype(np.float64)
    c = model.encoder.bias.detach().numpy().astype(np.float64)
    gam = model.encoder.norm.weight.detach().numpy(); bet = model.encoder.norm.bias.detach().numpy()
    Xd = X.toarray().astype(np.float64)
    nrm = np.linalg.norm(Xd, axis=1, keepdims=True); nrm[nrm == 0] = 1
    h = np.tanh((Xd / nrm) @ E + c)
    ref = (h - h.mean(1, keepdims=True)) / np.sqrt(h.var(1, keepdims=True) + 1e-5) * gam + bet
    got = encode(model, X, "cpu", batch_size=3)
    assert got.dtype == np.float32 and got.shape == (7, 5)
    np.testing.assert_allclose(got, ref, atol=1e-5)
    # logits = W g + b
    W, b = model.head_arrays()
    from poxm_core.model.core import csr_to_bag
    with torch.no_grad():
        logits = model(*csr_to_bag(X, torch.device("cpu"))).numpy()
    np.testing.assert_allclose(logits, ref @ W.T + b, atol=1e-5)


def test_encode_batch_size_invariant_and_input_checks():
    model = CoreModel.build(6, 4, dim=3)
    X = _X()
    np.testing.assert_allclose(encode(model, X, "cpu", 1), encode(model, X, "cpu", 1000), atol=1e-6)
    with pytest.raises(TypeError, match="X"):
        encode(model, X.toarray(), "cpu")
    with pytest.raises(ValueError, match="feature columns"):
        encode(model, _X(D=5), "cpu")
    with pytest.raises(ValueError, match="batch_size"):
        encode(model, X, "cpu", 0)


def test_resolve_device():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(PoxmInputError, match="expected 'cpu'"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(PoxmInputError, match="CUDA is not available"):
            resolve_device("cuda")


def test_alpha_sample():
    s = alpha_sample(100, 0.2, seed=3)
    assert s.size == 20 and np.all(np.diff(s) > 0)
    np.testing.assert_array_equal(s, alpha_sample(100, 0.2, seed=3))
    assert not np.array_equal(s, alpha_sample(100, 0.2, seed=4))
    r = alpha_sample(100, 0.2, seed=3, rows=np.arange(50, 100))
    assert r.size == 20 and r.min() >= 50
    assert alpha_sample(100, 1.0, seed=0, rows=np.arange(10)).size == 10   # capped at the pool
    with pytest.raises(ValueError, match="alpha"):
        alpha_sample(100, 0.0, 0)


def _separable(n=300, L=6, per=4, seed=0):
    """Label l <-> features in block l: a model that learns anything gets P@1 near 1."""
    rng = np.random.default_rng(seed)
    lab = rng.integers(0, L, n)
    D = L * per + 10
    rows, cols = [], []
    for i, l in enumerate(lab):
        f = np.concatenate([l * per + rng.choice(per, 2, replace=False), L * per + rng.choice(10, 2, replace=False)])
        rows += [i] * f.size; cols += list(f)
    X = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(n, D))
    Y = sp.csr_matrix((np.ones(n, np.float32), (np.arange(n), lab)), shape=(n, L))
    return X, Y, lab


@pytest.mark.slow
def test_logging_model_learns_and_is_deterministic():
    X, Y, lab = _separable()
    mcfg = ModelConfig(dim=16, epochs=8, lr=1e-2, batch_size=32)
    m1 = train_logging_model(X, Y, mcfg, alpha=0.5, seed=1, device="cpu", progress=False)
    m2 = train_logging_model(X, Y, mcfg, alpha=0.5, seed=1, device="cpu", progress=False)
    W1, b1 = m1.head_arrays(); W2, b2 = m2.head_arrays()
    np.testing.assert_array_equal(W1, W2); np.testing.assert_array_equal(b1, b2)
    Z = encode(m1, X, "cpu")
    p1 = np.mean(np.argmax(Z @ W1.T + b1, axis=1) == lab)
    assert p1 > 0.9, p1                       # random would be ~1/6
    m3 = train_logging_model(X, Y, mcfg, alpha=0.5, seed=2, device="cpu", progress=False)
    assert not np.array_equal(m3.head_arrays()[0], W1)


def test_micro_batches_give_the_same_model(monkeypatch):
    """Splitting a batch into micro-batches (memory bound for large L) accumulates the same gradient."""
    X, Y, _ = _separable(n=120)
    mcfg = ModelConfig(dim=8, epochs=1, lr=1e-2, batch_size=16)
    ref = train_logging_model(X, Y, mcfg, alpha=1.0, seed=0, progress=False).head_arrays()[0]
    monkeypatch.setattr(logging_model, "micro_batch_rows", lambda L, mb: 3)
    got = train_logging_model(X, Y, mcfg, alpha=1.0, seed=0, progress=False).head_arrays()[0]
    np.testing.assert_allclose(got, ref, atol=2e-5)


def test_micro_batch_rows_bound():
    assert logging_model.micro_batch_rows(670_000, 256) * 670_000 * 16 <= 256 * 2**20
    assert logging_model.micro_batch_rows(10**9, 1) == 1


def test_logging_model_input_checks():
    X, Y, _ = _separable(n=20)
    with pytest.raises(TypeError, match="Y"):
        train_logging_model(X, Y.toarray(), ModelConfig(), 0.5, 0, progress=False)
    with pytest.raises(ValueError, match="rows"):
        train_logging_model(X, Y[:10], ModelConfig(), 0.5, 0, progress=False)
