"""The prepare stage of a sweep: `poxm_core.prepare.prepare` once per (dataset, seed), as Ray tasks
(cpus_per_trial CPUs, a GPU when trials use one), so datasets and seeds prepare in parallel.
"""
from __future__ import annotations

import time
from pathlib import Path

from orchestration.plan import SweepPlan
from orchestration.rundir import config_input
from poxm_core.errors import PoxmInputError


def _prepare_remote(cfg_dict: dict, dataset: str, seed: int, cache_dir: str | None, storage_uri: str | None,
                    cpus: float) -> dict:
    """One (dataset, seed) on whichever node Ray picks: into `cache_dir` (the driver's cache, one
    node or a shared filesystem) or, with a storage URI, into this node's own cache and uploaded."""
    import torch

    from orchestration.storage import Storage, node_dir
    from poxm_core.config import SweepConfig as _C
    from poxm_core.prepare import prepare
    from poxm_core.prepare_cache import variant_record

    torch.set_num_threads(max(1, int(cpus)))
    t0 = time.perf_counter()
    cache = Path(cache_dir) if storage_uri is None else node_dir() / "cache"
    out = prepare(_C.model_validate(cfg_dict), dataset, seed, cache, progress=False)
    records = {k: variant_record(cache, v) for k, v in out.items()}
    if storage_uri is not None:
        store = Storage(storage_uri)
        for rel in dict.fromkeys(lvl for r in records.values() for lvl in r["levels"]):
            store.put_level(cache, rel)
    return {"variants": records, "seconds": time.perf_counter() - t0}


def stage_prepare(plan: SweepPlan, say) -> tuple[dict, float]:
    """prepare() for every (dataset, seed) as Ray tasks; {(dataset, seed): {variant: record}} (records:
    poxm_core.prepare_cache.variant_record, through the object store), seconds."""
    import ray
    r = plan.cfg.resources
    opts = {"num_cpus": r.cpus_per_trial}
    if r.gpus_per_trial > 0:
        opts["num_gpus"] = min(1.0, r.gpus_per_trial)
    task = ray.remote(**opts)(_prepare_remote)
    jobs = [(d.name, s) for d in plan.cfg.datasets for s in plan.cfg.seeds]
    cfg_dict = config_input(plan.cfg)
    store = plan.storage
    cache = None if store is not None else str(plan.cache_dir)
    refs = {task.remote(cfg_dict, d, s, cache, store.uri if store else None, r.cpus_per_trial): (d, s) for d, s in jobs}
    out, compute = {}, 0.0
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        d, s = refs[ready[0]]
        try:
            res = ray.get(ready[0])
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            if isinstance(cause, PoxmInputError):
                raise PoxmInputError(str(cause)) from None
            raise
        out[(d, s)] = res["variants"]
        compute += res["seconds"]
        say(f"  prepared {d} seed {s} ({res['seconds']:.1f} s)")
    return out, compute
