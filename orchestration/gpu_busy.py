"""Where a trial's GPU time goes: a chrome trace's CUDA kernels (those replayed from CUDA graphs included)
attributed to the trial's stages (`stage::<name>` ranges: training epochs, per-epoch reports,
checkpoints, final report) by their timestamps, and their busy time (the union of their intervals).
`python -m benchmarks.profile gpu-busy` traces a trial and reads its trace with this."""
from __future__ import annotations

import bisect
import collections

from orchestration.stages.gather import busy_seconds

STAGES = ("train_epoch", "epoch_report", "save_checkpoint", "final_report")


def attribute(events: list[dict], top: int = 25) -> dict:
    """From a chrome trace's events: the kernels' busy time (the union of their intervals), overall and
    per stage, and the kernels that took longest in total. A kernel belongs to the last stage range that
    began before it: a stage's kernels may still run after its CPU range ended (the trial synchronises
    after each stage, outside the range); kernels before any stage are 'setup'."""
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
