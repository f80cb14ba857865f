"""What the GPU does in one batch of the batched, CUDA-graph training loop: kernels per batch, GPU time
per batch and the kernels that take it, for the trials of bench_batched_heads.py (generated data of
their shapes).

Epoch 1 is trained unprofiled (it captures the graphs); epoch 2 runs under torch.profiler with CUDA
activity (kernels replayed from CUDA graphs are traced one by one). Printed per part: the epoch's wall
seconds, its kernels' busy seconds (union of their intervals), kernels and busy milliseconds per batch,
and the top kernels by total time with their count per batch.

  python -m benchmarks.profile batched-kernels --parts grid bibtex --n-fit 40000 [--json OUT]
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def profile_part(name, cfg, spec, prep, dev, top: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    from bench_batched_heads import trial_epochs
    from orchestration.stages.gather import busy_seconds

    with trial_epochs(cfg, spec, prep, dev) as (epoch, _):
        t = time.perf_counter()
        epoch(1)
        first = time.perf_counter() - t
        with profile(activities=[ProfilerActivity.CUDA if dev.type == "cuda" else ProfilerActivity.CPU]) as prof:
            t = time.perf_counter()
            epoch(2)
            wall = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    kernels = [(float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"]) for e in events
               if e.get("ph") == "X" and e.get("cat") == "kernel"]
    batches = -(-len(prep.log_train.actions) // int(cfg.training.batch_size))
    by_name, count = collections.Counter(), collections.Counter()
    for s, e, n in kernels:
        by_name[n] += e - s
        count[n] += 1
    busy = busy_seconds([(s, e) for s, e, _ in kernels]) / 1e6
    out = {"part": name, "heads": len(spec.heads), "batches": batches, "epoch1_s": round(first, 3),
           "epoch2_wall_s": round(wall, 3), "epoch2_busy_s": round(busy, 3),
           "kernels_per_batch": round(len(kernels) / batches, 1),
           "busy_ms_per_batch": round(1e3 * busy / batches, 3),
           "wall_ms_per_batch": round(1e3 * wall / batches, 3),
           "top": [{"kernel": n[:110], "ms_per_batch": round(t / 1e3 / batches, 4),
                    "per_batch": round(count[n] / batches, 2)} for n, t in by_name.most_common(top)]}
    print(json.dumps(out, indent=1), flush=True)
    return out


def main(argv=None) -> None:
    import torch

    from bench_batched_heads import shaped_prepared
    from poxm_core.config.schema import load_config
    from poxm_core.training.command import pick_trial

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", nargs="*", default=["grid", "bibtex"])
    ap.add_argument("--n-fit", type=int, default=40000, help="grid: fit-log instances (the step's cost per batch "
                                                            "does not depend on it)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--set", nargs="*", default=[], help="config overrides for every part (key=value)")
    ap.add_argument("--device", default="cuda", help="cuda (cpu: a smoke run, no kernels to trace)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    dev = torch.device(a.device)
    res = []
    if "bibtex" in a.parts:
        prep = shaped_prepared(3904, 1836, 159, 100, 256, labels=True)
        cfg = load_config(ROOT / "configs" / "bibtex.yaml", [f"device={a.device}", "training.batched_heads=true", *a.set])
        res.append(profile_part("bibtex", cfg, pick_trial(cfg, variant="A", seed=0), prep, dev, a.top))
        del prep
    if "grid" in a.parts:
        amazon = yaml.safe_load((ROOT / "configs" / "amazon-670k.yaml").read_text())["methods"]
        prep = shaped_prepared(a.n_fit, 135909, 670091, 100, 256)
        cfg = load_config(data={
            "name": "bench-grid", "seeds": [0], "device": a.device,
            "datasets": [{"name": "synthetic", "synthetic": {"preset": "amazon670k"},
                          "variants": [{"name": "A", "alpha": 0.2, "beta": 0.0, "T": 2}]}],
            "model": {"dim": 256, "n_candidates": 100, "slate_size": 5},
            "training": {"batch_size": 256, "hidden": 128, "batched_heads": True},
            "group_by": "method", "methods": {"poxm": amazon["poxm"]}}, overrides=list(a.set))
        res.append(profile_part("grid", cfg, pick_trial(cfg, method="poxm"), prep, dev, a.top))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
