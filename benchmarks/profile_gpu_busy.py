"""How much GPU time a trial really uses, and in which stage: a trial run by `run_trial` under
torch.profiler (CUDA kernels traced, those replayed from CUDA graphs included), its kernels' intervals
attributed to the trial's stages (training epochs, per-epoch reports, checkpoints, final report) by
their timestamps.

When several trials share a card they take turns on it, so a sweep's GPU-seconds per trial are close
to a trial's *busy* time (the union of its kernels' intervals), not to its wall time alone on the card.

  python -m benchmarks.profile gpu-busy configs/bibtex.yaml device=cuda training.batched_heads=true \
      training.epochs=3 --cache-dir DIR [--dataset D --variant V --seed S] [--top 25] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from orchestration.gpu_busy import STAGES, attribute  # noqa: E402
from trial_cli import add_trial_args, load_trial  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_trial_args(ap)
    ap.add_argument("--top", type=int, default=25, help="kernels to list by total time")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from poxm_core.training import trainer

    cfg, spec, prepared = load_trial(a)

    def ranged(name, fn):
        def wrapper(*args, **kw):
            with record_function(f"stage::{name}"):
                return fn(*args, **kw)
        return wrapper
    for name in STAGES:
        setattr(trainer, name, ranged(name, getattr(trainer, name)))

    with tempfile.TemporaryDirectory() as tmp:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            trainer.run_trial(cfg, spec, prepared, Path(tmp) / "trial", progress=False)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            wall = time.perf_counter() - t0
        timing = json.loads((Path(tmp) / "trial" / "summary.json").read_text())["timing"]
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    out = {"trial": spec.name, "wall_s": round(wall, 3), "timing": timing, **attribute(events, a.top)}
    print(json.dumps(out, indent=1))
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
