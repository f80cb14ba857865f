"""How many Ray Train jobs of a sweep start at once (`resources.startup_concurrency`).

A job's start-up is mostly processes starting and importing: Tune's trial actor, Ray Train's
controller, its synchronisation actor and the worker, which then imports torch and opens its CUDA
context. When every slot of a sweep starts its job at the same moment (32 jobs on a 4-GPU machine, 128
processes beside the prepare tasks), they share the CPUs and each takes about three times as long
as alone, so no trial computes for the first ~45 s. Through this gate the jobs start a few at a time:
a job waits before its `fit` for a permit, and its worker hands the permit back once its CUDA context
is up, so the first jobs compute while the next ones start.

The gate is a named Ray actor of the sweep (`StartupGate`, no CPU), created by the driver; its
permits: `permits(configured, cpus)`. A job that never hands its permit back (its worker died before
that) loses it after LEASE_S, and its Tune driver hands it back when the job ends in any case.
"""
from __future__ import annotations

import asyncio
import time

LEASE_S = 300.0         # a permit not handed back after this long is taken back (a worker that died)
AUTO_MIN = 4            # the automatic number of permits: max(AUTO_MIN, CPUs // CPUS_PER_PERMIT)
CPUS_PER_PERMIT = 8


def permits(configured: int | None, cpus: float) -> int:
    """Jobs starting at once: `configured` (resources.startup_concurrency; 0 = no gate), else
    max(4, CPUs / 8) (8 on a 64-core machine, 4 up to 39 cores)."""
    if configured is not None:
        return int(configured)
    return max(AUTO_MIN, int(cpus) // CPUS_PER_PERMIT)


def gate_name(sweep_id: str) -> str:
    return f"poxm-startup-gate-{sweep_id}"


class StartupGate:
    """acquire(job) waits for a permit; release(job) hands it back (once per job; again: no effect)."""

    def __init__(self, permits: int, lease_s: float = LEASE_S):
        self._sem = asyncio.Semaphore(permits)
        self._held: dict[str, float] = {}
        self._lease_s = lease_s

    async def acquire(self, job: str) -> float:
        """Waits for a permit; returns the seconds waited."""
        t0 = time.monotonic()
        while True:
            try:
                await asyncio.wait_for(self._sem.acquire(), timeout=1.0)
                break
            except asyncio.TimeoutError:
                self._take_back_expired()
        self._held[job] = time.monotonic()
        return time.monotonic() - t0

    async def release(self, job: str) -> bool:
        if self._held.pop(job, None) is None:
            return False
        self._sem.release()
        return True

    async def held(self) -> list[str]:
        return sorted(self._held)

    def _take_back_expired(self) -> None:
        now = time.monotonic()
        for job, since in list(self._held.items()):
            if now - since > self._lease_s:
                del self._held[job]
                self._sem.release()


def start_gate(sweep_id: str, n: int):
    """The sweep's gate actor (named gate_name(sweep_id), no CPU), ready; None when n is 0 (no gate).
    It lives as long as the driver."""
    if n <= 0:
        return None
    import ray
    actor = ray.remote(num_cpus=0, max_concurrency=1000)(StartupGate).options(
        name=gate_name(sweep_id), get_if_exists=True).remote(n)
    ray.get(actor.held.remote())
    return actor


def enter(name: str | None, job: str) -> float:
    """In a job's Tune driver, before its fit: wait for a permit of gate `name` (None: no gate);
    returns the seconds waited."""
    if name is None:
        return 0.0
    import ray
    return float(ray.get(ray.get_actor(name).acquire.remote(job)))


def leave(name: str | None, job: str) -> None:
    """Hand job's permit back (without waiting for the answer); a gate that is gone is no error."""
    if name is None:
        return
    import ray
    try:
        ray.get_actor(name).release.remote(job)
    except ValueError:       # the gate's driver is gone: nothing to hand back
        pass
