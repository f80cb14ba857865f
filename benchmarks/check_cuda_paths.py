"""GPU checks of the fast paths (run on the GPU machine; the CPU tests cover the rest).

1. The stack's fused Triton Adam (`NetworkStack.step` on CUDA) against the same step on the CPU (torch ops) on the same
   gradients: the parameters and moments after several steps agree within float tolerance; the
   fused row Adam of the output layers (`accel.triton_adam`) passes its first-use check against the
   plain update.
2. A small Amazon-670K-like trial (synthetic preset amazon670k, cut by --n-train/--n-labels) with the
   CUDA-graph training loop (POXM_CUDA_GRAPHS=1) and without it (=0): final rows agree within a
   tolerance (atomic-add order and the Monte-Carlo metrics' draws are the only differences), the graph
   was captured (no fallback warning), and the training seconds of both.
3. The Monte-Carlo slate metrics drawn on the GPU against the exact quadrature (`check_metrics`).

  python benchmarks/check_cuda_paths.py --out $OUT
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def check_adam() -> dict:
    import torch

    from poxm_core.accel import triton_adam
    from poxm_core.policy.stack import NetworkStack

    dev = torch.device("cuda")
    out = {"triton": triton_adam.dense_kernel_ok(dev)}
    cpu = torch.device("cpu")
    stacks = [NetworkStack(5000, 16, 32, ["fresh"] * 3, [torch.Generator().manual_seed(i) for i in range(3)],
                           [5e-3, 5e-3, 1e-3], 0.0, d) for d in (cpu, dev)]
    g = torch.Generator().manual_seed(0)
    grads = [{n: torch.randn(p.shape, generator=g) for n, p in stacks[0].named_parameters()} for _ in range(5)]
    for st in stacks:
        for gr in grads:
            for n, p in st.named_parameters():
                p.grad = gr[n].to(p.device)
            st.step()
    err = 0.0
    for n, p in stacks[0].named_parameters():
        q = dict(stacks[1].named_parameters())[n].cpu()
        if p.numel():
            err = max(err, float(((p - q).norm() / p.norm()).item()))
            for a, b in zip(stacks[0].moments[n], stacks[1].moments[n]):
                err = max(err, float(((a - b.cpu()).norm() / a.norm().clamp(min=1e-30)).item()))
    out["max_rel_err"] = err
    try:
        out["row_kernel_self_check"] = bool(triton_adam.row_kernel_ok(dev))
    except Exception as exc:   # noqa: BLE001
        out["row_kernel_self_check"] = f"{type(exc).__name__}: {exc}"[:300]
    out["touched_kernel_self_check"] = bool(triton_adam.touched_rows_kernel_ok(dev))
    out["lazy_input"] = check_lazy_input()
    out["ok"] = (err < 1e-5 and out["row_kernel_self_check"] is True and out["touched_kernel_self_check"]
                 and out["lazy_input"]["ok"])
    return out


def check_lazy_input() -> dict:
    """The lazy input layer on CUDA (the graph's sync-free step, the fused lazy-rows kernel) against the
    same stack on the CPU (the eager step, torch ops): 4 steps of random batches with padded bags."""
    import numpy as np
    import scipy.sparse as sp
    import torch

    from poxm_core.accel import triton_adam
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
            if d.type == "cuda":
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
    err = max(float(((x.cpu() - y).norm() / y.norm().clamp(min=1e-30)).item())
              for x, y in [(b.V, a.V), (b.moments["V"][0], a.moments["V"][0]), (b.moments["V"][1], a.moments["V"][1])])
    kernel = bool(triton_adam.touched_rows_kernel_ok(dev))
    return {"fused_kernel": kernel, "max_rel_err_vs_cpu": err, "ok": kernel and err < 1e-5}


def check_trial(a) -> dict:
    import torch

    from bench_trial import _config
    from poxm_core.config.schema import load_config
    from poxm_core.prepare.pipeline import load_prepared
    from poxm_core.training.command import pick_trial
    from poxm_core.training.trainer import run_trial

    over = [f"datasets.0.synthetic.n_train={a.n_train}", f"datasets.0.synthetic.n_test={a.n_test}",
            f"datasets.0.synthetic.n_labels={a.n_labels}"]
    cfg = load_config(_config(Path(a.runs), {"p": [10, 100], "lam": [0.9]}, 1, a.epochs), over)
    spec = pick_trial(cfg, method="poxm")
    t = time.perf_counter()
    prep = load_prepared(cfg, spec.dataset, spec.variant, spec.seed, Path(a.runs) / "cache")
    res = {"prepare_s": time.perf_counter() - t, "n_fit": int(prep.log_train.n)}
    frames = {}
    for flag in ("0", "1"):
        os.environ["POXM_CUDA_GRAPHS"] = flag
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t = time.perf_counter()
            df = run_trial(cfg, spec, prep, Path(a.runs) / f"check-{flag}", progress=False)
            sec = time.perf_counter() - t
        summ = json.loads((Path(a.runs) / f"check-{flag}" / "summary.json").read_text())
        res[f"graphs_{flag}"] = {"seconds": sec, "timing": summ["timing"],
                                 "warnings": [str(w.message)[:300] for w in caught if "graph" in str(w.message)]}
        fin = df[df["final"]].copy()
        fin["p"] = fin["p"].fillna(-1)
        frames[flag] = fin.set_index(["method", "p", "lam", "split", "metric"])["value"].sort_index()
    x, y = frames["0"], frames["1"]
    diff = (x - y).abs()
    rel = diff / x.abs().clip(lower=1e-3)
    worst = rel.sort_values(ascending=False).head(8)
    res["max_rel_diff"] = float(rel.max())
    res["worst"] = {"/".join(map(str, k)): [float(x[k]), float(y[k])] for k in worst.index}
    res["test_R@5"] = {"/".join(map(str, k[:3])): [float(x[k]), float(y[k])] for k in x.index if k[3:] == ("test", "R@5")}
    return res


DEVICE = "cuda"


def check_metrics() -> dict:
    """The Monte-Carlo slate metrics on the GPU (torch's draws) against the exact quadrature on one
    policy table: every metric within 5 of its standard error, and the same values again from a
    smaller chunking (the draws are a function of the seed and row block only)."""
    import numpy as np
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
    mc = stochastic_metrics(Y, support, probs, inv, n_slates=64, seed=1, exact_budget=0, device=DEVICE)
    again = stochastic_metrics(Y, support, probs, inv, n_slates=64, seed=1, exact_budget=0, device=DEVICE,
                               chunk_elems=64 * m * 64)
    z = {k: (mc[k] - exact[k]) / mc[f"{k}_se"] for k in mc if not k.endswith("_se") and not k.endswith("@1")}
    return {"max_abs_z": max(abs(v) for v in z.values()), "z": z, "ok": max(abs(v) for v in z.values()) < 5,
            "chunking_invariant": all(abs(mc[k] - again[k]) <= 1e-12 * max(1.0, abs(mc[k])) for k in mc)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/check-cuda")
    ap.add_argument("--runs", default="/tmp/check-cuda-runs")
    ap.add_argument("--n-train", type=int, default=60000)
    ap.add_argument("--n-test", type=int, default=10000)
    ap.add_argument("--n-labels", type=int, default=100000)
    ap.add_argument("--epochs", type=int, default=3)
    a = ap.parse_args(argv)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    res = {}
    for name, fn in (("adam", check_adam), ("metrics", check_metrics), ("trial", lambda: check_trial(a))):
        try:
            res[name] = fn()
        except Exception as exc:   # noqa: BLE001
            import traceback
            traceback.print_exc()
            res[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(name, json.dumps(res[name], default=float), flush=True)
    (Path(a.out) / "check_cuda_paths.json").write_text(json.dumps(res, indent=1, default=float))


if __name__ == "__main__":
    main()
