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
    once per trial (a marker file in the trial's working dir records that it fired)."""
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


class TrialFiles:
    """A trial's result files (state.json, timing.json, done.json, rows.csv, summary.json): in the run
    directory (`root` = run_root/trials/<name>), or in storage (orchestration.storage) under
    trials/<name>/ when the nodes share no filesystem."""

    def __init__(self, name: str, run_root: str | None, storage_uri: str | None):
        from orchestration.storage import Storage
        self.name = name
        self.store = Storage(storage_uri) if storage_uri else None
        self.root = None if self.store else Path(run_root) / "trials" / name

    def read_json(self, f: str, default=None):
        return read_json(self.root / f, default) if self.store is None else self.store.read_json(f"trials/{self.name}/{f}", default)

    def write_json(self, f: str, obj) -> None:
        if self.store is None:
            write_json(self.root / f, obj)
        else:
            self.store.write_json(f"trials/{self.name}/{f}", obj)

    def set_state(self, state: str, **extra) -> None:
        if self.store is None:
            set_trial_state(self.root, state, **extra)
        else:
            self.write_json("state.json", {**(self.read_json("state.json", {}) or {}), **extra, "state": state,
                                           "updated": time.time()})

    def work_dir(self, sweep_id: str) -> Path:
        """Where run_trial writes (rows.csv, summary.json, checkpoints/): the trial directory, or this
        node's own folder in storage mode."""
        from orchestration.storage import node_dir
        d = self.root if self.store is None else node_dir() / "trials" / sweep_id / self.name
        d.mkdir(parents=True, exist_ok=True)
        return d

    def publish(self, work_dir: Path) -> None:
        """Storage mode: the trial's result files (not its checkpoints: Ray stores those) to storage."""
        if self.store is not None:
            self.store.put_files(work_dir, f"trials/{self.name}", skip=("done.json", "state.json", "timing.json"))


def worker_loop(tlc: dict) -> None:
    """The Ray Train worker of a trial (one per trial: no data parallelism, docs/orchestration.md).
    tlc: cfg (config as given), spec (TrialSpec dict), run_root, cache_dir, storage (URI or None),
    sweep_id, variant_dir + levels (the prepared variant, relative to the cache), mlflow
    ({uri, heads: {head key: run id}} or None), cpus, crash."""
    import ray.train
    import ray.train.torch
    import torch

    from orchestration.storage import node_dir
    from poxm_core.config import SweepConfig
    from poxm_core.prepare import load_variant
    from poxm_core.training import TrialSpec, run_trial

    torch.set_num_threads(max(1, int(tlc["cpus"])))
    cfg = SweepConfig.model_validate(tlc["cfg"])
    spec = TrialSpec.from_dict(tlc["spec"])
    if cfg.device != "cpu" and torch.cuda.is_available():
        # Ray gives the worker its GPU through CUDA_VISIBLE_DEVICES; get_device() is that card even
        # when several are visible, so 'cuda' means the one Ray reserved for this trial.
        torch.cuda.set_device(ray.train.torch.get_device())
    files = TrialFiles(spec.name, tlc["run_root"], tlc.get("storage"))
    out_dir = files.work_dir(tlc["sweep_id"])

    t0 = time.perf_counter()
    if files.store is None:
        cache = Path(tlc["cache_dir"])
    else:   # this node's own copy of the prepared levels, fetched from storage when missing
        cache = node_dir() / "cache"
        for rel in tlc["levels"]:
            files.store.get_level(cache, rel)
    prepared = load_variant(cache, cache / tlc["variant_dir"], mmap=True)
    load_s = time.perf_counter() - t0

    logger = None
    if tlc.get("mlflow"):
        from orchestration.tracking import PointLogger
        logger = PointLogger(tlc["mlflow"]["uri"], tlc["mlflow"]["heads"])
        logger.start()

    def on_epoch(epoch: int, metrics: dict, ckpt_dir: Path | None) -> None:
        if logger is not None:
            logger.log_epoch(epoch, metrics)
        files.set_state("running", epoch=epoch, epochs=cfg.training.epochs)
        if ckpt_dir is None:   # training.checkpoint_every > 1: no checkpoint this epoch
            ray.train.report({**metrics, "epoch": epoch})
        else:
            ray.train.report({**metrics, "epoch": epoch}, checkpoint=ray.train.Checkpoint.from_directory(str(ckpt_dir)),
                             checkpoint_dir_name=f"epoch_{epoch:04d}")
        _maybe_crash(tlc.get("crash"), spec.name, epoch, out_dir)

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
    if logger is not None:
        points = {(h["method"], h["p"], h["lam"]): rid for h, rid in
                  zip(tlc["spec"]["heads"], (tlc["mlflow"]["heads"][k] for k in tlc["head_keys"]))}
        logger.log_final(df, points, seconds=compute_s)
    files.publish(out_dir)
    timing = files.read_json("timing.json", {"attempts": []})
    timing["attempts"].append({"load_s": round(load_s, 3), "run_trial_s": round(compute_s, 3),
                               "start": round(wall1, 3), "end": round(time.time(), 3),
                               "resumed_from": resumed, "node": os.uname().nodename,
                               "ray_node_id": ray.get_runtime_context().get_node_id(),
                               # which cards Ray gave this trial (benchmarks/multi_gpu_sweep.sh checks the spread)
                               "gpu_ids": [str(g) for g in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])],
                               "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")})
    files.write_json("timing.json", timing)
    final = df[df["final"] & (df["split"] == "val") & (df["metric"] == "SNIS")]
    ray.train.report({"finished": 1, "epoch": int(df["epoch"].max()) if len(df) else 0,
                      "best_val_SNIS": float(final["value"].max()) if len(final) else float("nan")})


def drive_trial(config: dict, ctx: dict) -> None:
    """Tune function trainable: one TorchTrainer job per trial. config: {'trial': {'name': ...}};
    ctx (tune.with_parameters): run_root, cache_dir, storage, sweep_id, cfg, specs {name: spec dict},
    prepared {name: {dir, levels}}, resources, mlflow (uri + {point key: run id}), crash."""
    import ray.train
    import ray.train.torch
    import ray.tune
    from ray.tune.integration.ray_train import TuneReportCallback

    from orchestration.tracking import point_key

    name = config["trial"]["name"]
    files = TrialFiles(name, ctx["run_root"], ctx.get("storage"))
    done = files.read_json("done.json")
    if done is not None:      # finished before an interruption that Tune's state did not record
        ray.tune.report({"finished": 1, "epoch": done.get("epoch", 0), "skipped": 1})
        return
    spec = ctx["specs"][name]
    res = ctx["resources"]
    tlc = {"cfg": ctx["cfg"], "spec": spec, "run_root": ctx["run_root"], "cache_dir": ctx["cache_dir"],
           "storage": ctx.get("storage"), "sweep_id": ctx["sweep_id"],
           "variant_dir": ctx["prepared"][name]["dir"], "levels": ctx["prepared"][name]["levels"],
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
    files.set_state("running", started=time.time())
    t0 = time.perf_counter()
    trainer = ray.train.torch.TorchTrainer(
        worker_loop, train_loop_config=tlc,
        # one worker, no collectives: gloo is the cheapest process group to set up, on CPU and GPU alike
        torch_config=ray.train.torch.TorchConfig(backend="gloo"),
        scaling_config=ray.train.ScalingConfig(num_workers=1, use_gpu=use_gpu, resources_per_worker=per_worker),
        run_config=ray.train.RunConfig(
            name=f"train-{name}", storage_path=ctx["ray_storage"], callbacks=[TuneReportCallback()],
            failure_config=ray.train.FailureConfig(max_failures=res["max_failures"]),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2)))
    try:
        trainer.fit()
    except BaseException as exc:
        files.set_state("errored", error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500])
        raise
    summary = files.read_json("summary.json", {}) or {}
    timing = files.read_json("timing.json", {"attempts": []})
    files.write_json("done.json", {"finished": time.time(), "epoch": summary.get("epochs", 0),
                                   "fit_s": round(time.perf_counter() - t0, 3),
                                   "run_trial_s": round(sum(a["run_trial_s"] for a in timing["attempts"]), 3),
                                   "attempts": len(timing["attempts"])})


def fetch_trial(rd_root: Path, name: str, storage) -> None:
    """Storage mode, in the driver: the trial's files from storage into run_dir/trials/<name>/
    (done.json last, so a trial is done in the run directory only once its rows are there)."""
    if storage is not None:
        storage.get_files(f"trials/{name}", Path(rd_root) / "trials" / name, last=("done.json",))


def _head_key(h: dict) -> str:
    from poxm_core.training import HeadSpec
    return HeadSpec(h["method"], h["p"], h["lam"]).key


def trial_dirname(trial) -> str:
    """Tune's trial directory: the stable trial name (not the long default of every parameter)."""
    return str(trial.config["trial"]["name"])


def done_trials(run_root: Path, names) -> set[str]:
    return {n for n in names if (Path(run_root) / "trials" / n / "done.json").is_file()}
