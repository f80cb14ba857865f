"""One trial on Ray: a Tune function trainable (the driver) that fits a Ray Train `TorchTrainer`
whose per-worker function runs `poxm_core.training.run_trial` (Train V2 pattern).

    Tuner ──> drive_trial(config, ctx)         Tune trial actor, one per TrialSpec (a group of heads)
                └─ TorchTrainer(worker_loop)   Ray Train job 'train-<trial name>' under run_dir/ray
                     └─ worker_loop(tlc)       load Prepared, run_trial, report + checkpoint each epoch

Resume: the Train run name is stable, so a Train run started again with the same (storage_path,
name), after a worker crash (Train FailureConfig) or a driver retry (Tune FailureConfig) or
`poxm resume`, hands its latest checkpoint to `ray.train.get_checkpoint()` and run_trial continues
from it. A trial whose done.json exists is not run again.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from orchestration.rundir import read_json, set_trial_state, write_json

CRASH_ENV = "POXM_INJECT_CRASH_ONCE"   # '<epoch>' or '<epoch>:<trial name>': crash after that epoch's report, once


def crash_spec() -> str | None:
    return os.environ.get(CRASH_ENV) or None


def _maybe_crash(spec: str | None, trial: str, epoch: int, trial_dir: Path) -> None:
    """Fault injection for tests: the worker process dies right after epoch `e` was checkpointed,
    once per trial (a marker file in the trial dir records that it fired)."""
    if not spec:
        return
    e, _, only = spec.partition(":")
    if int(e) != epoch or (only and only != trial):
        return
    marker = trial_dir / ".crash_injected"
    if marker.exists():
        return
    marker.write_text(f"{epoch}\n")
    os._exit(17)


def worker_loop(tlc: dict) -> None:
    """Per Ray Train worker. tlc: cfg (resolved dict), spec (TrialSpec dict), run_root, cache_dir,
    mlflow ({uri, heads: {head key: run id}} or None), cpus, crash."""
    import ray.train
    import torch

    from poxm_core.config import SweepConfig
    from poxm_core.prepare import load_prepared
    from poxm_core.training import TrialSpec, run_trial

    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    torch.set_num_threads(max(1, int(tlc["cpus"])))
    cfg = SweepConfig.model_validate(tlc["cfg"])
    spec = TrialSpec.from_dict(tlc["spec"])
    trial_dir = Path(tlc["run_root"]) / "trials" / spec.name
    # Only rank 0 owns the trial's files; other ranks (num_workers > 1) keep theirs apart.
    out_dir = trial_dir if rank == 0 else trial_dir / f"rank{rank}"
    out_dir.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    prepared = load_prepared(cfg, spec.dataset, spec.variant, spec.seed, Path(tlc["cache_dir"]), mmap=True)
    load_s = time.perf_counter() - t0

    logger = None
    if rank == 0 and tlc.get("mlflow"):
        from orchestration.tracking import PointLogger
        logger = PointLogger(tlc["mlflow"]["uri"], tlc["mlflow"]["heads"])
        logger.start()

    def on_epoch(epoch: int, metrics: dict, ckpt_dir: Path) -> None:
        if logger is not None:
            logger.log_epoch(epoch, metrics)
        if rank == 0:
            set_trial_state(trial_dir, "running", epoch=epoch, epochs=cfg.training.epochs)
        ray.train.report({**metrics, "epoch": epoch}, checkpoint=ray.train.Checkpoint.from_directory(str(ckpt_dir)),
                         checkpoint_dir_name=f"epoch_{epoch:04d}")
        if rank == 0:
            _maybe_crash(tlc.get("crash"), spec.name, epoch, trial_dir)

    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        resumed = f"ray:{Path(ckpt.path).name}"
    else:   # a worker that died right after a report can leave Ray without it; the trial dir has it
        from poxm_core.training.checkpoint import latest_checkpoint
        last = latest_checkpoint(out_dir)
        resumed = None if last is None else f"trial_dir:{last.name}"
    try:
        t1, wall1 = time.perf_counter(), time.time()
        if ckpt is not None:
            with ckpt.as_directory() as d:
                df = run_trial(cfg, spec, prepared, out_dir, resume_from=Path(d), on_epoch=on_epoch, progress=False)
        else:
            df = run_trial(cfg, spec, prepared, out_dir, on_epoch=on_epoch, progress=False)
        compute_s = time.perf_counter() - t1
    except BaseException:
        if logger is not None:
            logger.fail()
        raise
    if rank == 0:
        if logger is not None:
            points = {(h["method"], h["p"], h["lam"]): rid for h, rid in
                      zip(tlc["spec"]["heads"], (tlc["mlflow"]["heads"][k] for k in tlc["head_keys"]))}
            logger.log_final(df, points)
        timing = read_json(trial_dir / "timing.json", {"attempts": []})
        timing["attempts"].append({"load_s": round(load_s, 3), "run_trial_s": round(compute_s, 3),
                                   "start": round(wall1, 3), "end": round(time.time(), 3),
                                   "resumed_from": resumed,
                                   "node": os.uname().nodename})
        write_json(trial_dir / "timing.json", timing)
    final = df[df["final"] & (df["split"] == "val") & (df["metric"] == "SNIS")]
    ray.train.report({"finished": 1, "epoch": int(df["epoch"].max()) if len(df) else 0,
                      "best_val_SNIS": float(final["value"].max()) if len(final) else float("nan")})


def drive_trial(config: dict, ctx: dict) -> None:
    """Tune function trainable: one TorchTrainer job per trial. config: {'trial': {'name': ...}};
    ctx (tune.with_parameters): run_root, cache_dir, cfg, specs {name: spec dict}, resources,
    mlflow (uri + {point key: run id}), crash."""
    import ray.train
    import ray.train.torch
    import ray.tune
    from ray.tune.integration.ray_train import TuneReportCallback

    from orchestration.tracking import point_key

    name = config["trial"]["name"]
    run_root = Path(ctx["run_root"])
    trial_dir = run_root / "trials" / name
    trial_dir.mkdir(parents=True, exist_ok=True)
    done = read_json(trial_dir / "done.json")
    if done is not None:      # finished before an interruption that Tune's state did not record
        ray.tune.report({"finished": 1, "epoch": done.get("epoch", 0), "skipped": 1})
        return
    spec = ctx["specs"][name]
    res = ctx["resources"]
    tlc = {"cfg": ctx["cfg"], "spec": spec, "run_root": str(run_root), "cache_dir": ctx["cache_dir"],
           "cpus": res["cpus_per_trial"], "crash": ctx.get("crash"), "mlflow": None,
           "head_keys": [_head_key(h) for h in spec["heads"]]}
    if ctx.get("mlflow"):
        pts = ctx["mlflow"]["points"]
        heads = {}
        for h in spec["heads"]:
            key = point_key({"dataset": spec["dataset"], "variant": spec["variant"], "method": h["method"],
                             "p": h["p"], "lam": h["lam"], "seed": spec["seed"]})
            heads[_head_key(h)] = pts[key]
        tlc["mlflow"] = {"uri": ctx["mlflow"]["uri"], "heads": heads}
    use_gpu = res["gpus_per_trial"] > 0
    per_worker = {"CPU": res["cpus_per_trial"], **({"GPU": res["gpus_per_trial"]} if use_gpu else {})}
    set_trial_state(trial_dir, "running", started=time.time())
    t0 = time.perf_counter()
    trainer = ray.train.torch.TorchTrainer(
        worker_loop, train_loop_config=tlc,
        scaling_config=ray.train.ScalingConfig(num_workers=res["num_workers"], use_gpu=use_gpu,
                                               resources_per_worker=per_worker),
        run_config=ray.train.RunConfig(
            name=f"train-{name}", storage_path=str(run_root / "ray"), callbacks=[TuneReportCallback()],
            failure_config=ray.train.FailureConfig(max_failures=res["max_failures"]),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2)))
    try:
        trainer.fit()
    except BaseException as exc:
        set_trial_state(trial_dir, "errored", error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500])
        raise
    summary = read_json(trial_dir / "summary.json", {}) or {}
    timing = read_json(trial_dir / "timing.json", {"attempts": []})
    write_json(trial_dir / "done.json", {"finished": time.time(), "epoch": summary.get("epochs", 0),
                                         "fit_s": round(time.perf_counter() - t0, 3),
                                         "run_trial_s": round(sum(a["run_trial_s"] for a in timing["attempts"]), 3),
                                         "attempts": len(timing["attempts"])})


def _head_key(h: dict) -> str:
    from poxm_core.training import HeadSpec
    return HeadSpec(h["method"], h["p"], h["lam"]).key


def trial_dirname(trial) -> str:
    """Tune's trial directory: the stable trial name (not the long default of every parameter)."""
    return str(trial.config["trial"]["name"])


def done_trials(run_root: Path, names) -> set[str]:
    return {n for n in names if (Path(run_root) / "trials" / n / "done.json").is_file()}
