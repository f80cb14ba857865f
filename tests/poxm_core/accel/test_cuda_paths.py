"""The GPU fast paths against the plain ones (run on a machine with CUDA: `pytest -m gpu`; skipped
elsewhere, where the CPU tests cover the rest).

1. The stack's fused Triton Adam (`NetworkStack.step` on CUDA) against the same step on the CPU on the
   same gradients; the fused row and touched-rows kernels pass their first-use checks; the lazy input
   layer's sync-free step on CUDA against the eager one on the CPU.
2. The Monte-Carlo slate metrics drawn on the GPU against the exact quadrature, and invariant to chunking.
3. A small Amazon-670K-like trial with the CUDA-graph training loop and without it: the graph is captured
   (no fallback warning) and every final row agrees (measured 2026-11-26 on an H100: 2.9e-4 at most,
   the order of atomic adds).
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _rel(a, b) -> float:
    return float(((a - b).norm() / b.norm().clamp(min=1e-30)).item())


def test_fused_adam_matches_the_cpu_step():
    from poxm_core.accel import triton_adam
    from poxm_core.policy.stack import NetworkStack

    dev, cpu = torch.device("cuda"), torch.device("cpu")
    assert triton_adam.dense_kernel_ok(dev)
    assert triton_adam.row_kernel_ok(dev) is True and triton_adam.touched_rows_kernel_ok(dev)
    stacks = [NetworkStack(5000, 16, 32, ["fresh"] * 3, [torch.Generator().manual_seed(i) for i in range(3)],
                           [5e-3, 5e-3, 1e-3], 0.0, d) for d in (cpu, dev)]
    g = torch.Generator().manual_seed(0)
    grads = [{n: torch.randn(p.shape, generator=g) for n, p in stacks[0].named_parameters()} for _ in range(5)]
    for st in stacks:
        for gr in grads:
            for n, p in st.named_parameters():
                p.grad = gr[n].to(p.device)
            st.step()
    on_gpu = dict(stacks[1].named_parameters())
    for n, p in stacks[0].named_parameters():
        if p.numel():
            assert _rel(on_gpu[n].cpu(), p) < 1e-5, n
            for a, b in zip(stacks[0].moments[n], stacks[1].moments[n]):
                assert _rel(b.cpu(), a) < 1e-5, n


def test_lazy_input_step_on_cuda_matches_the_eager_cpu_step():
    import scipy.sparse as sp

    from poxm_core.model.core import csr_to_bag
    from poxm_core.policy.stack import NetworkStack

    dev, cpu = torch.device("cuda"), torch.device("cpu")
    D, H, h, n = 5000, 3, 32, 256
    X = sp.random(n, D, density=20 / D, format="csr", random_state=0, dtype=np.float32)
    stacks = {d: NetworkStack(D, 8, h, ["fresh"] * H, [torch.Generator().manual_seed(i) for i in range(H)],
                              [5e-3, 5e-3, 1e-3], 1e-4, d, input_adam="lazy") for d in (cpu, dev)}
    tg = torch.randn(n, H * h, generator=torch.Generator().manual_seed(1))
    rng = np.random.default_rng(2)
    for _ in range(4):
        rows = np.sort(rng.choice(n, 64, replace=False))
        for d, st in stacks.items():
            idx, off, w = csr_to_bag(X[rows], d)
            if d.type == "cuda":        # the graph's padded bags and sync-free step
                pad = 100
                idx = torch.cat([idx, torch.zeros(pad, dtype=idx.dtype, device=d)])
                w = torch.cat([w, torch.zeros(pad, dtype=w.dtype, device=d)])
                bag_of = torch.searchsorted(off, torch.arange(idx.numel(), device=d), right=True) - 1
                out = st(torch.zeros(64, 8, device=d), (idx, off, w, bag_of), static=True)
            else:
                out = st(torch.zeros(64, 8), (idx, off, w))
            (torch.tanh(out) * tg[rows].to(d)).sum().backward()
            st.step()
    a, b = stacks[cpu], stacks[dev]
    for x, y in [(b.V, a.V), (b.moments["V"][0], a.moments["V"][0]), (b.moments["V"][1], a.moments["V"][1])]:
        assert _rel(x.cpu(), y) < 1e-5


def test_monte_carlo_metrics_on_the_gpu_match_the_exact_quadrature():
    import scipy.sparse as sp

    from poxm_core.metrics.ranking import stochastic_metrics

    rng = np.random.default_rng(0)
    n, L, m = 3000, 2000, 200
    support = np.stack([rng.choice(L, m, replace=False) for _ in range(n)])
    logits = rng.normal(size=(n, m)) * 2
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    rows = [np.unique(np.concatenate([support[i, rng.integers(0, m, 3)], rng.integers(0, L, 3)])) for i in range(n)]
    Y = sp.csr_matrix((np.ones(sum(map(len, rows))), np.concatenate(rows), np.cumsum([0] + [len(r) for r in rows])),
                      shape=(n, L))
    inv = 1.0 + rng.random(L)
    exact = stochastic_metrics(Y, support, probs, inv, exact_budget=n * m)
    mc = stochastic_metrics(Y, support, probs, inv, n_slates=64, seed=1, exact_budget=0, device="cuda")
    again = stochastic_metrics(Y, support, probs, inv, n_slates=64, seed=1, exact_budget=0, device="cuda",
                               chunk_elems=64 * m * 64)
    for k in mc:
        if not k.endswith("_se") and not k.endswith("@1"):
            assert abs(mc[k] - exact[k]) < 5 * mc[f"{k}_se"], k
        assert abs(mc[k] - again[k]) <= 1e-12 * max(1.0, abs(mc[k])), k


def _small_amazon_config(runs: Path) -> Path:
    import yaml
    cfg = {"name": "cuda-paths", "seeds": [0], "device": "cuda", "runs_dir": str(runs),
           "datasets": [{"name": "synthetic", "synthetic": {"preset": "amazon670k", "scale": 1.0, "n_train": 20000,
                                                            "n_test": 4000, "n_labels": 20000},
                         "variants": [{"name": "A", "alpha": 0.2, "beta": 0.0, "T": 2}]}],
           "model": {"dim": 256, "epochs": 1, "n_candidates": 100, "slate_size": 5},
           "training": {"epochs": 2, "batch_size": 256, "hidden": 128, "mc_slates": 32, "checkpoint_every": 2},
           "group_by": "method", "methods": {"poxm": {"p": [10, 100], "lam": [0.9]}}}
    path = runs / "cuda-paths.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_cuda_graph_training_loop_matches_the_eager_one(tmp_path, monkeypatch):
    from poxm_core.config.schema import load_config
    from poxm_core.prepare.pipeline import load_prepared
    from poxm_core.training.command import pick_trial
    from poxm_core.training.trainer import run_trial

    cfg = load_config(_small_amazon_config(tmp_path))
    spec = pick_trial(cfg, method="poxm")
    prep = load_prepared(cfg, spec.dataset, spec.variant, spec.seed, tmp_path / "cache")
    finals = {}
    for flag in ("0", "1"):
        monkeypatch.setenv("POXM_CUDA_GRAPHS", flag)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            df = run_trial(cfg, spec, prep, tmp_path / f"graphs-{flag}", progress=False)
        assert not [w for w in caught if "graph" in str(w.message)], "the CUDA graph fell back"
        fin = df[df["final"]].copy()
        fin["p"] = fin["p"].fillna(-1)
        finals[flag] = fin.set_index(["method", "p", "lam", "split", "metric"])["value"].sort_index()
    eager, graph = finals["0"], finals["1"]
    assert list(eager.index) == list(graph.index)
    rel = ((eager - graph).abs() / eager.abs().clip(lower=1e-3)).max()
    assert rel < 5e-3, f"largest relative difference of a final row {rel:.2e}"
