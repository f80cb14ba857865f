"""The prepare stage of a sweep: `poxm_core.prepare.pipeline.prepare` once per (dataset, seed), as Ray tasks
(cpus_per_trial CPUs, a GPU share when trials use one), so datasets and seeds prepare in parallel.

Overlapped with the trials when it cannot deadlock: a Ray Train job spends many seconds starting before
its worker function runs (docs/performance.md), so the jobs start while the data prepares, and each job's worker waits
for its own (dataset, seed) only (`orchestration.stages.handoff.PreparedRef`). The deadlock to avoid is a
prepare task waiting for resources that jobs hold while those jobs wait for it; so the tasks'
resources are reserved first (one placement group per task, all ready before any job starts, each
released when its task ends), and the stage overlaps only when every task fits at once and the
sweep has no separate storage (the jobs read the driver's cache). Otherwise the trials start after
the stage, as before. Either way a failed task is reported as itself (a bad input: one line).
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

from ray.tune import Stopper

from orchestration.stages.plan import SweepPlan
from orchestration.rundir import config_input
from poxm_core.common.errors import PoxmInputError

RESERVE_TIMEOUT_S = 30.0       # placement groups of the prepare tasks not ready by then: no overlap
CANCEL_WAIT_S = 30.0           # after a failed task, how long the cancelled others may take to stop

# run root -> True once that sweep's prepare stage failed (PrepareFailed reads it in the driver)
_FAILED: dict[str, bool] = {}


def mark_failed(plan: SweepPlan) -> None:
    """A stage beside the trials failed (the prepare tasks, or creating the MLflow runs): the Tune run
    stops (PrepareFailed.stop_all)."""
    _FAILED[str(plan.rd.root)] = True


class PrepareFailed(Stopper):
    """Stops the Tune run when the prepare stage it overlaps has failed. Pickled into Tune's
    experiment state, so it holds only the run root; the flag lives in the driver process."""

    def __init__(self, run_root: str):
        self.run_root = run_root

    def __call__(self, trial_id, result) -> bool:
        return False

    def stop_all(self) -> bool:
        return _FAILED.get(self.run_root, False)


def _prepare_remote(cfg_dict: dict, dataset: str, seed: int, cache_dir: str | None, storage_uri: str | None,
                    cpus: float) -> dict:
    """One (dataset, seed) on whichever node Ray picks: into `cache_dir` (the driver's cache, one
    node or a shared filesystem) or, with a storage URI, into this node's own cache and uploaded. The
    result's 'timing': wall-clock times of the task's start, its imports' end and its end (the sweep
    summary keeps them: how long a prepare task spends importing beside its computation)."""
    started = time.time()
    import torch

    from orchestration.cluster.storage import Storage, node_dir
    from poxm_core.config.schema import SweepConfig as _C
    from poxm_core.prepare.pipeline import prepare
    from poxm_core.prepare.cache import variant_record

    torch.set_num_threads(max(1, int(cpus)))
    imported = time.time()
    t0 = time.perf_counter()
    cache = Path(cache_dir) if storage_uri is None else node_dir() / "cache"
    out = prepare(_C.model_validate(cfg_dict), dataset, seed, cache, progress=False)
    records = {k: variant_record(cache, v) for k, v in out.items()}
    if storage_uri is not None:
        store = Storage(storage_uri)
        for rel in dict.fromkeys(lvl for r in records.values() for lvl in r["levels"]):
            store.put_level(cache, rel)
    return {"variants": records, "seconds": time.perf_counter() - t0,
            "timing": {"start": round(started, 3), "imported": round(imported, 3), "end": round(time.time(), 3)}}


def cancel_tasks(refs) -> None:
    """Cancel Ray tasks that may still run, killing the worker processes that run them (force). A task
    interrupted without force gets a KeyboardInterrupt wherever it is, also inside `import torch`: its
    worker lives on with torch half-imported, and Ray hands that worker its next task, whose `import
    torch` then fails ("Only a single TORCH_LIBRARY can be used to register the namespace prims", or a
    SystemError "bad call flags"); seen when a test run's one Ray went on after a sweep had stopped its
    prepare stage. A cancelled task is not retried, forced or not."""
    import ray
    for ref in refs:
        ray.cancel(ref, force=True)


def cached_result(plan: SweepPlan, dataset: str, seed: int) -> dict | None:
    """A (dataset, seed)'s task result read off the driver's cache when every variant of it is there
    already (a repeated or resumed sweep): no task then, whose imports alone took seconds while it held a
    trial's GPU share. None in storage mode (the driver does not read the nodes' caches) or when one is missing."""
    if plan.storage is not None:
        return None
    from poxm_core.prepare.cache import is_complete, variant_record
    from orchestration.stages.handoff import variant_at

    ats = {v.name: variant_at(plan.cfg, dataset, seed, v.name) for v in plan.cfg.dataset(dataset).variants}
    cache = Path(plan.cache_dir)
    if not all(is_complete(cache / rel) for at in ats.values() for rel in at.levels):
        return None
    now = round(time.time(), 3)
    return {"variants": {v: variant_record(cache, cache / at.dir) for v, at in ats.items()}, "seconds": 0.0,
            "timing": {"start": now, "imported": now, "end": now}}


def task_resources(plan: SweepPlan) -> dict:
    """What one prepare task asks Ray for: a trial's CPUs and, when trials use a GPU, a trial's share of one."""
    r = plan.cfg.resources
    out = {"CPU": float(r.cpus_per_trial)}
    if r.gpus_per_trial > 0:
        out["GPU"] = min(1.0, float(r.gpus_per_trial))
    return out


def fits_at_once(n_tasks: int, per_task: dict, cluster: dict) -> bool:
    """Whether n tasks of `per_task` resources fit the cluster's totals side by side."""
    return n_tasks > 0 and all(n_tasks * v <= cluster.get(k, 0.0) + 1e-9 for k, v in per_task.items())


def task_record(dataset: str, seed: int, res: dict) -> dict:
    """One prepare task for the sweep summary: its timing (wall-clock start, imports' end, end) and the
    seconds each cache level took to build (from the levels' manifests; a level found in the cache
    keeps the time of its first build)."""
    variants = res["variants"]
    first = next(iter(variants.values()), {"parents": {}})
    levels = {k: float(m.get("seconds", 0.0)) for k, m in first.get("parents", {}).items()}
    levels["variants"] = round(sum(float(r["manifest"].get("seconds", 0.0)) for r in variants.values()), 3)
    return {"dataset": dataset, "seed": int(seed), **res.get("timing", {}), "seconds": round(res["seconds"], 3),
            "levels": levels}


class PrepareRun:
    """The prepare tasks of a sweep, all submitted at once. `refs`: (dataset, seed) -> the task's
    ObjectRef (its result: {'variants': {variant: record}, 'seconds'}); `overlapped`: the trials may
    start now (the tasks hold their resources)."""

    def __init__(self, plan: SweepPlan, say, overlap: bool = True):
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.plan, self.say = plan, say
        _FAILED.pop(str(plan.rd.root), None)      # this invocation's stages have not failed (yet)
        self.keys = [(d.name, s) for d in plan.cfg.datasets for s in plan.cfg.seeds]
        cached = {k: r for k in self.keys if (r := cached_result(plan, *k)) is not None}
        todo = [k for k in self.keys if k not in cached]
        per_task = task_resources(plan)
        self.overlapped = bool(overlap and plan.storage is None
                               and (not todo or fits_at_once(len(todo), per_task, ray.cluster_resources())))
        self._pgs: dict = {}
        if self.overlapped and todo:
            pgs = {k: placement_group([per_task]) for k in todo}
            ready, _ = ray.wait([pg.ready() for pg in pgs.values()], num_returns=len(pgs), timeout=RESERVE_TIMEOUT_S)
            if len(ready) == len(pgs):
                self._pgs = pgs
            else:      # something else holds the resources: no overlap, nothing reserved
                for pg in pgs.values():
                    remove_placement_group(pg)
                self.overlapped = False
        task = ray.remote(num_cpus=per_task["CPU"], num_gpus=per_task.get("GPU", 0))(_prepare_remote)
        cfg_dict = config_input(plan.cfg)
        store = plan.storage
        cache = None if store is not None else str(plan.cache_dir)
        self.refs = {k: ray.put(r) for k, r in cached.items()}
        for k in todo:
            opts = {}
            if k in self._pgs:
                opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(self._pgs[k], placement_group_bundle_index=0)
            self.refs[k] = task.options(**opts).remote(cfg_dict, k[0], k[1], cache, store.uri if store else None,
                                                       plan.cfg.resources.cpus_per_trial)
        self._t0, self.started_at, self.ended_at = time.perf_counter(), time.time(), None
        self._result: tuple[dict, float] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self.seconds = 0.0                  # submit -> the last task's end
        self.tasks: list[dict] = []         # per finished task: dataset, seed, timing, each level's seconds

    def wait_all(self) -> tuple[dict, float]:
        """Every task's result, in the order they end: ({(dataset, seed): {variant: record}}, compute
        seconds); each task's reservation is released as it ends. A task's PoxmInputError is raised
        as itself (one line)."""
        import ray
        from ray.util.placement_group import remove_placement_group

        by_ref = {ref: k for k, ref in self.refs.items()}
        out, compute, pending = {}, 0.0, list(by_ref)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                d, s = by_ref[ready[0]]
                pg = self._pgs.pop((d, s), None)
                if pg is not None:
                    remove_placement_group(pg)
                try:
                    res = ray.get(ready[0])
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.cause if getattr(exc, "cause", None) is not None else exc
                    if isinstance(cause, PoxmInputError):
                        raise PoxmInputError(str(cause)) from None
                    raise
                out[(d, s)] = res["variants"]
                compute += res["seconds"]
                self.tasks.append(task_record(d, s, res))
                self.say(f"  prepared {d} seed {s} ({res['seconds']:.1f} s)")
        except BaseException:
            # the sweep ends: the tasks still running are cancelled and their workers killed (cancel_tasks;
            # not by removing their reservation, which Ray would retry), then their reservations go (a
            # driver that lives on, e.g. a notebook, keeps no CPUs or GPUs held)
            cancel_tasks(pending)
            ray.wait(pending, num_returns=len(pending), timeout=CANCEL_WAIT_S)
            for pg in self._pgs.values():
                remove_placement_group(pg)
            self._pgs.clear()
            raise
        finally:
            self.seconds, self.ended_at = time.perf_counter() - self._t0, time.time()
        self._result = (out, compute)
        return out, compute

    def watch(self, on_done=None) -> None:
        """wait_all in a background thread (the trials run meanwhile), then on_done(prepared) there;
        a failure of either stops the Tune run (PrepareFailed) and is raised again by `result`."""
        def run():
            try:
                self._result = self.wait_all()
                if on_done is not None:
                    on_done(self._result[0])
            except BaseException as exc:      # noqa: BLE001 -- handed to the main thread by result()
                self._error = exc
                mark_failed(self.plan)

        self._thread = threading.Thread(target=run, name="poxm-prepare", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = CANCEL_WAIT_S) -> None:
        """The sweep ends before the watched stage did (a trial or the MLflow runs failed, Ctrl-C): its
        tasks still running are cancelled and the watching thread is waited for, so that no thread of
        this sweep calls Ray after it is shut down (Ray would start itself again in this process).
        Nothing it raises now is kept: the sweep already ends with its own error."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        cancel_tasks(self.refs.values())
        thread.join(timeout_s)
        _FAILED.pop(str(self.plan.rd.root), None)

    def stopper(self) -> PrepareFailed:
        return PrepareFailed(str(self.plan.rd.root))

    def failed(self) -> BaseException | None:
        return self._error

    def result(self) -> tuple[dict, float]:
        """The stage's result: waited for (watched, or here), or the one wait_all gave; its failure raised here."""
        if self._thread is None:
            return self._result if self._result is not None else self.wait_all()
        self._thread.join()
        _FAILED.pop(str(self.plan.rd.root), None)
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

