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
(benchmarks/orchestration_share.py: the share of the sweep's wall time with no trial computing), and where the
sweep's wall time went piece by piece (`timeline`: imports and plan, Ray's start, the trial processes' start-up,
the trials, Tune's wind-down, the report, Ray's shutdown and exit; from sweep_summary.json and timing.json).
--perf merges both figures into docs/benchmarks/perf.json (card, GPU count, date, commit, command).
A config of more trials than slots is named by its waves: `..._3waves` (target >= 1.0: reused processes
pay off). --plain-only and then --plain-seconds split the two sides over two calls of the same machine
(a device call's time limit). --executors tune,train runs the sweep once under each executor against one plain run (the
first named gives the figure; each one's figures under `by_executor`), and prints each trial's GPU
memory estimate beside its measured peak and any trial that did not finish.
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


def trial_memory(run_dir: Path) -> list[dict]:
    """Each trial's GPU memory from its summary.json: the estimate before it ran and the measured peaks."""
    out = []
    for f in sorted((run_dir / "trials").glob("*/summary.json")):
        mem = json.loads(f.read_text()).get("memory")
        if mem:
            out.append({"trial": f.parent.name, **mem})
    return out


def died(run_dir: Path) -> list[str]:
    """Trials of the sweep without done.json (a plain process that fails stops the benchmark)."""
    names = json.loads((run_dir / "sweep.json").read_text())["trials"]
    return [n for n in names if not (run_dir / "trials" / n / "done.json").is_file()]


def timeline(run_dir: Path, launched: float, exited: float) -> dict:
    """Where a sweep's wall time went, piece by piece (seconds), from its sweep_summary.json 'timeline' and
    its trials' timing.json (wall-clock times), between `launched` (the `poxm run` process started) and
    `exited` (it ended). Empty when the summary has no timeline (a poxm before it)."""
    s = json.loads((run_dir / "results" / "sweep_summary.json").read_text())
    m = s.get("timeline") or {}
    attempts = [a for f in sorted((run_dir / "trials").glob("*/timing.json"))
                for a in json.loads(f.read_text()).get("attempts", [])]
    if not m or not attempts:
        return {}
    first = min(attempts, key=lambda a: a["start"])
    last = max(a["end"] for a in attempts)
    pieces = {
        "imports_and_plan": m["execute_start"] - launched,         # the interpreter, poxm's imports, the plan
        "lock_tracking_ray_start": m["ray_ready"] - m["execute_start"],
        "prepare_and_tune_setup": m["trials_start"] - m["ray_ready"],
        "trial_process_start": first["start"] - m["trials_start"],  # to the first trial computing
        "  of_which_to_trial_function": first.get("job_start", first["start"]) - m["trials_start"],
        "  of_which_imports_to_worker": first.get("worker_start", first["start"]) - first.get("job_start", first["start"]),
        "  of_which_worker_to_compute": first["start"] - first.get("worker_ready", first["start"]),
        "trials": last - first["start"],                             # the first trial's compute to the last end
        "tune_wind_down": m["trials_end"] - last,
        "report_after_last_trial": m["report_end"] - last,           # built beside the wind-down (EarlyReport)
        "summary_close_shutdown_exit": exited - m["report_end"],
    }
    return {k: round(v, 2) for k, v in pieces.items()}


def run_sweep(config: str, overrides: list[str], executor: str, sweep_dir: Path, cache: Path) -> tuple[float, Path, dict]:
    """Wall seconds of `poxm run` under `executor` (empty: the config's), its run directory and its timeline."""
    out = sweep_dir / (executor or "default")
    out.mkdir(parents=True, exist_ok=True)
    extra = [f"resources.executor={executor}"] if executor else []
    t, launched = time.perf_counter(), time.time()
    subprocess.run(_poxm("run", config, *overrides, *extra, "--runs-dir", str(out), "--cache-dir", str(cache)),
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall, exited = time.perf_counter() - t, time.time()
    run_dir = next(p for p in out.iterdir() if (p / "sweep.json").exists())
    return wall, run_dir, timeline(run_dir, launched, exited)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("overrides", nargs="*", help="config overrides, the same for both sides")
    ap.add_argument("--runs-dir", required=True, help="an empty folder: cache/, sweep/, plain/ go there")
    ap.add_argument("--executors", default="", help="comma-separated resources.executor values: the sweep "
                    "once under each (one plain run for all; the first gives the figure); default: the config's")
    ap.add_argument("--plain-seconds", type=float, help="the plain side's wall seconds, measured by an earlier "
                    "call on the same machine (--plain-only): only the sweep runs now")
    ap.add_argument("--plain-only", action="store_true", help="only the plain side: print its seconds")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--perf", help="merge the figures into this perf.json")
    a = ap.parse_args(argv)
    base = Path(a.runs_dir).resolve()
    cache, sweep_dir, plain_dir = base / "cache", base / "sweep", base / "plain"
    for d in (cache, sweep_dir, plain_dir):
        d.mkdir(parents=True, exist_ok=True)
    cfg, specs = _trials(a.config, a.overrides)
    n_slots, slots = _slots(cfg)
    waves = -(-len(specs) // n_slots)
    print(f"{len(specs)} trials, {n_slots} at a time ({waves} wave(s)); device {cfg.device}", flush=True)

    t = time.perf_counter()
    subprocess.run(_poxm("prepare", a.config, *a.overrides, "--cache-dir", str(cache)), check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    prepare_s = time.perf_counter() - t
    print(f"prepare  {prepare_s:7.1f} s (shared cache, not timed below)", flush=True)

    from contextlib import nullcontext

    from orchestration.cluster.mps import mps_for_sweep
    mps = mps_for_sweep(cfg.device, bool(cfg.resources.mps), True, say=lambda m: None) \
        if cfg.device == "cuda" else nullcontext()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from orchestration_share import share as orchestration_share
    runs: dict[str, dict] = {}
    with mps:
        if a.plain_only:
            plain_s = run_plain(a.config, a.overrides, specs, cache, plain_dir, slots,
                                threads=max(1, int(cfg.resources.cpus_per_trial or 1)))
            print(f"plain    {plain_s:7.1f} s ({len(specs)} poxm train processes, {n_slots} at a time)", flush=True)
            return 0
        for ex in [e.strip() for e in a.executors.split(",")] if a.executors else [""]:
            sweep_s, run_dir, pieces = run_sweep(a.config, a.overrides, ex, sweep_dir, cache)
            runs[ex or "default"] = {"sweep_seconds": round(sweep_s, 1), "run_dir": run_dir,
                                     "orchestration_share": round(float(orchestration_share(run_dir)["orchestration_share"]), 3),
                                     "died": died(run_dir), "memory": trial_memory(run_dir), "timeline": pieces}
            print(f"sweep    {sweep_s:7.1f} s (poxm run, executor {ex or 'default'}: Ray, trials, gather, report); "
                  f"orchestration share {runs[ex or 'default']['orchestration_share']:.3f}", flush=True)
            for k, v in pieces.items():
                print(f"  {k:40s} {v:7.2f} s", flush=True)
        plain_s = a.plain_seconds or run_plain(a.config, a.overrides, specs, cache, plain_dir, slots,
                                               threads=max(1, int(cfg.resources.cpus_per_trial or 1)))
        print(f"plain    {plain_s:7.1f} s ({len(specs)} poxm train processes, {n_slots} at a time"
              f"{', measured by an earlier call' if a.plain_seconds else ''})", flush=True)
    for ex, r in runs.items():
        r["plain_over_sweep"] = round(plain_s / r["sweep_seconds"], 3)
        for m in r["memory"]:
            print(f"  memory {ex} {m['trial']}: estimate {m['estimate_mb']:.0f} MB, peak "
                  f"{m.get('peak_mb', float('nan')):.0f} MB (first epoch {m.get('peak_first_epoch_mb', float('nan')):.0f})")
        if r["died"]:
            print(f"  {ex}: {len(r['died'])} trial(s) did not finish: {', '.join(r['died'])}", flush=True)
    first = next(iter(runs.values()))
    ratio, share = first["plain_over_sweep"], first["orchestration_share"]
    kind = "gpu" if cfg.device == "cuda" else "cpu"     # the targets are the GPU's; a CPU run is named apart
    suffix = "" if waves == 1 else f"_{waves}waves"
    target = ">= 0.85" if waves == 1 else ">= 1.0"
    print(f"{kind}_sweep_vs_plain_throughput{suffix} {ratio:.3f} (GPU target {target}); orchestration share "
          f"{share:.3f} (GPU target <= 0.10)", flush=True)
    card = "cpu"
    if cfg.device == "cuda":
        import torch
        card = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or None
    common = {"card": card, "gpus": len({s for s in slots if s is not None}), "date": dt.date.today().isoformat(),
              "commit": commit, "trials": len(specs), "slots": n_slots, "waves": waves,
              "command": "python benchmarks/sweep_vs_plain.py " + " ".join([a.config, *a.overrides])
              + (f" --executors {a.executors}" if a.executors else "") + " --runs-dir <new folder>"}
    by_ex = {ex: {k: v for k, v in r.items() if k not in ("run_dir", "memory")} for ex, r in runs.items()}
    figures = {f"{kind}_sweep_vs_plain_throughput{suffix}": {
                   "value": ratio, "target": target, "executor": next(iter(runs)),
                   "sweep_seconds": first["sweep_seconds"], "plain_seconds": round(plain_s, 1),
                   "prepare_seconds": round(prepare_s, 1), "by_executor": by_ex, **common},
               f"{kind}_orchestration_share{suffix}": {"value": share, "target": "<= 0.10", **common}}
    if a.json:
        Path(a.json).write_text(json.dumps({**figures, "memory": {ex: r["memory"] for ex, r in runs.items()}},
                                           indent=1) + "\n")
    print(json.dumps(figures, indent=1), flush=True)     # last: what `python -m benchmarks` records
    if a.perf:
        from poxm_core.common.atomic import write_text
        perf = json.loads(Path(a.perf).read_text())
        perf.update(figures)
        write_text(Path(a.perf), json.dumps(perf, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
