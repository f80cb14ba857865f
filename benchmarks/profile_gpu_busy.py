"""How much GPU time a trial really uses, and in which stage: a trial run by `run_trial` under
torch.profiler (CUDA kernels traced, those replayed from CUDA graphs included), its kernels' intervals
attributed to the trial's stages (training epochs, per-epoch reports, checkpoints, final report) by
their timestamps.

When several trials share a card they take turns on it, so a sweep's GPU-seconds per trial are close
to a trial's *busy* time (the union of its kernels' intervals), not to its wall time alone on the card.

  python benchmarks/profile_gpu_busy.py configs/bibtex.yaml device=cuda training.batched_heads=true \
      training.epochs=3 --cache-dir DIR [--dataset D --variant V --seed S] [--top 25] [--json OUT]
"""
from __future__ import annotations

import argparse
import bisect
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from trial_cli import add_trial_args, load_trial  # noqa: E402

STAGES = ("train_epoch", "epoch_report", "save_checkpoint", "final_report")


def attribute(events: list[dict], top: int = 25) -> dict:
    """From a chrome trace's events: the kernels' busy time (the union of their intervals), overall and
    per stage, and the kernels that took longest in total. A kernel belongs to the last stage range that
    began before it: a stage's kernels may still run after its CPU range ended (the trial synchronises
    after each stage, outside the range); kernels before any stage are 'setup'."""
    from orchestration.stages.gather import busy_seconds

    kernels, ranges = [], []     # in microseconds
    for e in events:
        if e.get("ph") != "X":
            continue
        if e.get("cat") == "kernel":
            kernels.append((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"]))
        elif e.get("cat") == "user_annotation" and e["name"].startswith("stage::"):
            ranges.append((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"][7:]))
    ranges.sort()
    starts = [r[0] for r in ranges]
    by_stage = collections.defaultdict(list)
    by_name, count = collections.Counter(), collections.Counter()
    for s, e, n in kernels:
        i = bisect.bisect_right(starts, s) - 1
        by_stage[ranges[i][2] if i >= 0 else "setup"].append((s, e))
        by_name[n] += e - s
        count[n] += 1
    return {"gpu_busy_s": round(busy_seconds([(s, e) for s, e, _ in kernels]) / 1e6, 3), "kernels": len(kernels),
            "stages": {k: {"busy_s": round(busy_seconds(v) / 1e6, 3), "kernels": len(v),
                           "wall_s": round(sum(b - a for a, b, r in ranges if r == k) / 1e6, 3)}
                       for k, v in sorted(by_stage.items())},
            "top": [{"kernel": n[:90], "s": round(t / 1e6, 4), "n": count[n]} for n, t in by_name.most_common(top)]}


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
