"""The same trials through `poxm run` and as plain `poxm train` processes, side by side on one machine.

    python benchmarks/sweep_vs_plain.py CONFIG [key=value ...] --runs-dir DIR [--json OUT] [--perf PERF.json]

Both sides train the trials of CONFIG (with the overrides) from ONE prepared cache, made first by
`poxm prepare` (not timed on either side):

- sweep: `poxm run CONFIG ... --runs-dir DIR/sweep --cache-dir DIR/cache`, its wall time from start to exit
  (Ray start-up, the trials, gather, selection and the report included: what the product does);
- plain: a queue of `poxm train CONFIG ... --dataset D --variant V --seed S --cache-dir DIR/cache` processes,
  as many at a time as the sweep's slots (1 / resources.gpus_per_trial a card, each process pinned to a
  card by CUDA_VISIBLE_DEVICES; on a CPU machine cores / resources.cpus_per_trial), each with
  resources.cpus_per_trial CPU threads as a sweep's trial has (OMP_NUM_THREADS, MKL_NUM_THREADS), its wall
  time from the first start to the last exit (what a user's shell loop does; no report).

Printed and written (--json): both wall times, `gpu_sweep_vs_plain_throughput` = plain wall / sweep wall
(1.0: the orchestration costs nothing; the target is >= 0.85; `cpu_...` when the config's device is cpu),
and the sweep's orchestration share
(benchmarks/orchestration_share.py: the share of the sweep's wall time with no trial computing).
--perf merges both figures into docs/benchmarks/perf.json (card, GPU count, date, commit, command).
When resources.mps is true, one MPS daemon serves both sides (started here if none runs).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))



def _poxm(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestration.cli", *args]


def _trials(config: str, overrides: list[str]):
    from orchestration.stages.plan import plan_sweep
    from poxm_core.config.schema import load_config

    cfg = load_config(config, overrides)
    return cfg, plan_sweep(cfg, tempfile.mkdtemp(prefix="svp-plan-"), check_data=False).specs


def _slots(cfg) -> tuple[int, list[str | None]]:
    """(processes at a time, the card each slot pins), as the sweep packs its trials."""
    if cfg.device == "cuda":
        import torch

        n = torch.cuda.device_count()
        per = max(1, int(round(1.0 / float(cfg.resources.gpus_per_trial or 1.0))))
        return n * per, [str(k % n) for k in range(n * per)]
    per = max(1, (os.cpu_count() or 1) // max(1, int(cfg.resources.cpus_per_trial or 1)))
    return per, [None] * per


def run_plain(config: str, overrides: list[str], specs, cache: Path, out: Path, slots: list[str | None],
              threads: int) -> float:
    """Wall seconds of the trials as `poxm train` processes, len(slots) at a time, each with `threads`
    CPU threads (OMP/MKL: what the sweep gives a trial, resources.cpus_per_trial; left at torch's default,
    processes side by side oversubscribe the cores: on 2 cores, 2.2 times slower than the sweep)."""
    queue = list(specs)
    running: dict[int, tuple[subprocess.Popen, object]] = {}
    t0 = time.perf_counter()
    failed = []
    while queue or running:
        for k in range(len(slots)):
            if k not in running and queue:
                s = queue.pop(0)
                env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
                if slots[k] is not None:
                    env["CUDA_VISIBLE_DEVICES"] = slots[k]
                log = open(out / f"{s.name}.log", "w")
                methods = {h.method for h in s.heads}
                one = ["--method", methods.pop()] if len(methods) == 1 else []   # group_by: method
                cmd = _poxm("train", config, *overrides, "--dataset", s.dataset, "--variant", s.variant,
                            "--seed", str(s.seed), *one, "--out", str(out / s.name), "--cache-dir", str(cache))
                running[k] = (subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT), (s, log))
        time.sleep(0.2)
        for k, (proc, (s, log)) in list(running.items()):
            if proc.poll() is not None:
                log.close()
                if proc.returncode != 0:
                    failed.append(s.name)
                del running[k]
    wall = time.perf_counter() - t0
    if failed:
        raise SystemExit(f"plain: {len(failed)} trial(s) failed ({', '.join(failed[:3])}); logs in {out}")
    return wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("overrides", nargs="*", help="config overrides, the same for both sides")
    ap.add_argument("--runs-dir", required=True, help="an empty folder: cache/, sweep/, plain/ go there")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--perf", help="merge the figures into this perf.json")
    a = ap.parse_args(argv)
    base = Path(a.runs_dir).resolve()
    cache, sweep_dir, plain_dir = base / "cache", base / "sweep", base / "plain"
    for d in (cache, sweep_dir, plain_dir):
        d.mkdir(parents=True, exist_ok=True)
    cfg, specs = _trials(a.config, a.overrides)
    n_slots, slots = _slots(cfg)
    print(f"{len(specs)} trials, {n_slots} at a time; device {cfg.device}", flush=True)

    t = time.perf_counter()
    subprocess.run(_poxm("prepare", a.config, *a.overrides, "--cache-dir", str(cache)), check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    prepare_s = time.perf_counter() - t
    print(f"prepare  {prepare_s:7.1f} s (shared cache, not timed below)", flush=True)

    from contextlib import nullcontext

    from orchestration.cluster.mps import mps_for_sweep
    mps = mps_for_sweep(cfg.device, bool(cfg.resources.mps), True, say=lambda m: None) \
        if cfg.device == "cuda" else nullcontext()
    with mps:
        t = time.perf_counter()
        subprocess.run(_poxm("run", a.config, *a.overrides, "--runs-dir", str(sweep_dir), "--cache-dir", str(cache)),
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        sweep_s = time.perf_counter() - t
        print(f"sweep    {sweep_s:7.1f} s (poxm run: Ray, trials, gather, report)", flush=True)
        plain_s = run_plain(a.config, a.overrides, specs, cache, plain_dir, slots,
                            threads=max(1, int(cfg.resources.cpus_per_trial or 1)))
        print(f"plain    {plain_s:7.1f} s ({len(specs)} poxm train processes, {n_slots} at a time)", flush=True)
    run_dir = next(p for p in sweep_dir.iterdir() if (p / "sweep.json").exists())
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from orchestration_share import share as orchestration_share
    share = float(orchestration_share(run_dir)["orchestration_share"])
    ratio = plain_s / sweep_s
    kind = "gpu" if cfg.device == "cuda" else "cpu"     # the targets are the GPU's; a CPU run is named apart
    print(f"{kind}_sweep_vs_plain_throughput {ratio:.3f} (GPU target >= 0.85); orchestration share {share:.3f} "
          "(GPU target <= 0.10)", flush=True)
    card = "cpu"
    if cfg.device == "cuda":
        import torch
        card = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or None
    common = {"card": card, "gpus": len({s for s in slots if s is not None}), "date": dt.date.today().isoformat(),
              "commit": commit, "trials": len(specs), "slots": n_slots,
              "command": "python benchmarks/sweep_vs_plain.py " + " ".join([a.config, *a.overrides])
              + " --runs-dir <new folder>"}
    figures = {f"{kind}_sweep_vs_plain_throughput": {"value": round(ratio, 3), "target": ">= 0.85",
                                                    "sweep_seconds": round(sweep_s, 1), "plain_seconds": round(plain_s, 1),
                                                    "prepare_seconds": round(prepare_s, 1), **common},
               f"{kind}_orchestration_share": {"value": round(share, 3), "target": "<= 0.10", **common}}
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=1) + "\n")
    if a.perf:
        from poxm_core.common.atomic import write_text
        perf = json.loads(Path(a.perf).read_text())
        perf.update(figures)
        write_text(Path(a.perf), json.dumps(perf, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
