"""Seconds per training epoch with `training.batched_heads` off vs on, on whatever device it runs.

Two trials, on generated data of their shapes (the step's cost depends on the shapes, not on the
values; nothing is prepared, so this runs in minutes):

  bibtex   configs/bibtex.yaml's trial (variant A, seed 0: 23 heads, every method; its training
           settings: hidden 128, batches of 64) on Bibtex's shapes: 3,904 fit-log instances, D 1,836,
           L 159, K 100, slates of 5, d 256.
  grid     the Amazon-670K-shaped 16-head POXM grid of bench_trial.py (p in {10, 20, 50, 100} x lam in
           {0.7, 0.8, 0.9, 1.0}, plus the hidden DM reward head): L 670,091, D 135,909, K 100, d 256,
           hidden 128, batches of 256, `--n-fit` instances (default 441,404, the real fit log's size).
  banditnet, pm_banditnet
           configs/amazon-670k.yaml's BanditNet (4 heads) and PM-BanditNet (16 heads) trials, sampled
           softmax with 1,024 negatives, on the same shapes as grid.

An epoch here is what `run_trial` trains per epoch (train_epoch of every head; with a DR-POXM head the
reward model's own epoch too); no evaluation or checkpoint. Each mode builds its heads afresh from the
same seeds and trains `--epochs` epochs; the first epoch includes CUDA-graph capture, so the figure
is the median of the later ones. The process CPU seconds are printed too (on a shared CPU the wall time
mostly measures the other jobs).

  python benchmarks/bench_batched_heads.py                   # CUDA if available, full sizes
  python benchmarks/bench_batched_heads.py --small --device cpu --threads 1
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def shaped_prepared(n_fit: int, D: int, L: int, K: int, d: int, ell: int = 5, nnz: int = 60, labels: bool = False,
                    seed: int = 0):
    """A `Prepared` of the given shapes: random features, candidates (K distinct labels, popularity skewed),
    rho decreasing along C(x), slates drawn by Gumbel top-ell, Bernoulli(0.3) rewards."""
    from poxm_core.bandit.log import BanditLog
    from poxm_core.prepare.prepared import Prepared, VariantPolicy

    rng = np.random.default_rng(seed)
    n = n_fit + 2
    base = (L * rng.random(n) ** 3).astype(np.int64)                      # popular labels more often
    stride = rng.integers(1, max(2, L // K), n)
    cand = (base[:, None] + stride[:, None] * np.arange(K)) % L
    logit = -np.cumsum(rng.exponential(0.05, (n, K)), axis=1)             # decreasing: C(x) in rho order
    rho = np.exp(logit - logit.max(axis=1, keepdims=True))
    rho /= rho.sum(axis=1, keepdims=True)
    g = np.log(rho) + rng.gumbel(size=rho.shape)
    cpos = np.argsort(-g, axis=1)[:, :ell]
    r_j = np.take_along_axis(rho, cpos, axis=1)
    q = np.minimum(r_j / (1.0 - np.concatenate([np.zeros((n, 1)), np.cumsum(r_j, axis=1)[:, :-1]], axis=1)), 1.0)
    acts = np.take_along_axis(cand, cpos, axis=1)
    rew = (rng.random((n, ell)) < 0.3).astype(np.float32)
    idx = np.arange(n, dtype=np.int64)

    def log(rows):
        return BanditLog(rows, acts[rows], cpos[rows], q[rows], r_j[rows], rew[rows])

    X = sp.csr_matrix((rng.random(n * nnz).astype(np.float32), rng.integers(0, D, n * nnz),
                       np.arange(0, n * nnz + 1, nnz)), shape=(n, D))
    Y = sp.csr_matrix((np.ones(3 * n, np.float32), rng.integers(0, L, 3 * n), np.arange(0, 3 * n + 1, 3)),
                      shape=(n, L)) if labels else None
    Y1 = sp.csr_matrix((np.ones(2, np.float32), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, L))
    pol = VariantPolicy(cand.astype(np.int64), rho)
    return Prepared(dataset="shaped", variant="A", seed=0, Z_train=rng.standard_normal((n, d)).astype(np.float32),
                    Z_test=np.zeros((2, d), np.float32), W=rng.standard_normal((L, d)).astype(np.float32) * 0.01,
                    b=np.zeros(L, np.float32), policy_train=pol, policy_test=VariantPolicy(cand[:2], rho[:2]),
                    log_train=log(idx[:n_fit]), log_val=log(idx[n_fit:]), inv_propensity=np.ones(L),
                    Y_test=Y1, Y_train=Y, X_train=X, X_test=X[:2])


def _sync(dev) -> None:
    import torch
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


@contextlib.contextmanager
def trial_epochs(cfg, spec, prep, dev):
    """The trial's heads, built as run_trial builds them; yields (epoch, data): epoch(e) trains what
    run_trial trains in epoch e (the reward model's epoch first when a head needs it) and returns the
    heads' training losses."""
    import torch

    from poxm_core.training.epoch import train_data_for, train_epoch
    from poxm_core.training.trial_setup import REWARD_KEY, build_heads, deterministic, wants_deterministic

    with deterministic(wants_deterministic(cfg, dev)):
        with torch.no_grad():
            heads, _ = build_heads(cfg, spec, prep, dev)
        data = train_data_for(prep, heads, dev)
        reward = next(h for h in heads if h.key == REWARD_KEY)
        two = any(h.method.needs_reward_model for h in heads)
        others = [h for h in heads if h is not reward] if two else heads

        def epoch(e: int) -> dict:
            losses = train_epoch(cfg, spec, prep, [reward], e, dev, None, data) if two else {}
            losses.update(train_epoch(cfg, spec, prep, others, e, dev, reward, data))
            _sync(dev)
            return losses
        yield epoch, data


def epochs_seconds(cfg, spec, prep, dev, epochs: int) -> tuple[list[float], dict]:
    from poxm_core.training.epoch import engine_heads

    out, cpu, losses = [], [], {}
    with trial_epochs(cfg, spec, prep, dev) as (epoch, data):
        for e in range(1, epochs + 1):
            _sync(dev)
            t, c = time.perf_counter(), time.process_time()
            losses.update(epoch(e))
            out.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    return out, cpu, engine_heads(data), losses


def bench(name: str, cfg_of, spec_of, prep, dev, epochs: int) -> dict:
    res = {"trial": name}
    for mode in ("false", "true"):
        cfg = cfg_of(mode)
        spec = spec_of(cfg)
        secs, cpu, engine, losses = epochs_seconds(cfg, spec, prep, dev, epochs)
        later = secs[1:] or secs
        res[f"batched_{mode}"] = {"epoch_seconds": [round(s, 3) for s in secs],
                                  "median_later_s": round(statistics.median(later), 3), "heads": len(spec.heads),
                                  "epoch_process_cpu_s": [round(s, 3) for s in cpu],
                                  "engine": engine, "last_epoch_loss": losses}
        print(f"{name}: batched_heads={mode}: {len(spec.heads)} heads, s/epoch {[round(s, 2) for s in secs]} "
              f"(process CPU s {[round(s, 2) for s in cpu]})", flush=True)
    off, on = res["batched_false"]["median_later_s"], res["batched_true"]["median_later_s"]
    res["speedup"] = round(off / on, 2) if on else None
    lo, ln = res["batched_false"]["last_epoch_loss"], res["batched_true"]["last_epoch_loss"]
    res["max_rel_loss_diff"] = max(abs(lo[k] - ln[k]) / max(abs(lo[k]), 1e-12) for k in lo)
    print(f"{name}: last epoch's training losses, largest relative difference off vs on: "
          f"{res['max_rel_loss_diff']:.2e}", flush=True)
    print(f"{name}: {off:.3f} s/epoch off, {on:.3f} on: {res['speedup']}x", flush=True)
    return res


def main(argv=None) -> None:
    import torch

    from poxm_core.config.schema import load_config
    from poxm_core.training.command import pick_trial

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="small sizes (CPU): grid L 20,000, D 20,000, 4,000 instances; "
                                                         "bibtex 1,000 instances")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--n-fit", type=int, default=None, help="grid: fit-log instances (default 441,404; --small 4,000)")
    ap.add_argument("--parts", nargs="*", default=["bibtex", "grid"])
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    results = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "epochs": a.epochs,
               "small": a.small, "parts": []}
    if "bibtex" in a.parts:
        prep = shaped_prepared(1000 if a.small else 3904, 1836, 159, 100, 256, labels=True)

        def cfg_b(mode):
            return load_config(ROOT / "configs" / "bibtex.yaml", [f"device={a.device}", f"training.batched_heads={mode}"])
        results["parts"].append(bench("bibtex", cfg_b, lambda c: pick_trial(c, variant="A", seed=0), prep, dev,
                                      a.epochs))
        del prep
    amazon = yaml.safe_load((ROOT / "configs" / "amazon-670k.yaml").read_text())["methods"]
    shaped = [p for p in ("grid", "banditnet", "pm_banditnet") if p in a.parts]
    if shaped:
        L, D, n = (20000, 20000, a.n_fit or 4000) if a.small else (670091, 135909, a.n_fit or 441404)
        prep = shaped_prepared(n, D, L, 100, 256)
    for part in shaped:
        method = "poxm" if part == "grid" else part

        def cfg_g(mode, method=method):
            return load_config(data={
                "name": "bench-grid", "seeds": [0], "device": a.device,
                "datasets": [{"name": "synthetic", "synthetic": {"preset": "amazon670k"},
                              "variants": [{"name": "A", "alpha": 0.2, "beta": 0.0, "T": 2}]}],
                "model": {"dim": 256, "n_candidates": 100, "slate_size": 5},
                "training": {"batch_size": 256, "hidden": 128, "batched_heads": mode == "true"},
                "group_by": "method", "methods": {method: amazon[method]}})
        results["parts"].append(bench(f"{part} L={L}", cfg_g, lambda c, m=method: pick_trial(c, method=m), prep, dev,
                                      a.epochs))
    print(json.dumps(results, indent=1))
    if a.json:
        a.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
