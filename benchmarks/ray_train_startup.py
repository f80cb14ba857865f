"""Where a Ray Train job's start-up goes: N no-op jobs launched the way a sweep launches its trials
(a Ray Tune function trainable that fits a one-worker trainer, the worker asking for `--cpus` CPUs
and `--gpus` of a GPU), each timing the span from the trainer's `fit` to its worker function, then
the phases Ray Train's controller logs for each job ("[Worker Group Initialization]": placement
group, worker actors, train context, ...) and the processes (actors) the jobs started.

    python benchmarks/ray_train_startup.py --jobs 8 --cpus 1 --gpus 0.125
    python benchmarks/ray_train_startup.py --jobs 2 --cpus 1 --gpus 0 --trainer data_parallel
    python benchmarks/ray_train_startup.py --jobs 4 --trainer data_parallel --env RAY_TRAIN_METRICS_ENABLED=0 --no-pg-cleaner
    python benchmarks/ray_train_startup.py --jobs 4 --cpus 0.5 --trainer data_parallel --no-pg-cleaner --lean

--trainer data_parallel fits Ray Train's `DataParallelTrainer` (what a sweep's job uses: no torch process
group) instead of a `TorchTrainer` with the gloo backend (the default here), to see what the process group
costs. --lean: as a sweep's jobs (orchestration.stages.trial.leave_out_unused_callbacks,
orchestration.cluster.ray_setup.start_train_coordinator).
Prints one line per job and the medians; nothing is written outside a temporary folder.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def worker(cfg: dict) -> None:
    t = time.time()
    import ray.train
    ray.train.report({"worker_start": t, "fit_start": cfg["fit_start"]})


def drive(config: dict, trainer: str, cpus: float, gpus: float, storage: str, pg_cleaner: bool = True,
          lean: bool = False) -> None:
    import ray.train
    import ray.tune
    from ray.tune.integration.ray_train import TuneReportCallback
    fit_start = time.time()
    per_worker = {"CPU": cpus, **({"GPU": gpus} if gpus > 0 else {})}
    kw = dict(train_loop_config={"fit_start": fit_start},
              scaling_config=ray.train.ScalingConfig(num_workers=1, use_gpu=gpus > 0, resources_per_worker=per_worker),
              run_config=ray.train.RunConfig(name=f"startup-{config['i']}", storage_path=storage,
                                             callbacks=[TuneReportCallback()]))
    if trainer == "torch":
        import ray.train.torch
        t = ray.train.torch.TorchTrainer(worker, torch_config=ray.train.torch.TorchConfig(backend="gloo"), **kw)
    else:
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
        t = DataParallelTrainer(worker, **kw)
    if lean:                # as a sweep's job: no datasets callback, no preemption watcher
        from orchestration.cluster.ray_setup import PREEMPTION_WATCHER_ENV
        from orchestration.stages.trial import leave_out_unused_callbacks
        leave_out_unused_callbacks(t, pg_cleaner=pg_cleaner)
        os.environ.setdefault(PREEMPTION_WATCHER_ENV, "0")
    elif not pg_cleaner:    # as a sweep's job on a Ray without dashboard: no placement-group cleaner actor
        from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
        defaults = t._create_default_callbacks
        t._create_default_callbacks = lambda: [c for c in defaults() if not isinstance(c, PlacementGroupCleanerCallback)]
    t.fit()


PHASE = re.compile(r"\[Worker Group Initialization\] (.*?) in ([0-9.]+)s")


def controller_phases(session_logs: str) -> list[dict]:
    """{phase: seconds} per job from Ray Train's controller logs (JSON lines) of this Ray session."""
    out = []
    for f in sorted(glob.glob(os.path.join(session_logs, "train", "ray-train-sys-controller-*.log"))):
        phases, first, name = {}, None, None
        for line in open(f):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            ts = rec.get("timestamp_ns", 0) / 1e9
            first = ts if first is None else first
            name = name or rec.get("run_name")
            m = PHASE.search(rec.get("message", ""))
            if m:
                phases[m.group(1)] = float(m.group(2))
        if phases:
            out.append({"run_name": name, "controller_first_log": first, **phases})
    return out


def actor_processes(session_logs: str) -> dict[str, int]:
    """{actor class: how many processes ran one} from the workers' output files of this Ray session
    (each actor runs in a process of its own; Ray writes ':actor_name:<class>' at its start)."""
    counts: dict[str, int] = {}
    for f in glob.glob(os.path.join(session_logs, "worker-*.out")):
        with open(f, errors="replace") as fh:
            m = re.search(r":actor_name:(\w+)", fh.read(4096))
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=4, help="no-op Ray Train jobs, all at once (default 4)")
    ap.add_argument("--cpus", type=float, default=1.0, help="CPUs of each job's worker (default 1)")
    ap.add_argument("--gpus", type=float, default=0.0, help="GPU share of each job's worker (default 0: CPU)")
    ap.add_argument("--trainer", choices=["torch", "data_parallel"], default="torch")
    ap.add_argument("--preload", default="", help="modules Ray's worker processes import when they start "
                                                  "(comma-separated; Ray's preload_python_modules)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="set in this process before Ray starts (its workers inherit it), e.g. "
                         "RAY_TRAIN_METRICS_ENABLED=0; repeatable")
    ap.add_argument("--job-env", action="append", default=[], metavar="KEY=VALUE",
                    help="an env_vars entry of the Ray job's runtime_env (ray.init), e.g. "
                         "RAY_WARN_BLOCKING_GET_INSIDE_ASYNC=0, Ray Train's controller's own; repeatable")
    ap.add_argument("--no-pg-cleaner", action="store_true",
                    help="leave out Ray Train's detached placement-group cleaner actor (one process a job)")
    ap.add_argument("--lean", action="store_true",
                    help="as a sweep's jobs: Ray Train's datasets callback and preemption watcher left out, its "
                         "resource coordinator started before Tune (with --no-pg-cleaner: a sweep on a local Ray)")
    args = ap.parse_args(argv)
    for kv in args.env:
        k, _, v = kv.partition("=")
        os.environ[k] = v

    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    import_torch_s = time.perf_counter() - t

    import ray
    import ray.tune
    storage = tempfile.mkdtemp(prefix="ray-startup-")
    t = time.perf_counter()
    system = {"preload_python_modules": [m for m in args.preload.split(",") if m]} if args.preload else None
    job_env = dict(kv.partition("=")[::2] for kv in args.job_env)
    ray.init(include_dashboard=False, log_to_driver=False, _system_config=system,
             **({"runtime_env": {"env_vars": job_env}} if job_env else {}))
    init_s = time.perf_counter() - t
    if args.lean:
        from orchestration.cluster.ray_setup import start_train_coordinator
        start_train_coordinator()
    logs = os.path.join(ray._private.worker._global_node.get_session_dir_path(), "logs")
    trainable = ray.tune.with_resources(
        ray.tune.with_parameters(drive, trainer=args.trainer, cpus=args.cpus, gpus=args.gpus, storage=storage,
                                 pg_cleaner=not args.no_pg_cleaner, lean=args.lean),
        {"memory": 64 * 1024 ** 2})
    t0 = time.time()
    results = ray.tune.Tuner(
        trainable, param_space={"i": ray.tune.grid_search(list(range(args.jobs)))},
        tune_config=ray.tune.TuneConfig(max_concurrent_trials=args.jobs),
        run_config=ray.tune.RunConfig(name="startup", storage_path=storage, verbose=0)).fit()
    total = time.time() - t0
    spans = []
    for r in results:
        df = r.metrics_dataframe
        if df is not None and "worker_start" in df:
            row = df.dropna(subset=["worker_start"]).iloc[0]
            spans.append((row["fit_start"] - t0, row["worker_start"] - row["fit_start"], r.config["i"], row["fit_start"]))
    phases = controller_phases(logs)
    actors = actor_processes(logs)
    ray.shutdown()
    print(f"{args.jobs} job(s), worker {args.cpus:g} CPU + {args.gpus:g} GPU, {args.trainer} trainer; "
          f"{os.cpu_count()} CPUs here")
    print(f"  a fresh `python -c 'import torch'`: {import_torch_s:.1f} s; ray.init {init_s:.1f} s; Tune total {total:.1f} s")
    first_log = {p["run_name"]: p["controller_first_log"] for p in phases}
    to_controller = []
    for start, span, i, fit_start in sorted(spans):
        c = first_log.get(f"startup-{i}")
        if c is not None:
            to_controller.append(c - fit_start)
        print(f"  job {i}: fit began {start:6.1f} s after Tune started; fit -> worker function {span:6.1f} s"
              + (f" (fit -> the controller's first log line {c - fit_start:.1f} s)" if c is not None else ""))
    if spans:
        print(f"  median fit -> worker function: {statistics.median(s[1] for s in spans):.1f} s")
        print(f"  Tune's start -> the first worker function: {min(s[0] + s[1] for s in spans):.1f} s; "
              f"-> the last: {max(s[0] + s[1] for s in spans):.1f} s")
    print("  processes (actors) started: " + ", ".join(f"{n} {c}" for c, n in sorted(actors.items())))
    if to_controller:
        print(f"  median fit -> controller's first log line: {statistics.median(to_controller):.1f} s")
    keys = list(dict.fromkeys(k for p in phases for k in p if k not in ("run_name", "controller_first_log")))
    for k in keys:
        vals = [p[k] for p in phases if k in p]
        print(f"  controller '{k}': median {statistics.median(vals):.2f} s, max {max(vals):.2f} s ({len(vals)} jobs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
