"""Where a P3 trial's time goes on the GPU: training batches (torch.profiler) and evaluation stages.

Builds the Amazon-670K-shaped data of bench_trial.py (prepare not timed), then for the single-head trial
(poxm p 100, lam 0.9, plus the hidden DM reward head) and the 16-head grid:

  - ms per training batch over `--batches` batches (synchronised), and a torch.profiler table of
    `--prof-batches` batches (self CUDA time and CPU time by op, kernel launches per batch);
  - the evaluation stages of one head: epoch validation estimates, test_table, greedy and stochastic
    test metrics, V_true (host-side cProfile of the final report);
  - the grid's per-epoch validation estimates (16 heads).

  python -m benchmarks.profile trial --out $OUT [--model-epochs 1] [--parts single grid eval]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _sync():
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _setup(a, poxm):
    import torch

    from bench_trial import _config
    from poxm_core.config.schema import load_config
    from poxm_core.model.core import resolve_device
    from poxm_core.prepare.pipeline import load_prepared
    from poxm_core.training.command import pick_trial
    from poxm_core.training.epoch import train_data_for
    from poxm_core.training.trial_setup import build_heads

    cfg = load_config(_config(Path(a.runs), poxm, a.model_epochs, 10), list(a.override))
    spec = pick_trial(cfg, method="poxm")
    t = time.perf_counter()
    prep = load_prepared(cfg, spec.dataset, spec.variant, spec.seed, Path(a.runs) / "cache")
    print(f"load/prepare {time.perf_counter() - t:.1f} s", flush=True)
    dev = resolve_device(cfg.device)
    with torch.no_grad():
        heads, stacks = build_heads(cfg, spec, prep, dev)
    data = train_data_for(prep, heads, dev)
    return cfg, spec, prep, dev, heads, stacks, data


def _train(a, name, cfg, spec, prep, dev, heads, data, log):
    from torch.profiler import ProfilerActivity, profile

    from poxm_core.training.epoch import train_epoch

    n_full = data.n
    B = cfg.training.batch_size
    data.n = min(n_full, B * 20)
    train_epoch(cfg, spec, prep, heads, 1, dev, None, data)          # warm-up
    _sync()
    data.n = min(n_full, B * a.batches)
    t = time.perf_counter()
    train_epoch(cfg, spec, prep, heads, 2, dev, None, data)
    _sync()
    ms = (time.perf_counter() - t) * 1e3 / a.batches
    log(f"[{name}] {ms:.2f} ms per batch over {a.batches} batches (B {B}); full epoch would be "
        f"{ms * n_full / B / 1e3:.1f} s ({n_full} fit instances)")
    data.n = min(n_full, B * a.prof_batches)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        train_epoch(cfg, spec, prep, heads, 3, dev, None, data)
        _sync()
    ka = prof.key_averages()
    log(f"[{name}] by self CUDA time ({a.prof_batches} batches)")
    log(ka.table(sort_by="self_cuda_time_total", row_limit=30, max_name_column_width=60))
    log(f"[{name}] by CPU total time")
    log(ka.table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=60))
    kernels = sum(e.count for e in ka if e.device_type.name == "CUDA")
    log(f"[{name}] CUDA kernels per batch: {kernels / a.prof_batches:.0f}")
    data.n = n_full


def _eval(a, cfg, spec, prep, dev, heads, data, log, name):
    from poxm_core.metrics.ranking import greedy_metrics
    from poxm_core.common.seeds import stable_seed
    from poxm_core.training import reporting as R
    from poxm_core.training.evaluation import test_table

    ev = R.EvalInputs(prep, dev, Z_train=data.Z, X_train=data.X)
    ev.prefetch_sparse()
    visible = [h for h in heads if not h.hidden]
    reward = next(h for h in heads if h.key == R.REWARD_KEY) if hasattr(R, "REWARD_KEY") else None
    from poxm_core.training.trial_setup import REWARD_KEY
    reward = next(h for h in heads if h.key == REWARD_KEY)
    t = time.perf_counter()
    R.epoch_report(spec, visible, {h.key: 0.0 for h in heads}, ev, 1)
    _sync()
    log(f"[{name}] epoch_report ({len(visible)} heads): {time.perf_counter() - t:.2f} s")
    if name != "single":
        t = time.perf_counter()
        R.final_report(cfg, spec, visible, reward, ev, 10)
        _sync()
        log(f"[{name}] final_report ({len(visible)} heads): {time.perf_counter() - t:.2f} s")
        return
    h = visible[0]
    t = time.perf_counter()
    R.val_estimates(h, ev, reward)
    log(f"[{name}] val_estimates with DR: {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    feats = ev.features(h, "test")
    _sync()
    log(f"[{name}] test features: {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    sup, probs, ranking, lost = test_table(h.view(), feats, prep.policy_test.cand, prep.policy_test.rho, 5,
                                           cfg.training.eval_max_support, dev)
    log(f"[{name}] test_table: {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    g = greedy_metrics(prep.Y_test, ranking, prep.inv_propensity, R.KS)
    log(f"[{name}] greedy_metrics: {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    R._stochastic(prep.Y_test, sup, probs, {k: (v, 0) for k, v in g.items()}, prep.inv_propensity, R.KS,
                  cfg.training.mc_slates, stable_seed(spec.seed, h.key, "test-slates"))
    log(f"[{name}] stochastic_metrics, NumPy (test, {sup.shape}): {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    pr = cProfile.Profile()
    pr.enable()
    R._stochastic(prep.Y_test, sup, probs, {k: (v, 0) for k, v in g.items()}, prep.inv_propensity, R.KS,
                  cfg.training.mc_slates, stable_seed(spec.seed, h.key, "test-slates"), ev.gpu)
    _sync()
    pr.disable()
    log(f"[{name}] stochastic_metrics, on {ev.gpu} (a GPU trial's path): {time.perf_counter() - t:.2f} s")
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(15)
    log(s.getvalue())
    t = time.perf_counter()
    R.val_truth(cfg, spec, h, ev)
    log(f"[{name}] val_truth: {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    R.final_report(cfg, spec, visible, reward, ev, 10)
    log(f"[{name}] final_report: {time.perf_counter() - t:.2f} s")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/profile-trial")
    ap.add_argument("--runs", default="/tmp/bench-trial-runs")
    ap.add_argument("--model-epochs", type=int, default=2)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--prof-batches", type=int, default=30)
    ap.add_argument("--override", nargs="*", default=[], help="config overrides (CPU smoke test: device=cpu ...)")
    ap.add_argument("--parts", nargs="*", default=["single", "eval", "grid"])
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    f = open(out / "profile.txt", "a")

    def log(s):
        print(s, flush=True)
        f.write(s + "\n")
        f.flush()

    import torch
    log(f"card {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu'}, torch {torch.__version__}")
    if "single" in a.parts or "eval" in a.parts:
        cfg, spec, prep, dev, heads, stacks, data = _setup(a, {"p": [100], "lam": [0.9]})
        if "single" in a.parts:
            _train(a, "single", cfg, spec, prep, dev, heads, data, log)
        if "eval" in a.parts:
            _eval(a, cfg, spec, prep, dev, heads, data, log, "single")
        del heads, stacks, data
        torch.cuda.empty_cache()
    if "grid" in a.parts:
        from bench_trial import GRID
        cfg, spec, prep, dev, heads, stacks, data = _setup(a, GRID)
        _train(a, "grid", cfg, spec, prep, dev, heads, data, log)
        _eval(a, cfg, spec, prep, dev, heads, data, log, "grid")


if __name__ == "__main__":
    main()
