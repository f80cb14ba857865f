"""Prepare-stage timings on the synthetic Amazon-670K preset (L = 670,091 labels, D = 135,909 features):
logging model, encoder outputs, chunked top-K candidates, variant, bandit log, logging-policy metrics.

    .venv/bin/python benchmarks/bench_prepare.py --scale 0.02 --device cpu
    .venv/bin/python benchmarks/bench_prepare.py --scale 1.0 --device cuda        # the full preset, on a GPU

`--scale` shrinks N (not D or L), as the config's synthetic.scale does. Prints seconds per stage, peak RSS
(getrusage, the whole process so far) and, on CUDA, torch.cuda.max_memory_allocated per stage. Writes nothing.
"""
from __future__ import annotations

import argparse
import resource
import time

import torch

from poxm_core.bandit import build_variant, name_code, simulate_log, validation_split
from poxm_core.config.schema import ModelConfig, SyntheticConfig
from poxm_core.data import inverse_propensities, synthetic_from_config
from poxm_core.metrics.ranking import covering_curve, greedy_metrics, stochastic_metrics
from poxm_core.model import chunked_topk, encode, resolve_device, train_logging_model


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class Stages:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.rows: list[tuple[str, float, float, float]] = []

    def run(self, name: str, fn, *args, **kw):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        out = fn(*args, **kw)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t
        gpu = torch.cuda.max_memory_allocated() / 2**20 if self.device.type == "cuda" else float("nan")
        self.rows.append((name, dt, _peak_rss_mib(), gpu))
        print(f"{name:<34s} {dt:9.2f} s   peak RSS {_peak_rss_mib():9.0f} MiB   GPU peak {gpu:9.0f} MiB", flush=True)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=0.02, help="fraction of the preset's N_train / N_test")
    ap.add_argument("--device", default="auto", help="cpu | cuda | auto")
    ap.add_argument("--alpha", type=float, default=0.2, help="logging model's share of training rows (paper: 0.2)")
    ap.add_argument("--beta", type=float, default=0.0)
    ap.add_argument("--T", type=float, default=2.0)
    ap.add_argument("--epochs", type=int, default=None, help="logging-model epochs (default: ModelConfig)")
    ap.add_argument("--dim", type=int, default=None, help="encoder width d (default: ModelConfig)")
    ap.add_argument("--chunk-mb", type=int, default=None, help="top-k / micro-batch budget in MiB (default: ModelConfig)")
    ap.add_argument("--mc-slates", type=int, default=8, help="Monte-Carlo slates per test instance for R@k")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    dev = resolve_device(a.device)
    base = ModelConfig()
    mcfg = ModelConfig(**{**base.model_dump(), **{k: v for k, v in (("epochs", a.epochs), ("dim", a.dim),
                                                                     ("topk_chunk_mb", a.chunk_mb)) if v is not None}})
    print(f"device {dev} ({torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'CPU'}), "
          f"torch threads {torch.get_num_threads()}, scale {a.scale}, model {mcfg.model_dump()}")
    st = Stages(dev)
    data = st.run("generate synthetic amazon670k", synthetic_from_config,
                  SyntheticConfig(preset="amazon670k", scale=a.scale), a.seed)
    s = data.stats()
    print(f"  N_train {s['N_train']}  N_test {s['N_test']}  D {s['D']}  L {s['L']}  "
          f"nnz X_train {data.train.X.nnz}")
    inv = inverse_propensities(data.train.Y, 0.6, 2.6)
    fit, val = validation_split(data.train.n, 0.1, a.seed)
    model = st.run(f"logging model ({mcfg.epochs} epochs)", train_logging_model, data.train.X, data.train.Y, mcfg,
                   a.alpha, a.seed, dev, progress=False, rows=fit)
    Ztr = st.run("encode train", encode, model, data.train.X, dev)
    Zte = st.run("encode test", encode, model, data.test.X, dev)
    W, b = model.head_arrays()
    K = min(mcfg.n_candidates, W.shape[0])
    ctr, str_ = st.run(f"top-{K} candidates train", chunked_topk, Ztr, W, b, K, mcfg.topk_chunk_mb, dev)
    cte, ste = st.run(f"top-{K} candidates test", chunked_topk, Zte, W, b, K, mcfg.topk_chunk_mb, dev)
    key = name_code("A")
    ptr = st.run("variant rho train", build_variant, ctr, str_, a.beta, a.T, (a.seed, key, 0))
    pte = st.run("variant rho test", build_variant, cte, ste, a.beta, a.T, (a.seed, key, 1))
    log = st.run("bandit log (fit rows)", simulate_log, ptr, data.train.Y, fit, mcfg.slate_size, (a.seed, key))
    st.run("bandit log (val rows)", simulate_log, ptr, data.train.Y, val, mcfg.slate_size, (a.seed, key))
    g = st.run("greedy P@k of the logging model", greedy_metrics, data.test.Y, cte[:, :5], inv)
    r = st.run(f"stochastic R@k ({a.mc_slates} slates)", stochastic_metrics, data.test.Y, pte.cand, pte.rho, inv,
               (1, 3, 5), a.mc_slates, a.seed)
    cov = st.run("covering curve (test)", covering_curve, data.test.Y, pte.cand)
    total = sum(row[1] for row in st.rows)
    print(f"total {total:.1f} s; peak RSS {_peak_rss_mib():.0f} MiB")
    print(f"logging model P@1/3/5 = {100 * g['P@1']:.2f} / {100 * g['P@3']:.2f} / {100 * g['P@5']:.2f}; "
          f"logging policy R@1/3/5 = {100 * r['R@1']:.2f} / {100 * r['R@3']:.2f} / {100 * r['R@5']:.2f}; "
          f"cover@5/20/100 = {100 * cov[4]:.1f} / {100 * cov[min(19, K - 1)]:.1f} / {100 * cov[-1]:.1f}; "
          f"log reward rate {log.rewards.mean():.3f}")


if __name__ == "__main__":
    main()
