"""Trials share a card by memory as well as by count (docs/orchestration.md, "Packing").

Each trial's peak GPU memory is estimated before it runs from its shapes (poxm_core/training/memory.py),
read from the prepared cache's manifests of its variant (the driver knows where each variant goes:
handoff.variant_at). Its GPU share is then

    share = max(resources.gpus_per_trial, (estimate + CUDA context) * MARGIN / card memory)

rounded up to a hundredth, at most one card, and a job (a pack of trials) asks for its largest member's.
Ray hands out GPU shares so that a card's never exceed 1: no card is oversubscribed by memory either.
Where the manifests are not there yet (the prepare stage runs beside the trials on a first run) or the
card's memory cannot be read, the share is gpus_per_trial alone; the trial's measured peak still lands
in its summary.json.

A trial that runs out of GPU memory anyway is not a failure of its method: drive_trial records it
(`record_oom`: trials/<name>/memory.json counts it), Tune does not retry it at the same share, and the
trials stage runs it again in a pass of its own at twice its last share (`oom_doublings`), up to a whole
card; only a trial that runs out of memory on a whole card is errored for good.

Under MPS each trial process gets CUDA_MPS_PINNED_DEVICE_MEM_LIMIT = its share of the card
(`mps_memory_limit`), so one trial cannot starve the others of memory.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["MARGIN", "OOM_ENV", "card_bytes", "gpu_share", "inject_oom", "is_oom", "oom_doublings", "oom_spec",
           "record_oom", "trial_stats", "Packing", "mps_memory_limit"]

MARGIN = 1.25            # the estimate is a bound within a small factor; the caching allocator's slack
OOM_FILE = "memory.json"
OOM_ENV = "POXM_INJECT_OOM"    # fault injection for tests: '<trial>[,<trial>...]' run out of GPU memory once each


def card_bytes() -> int | None:
    """The smallest GPU's memory on this machine in bytes (POXM_GPU_MEMORY_MB overrides), or None when
    unknown. Read through nvidia-smi: the driver makes no CUDA context for it."""
    raw = os.environ.get("POXM_GPU_MEMORY_MB", "").strip()
    if raw:
        return int(float(raw) * (1 << 20))
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
        mbs = [float(x) for x in out.split()]
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return int(min(mbs) * (1 << 20)) if mbs else None


def gpu_share(gpus_per_trial: float, estimate: int | None, card: int | None, doublings: int = 0) -> float:
    """A trial's GPU share (module doc); each out-of-memory retry doubles it, up to one card."""
    from poxm_core.training.memory import CONTEXT_BYTES
    by_memory = 0.0
    if estimate is not None and card:      # rounded up to a hundredth: shares Ray adds without drift
        by_memory = math.ceil((estimate + CONTEXT_BYTES) * MARGIN / card * 100 - 1e-9) / 100
    share = max(float(gpus_per_trial), by_memory) * 2 ** doublings
    return min(1.0, share) if gpus_per_trial <= 1 else float(gpus_per_trial)


def trial_stats(cache_dir: Path, levels) -> dict | None:
    """memory.shape_from_stats's statistics of a variant from its levels' manifests in the cache (data,
    model, candidates, variant), with the sparse entries per row read off X_train and the most labels of
    a row off Y_train and Y_test (as the trial's own `memory.stats_of`); None if a manifest is missing."""
    stats: dict = {}
    for rel in levels:
        man = Path(cache_dir) / rel / "manifest.json"
        try:
            stats.update(json.loads(man.read_text()).get("stats") or {})
        except (OSError, ValueError):
            return None
    import numpy as np
    data = Path(cache_dir) / levels[0]
    try:
        with np.load(data / "X_train.npz") as z:
            stats["nnz_per_row"] = float(z["indptr"][-1]) / max(int(stats.get("N_train", 1)), 1)
    except (OSError, KeyError, ValueError):
        pass
    try:    # the most true labels of a row bound the exact slate metrics' relevant columns (memory._metrics)
        most = []
        for name in ("Y_train.npz", "Y_test.npz"):
            with np.load(data / name) as z:
                most.append(int(np.diff(z["indptr"]).max()) if len(z["indptr"]) > 1 else 0)
        stats["labels_max"] = max(most)
    except (OSError, KeyError, ValueError):
        pass                # unknown: the estimate takes the support instead (larger)
    need = ("N_train", "N_test", "L", "dim", "K", "n_fit", "n_val")
    return stats if all(k in stats for k in need) else None


def is_oom(exc: BaseException) -> bool:
    """The exception (or one it wraps: Ray's errors carry the worker's as text) is CUDA running out of memory."""
    seen = 0
    while exc is not None and seen < 8:
        if type(exc).__name__ == "OutOfMemoryError" or "CUDA out of memory" in str(exc) \
                or "OutOfMemoryError" in str(exc):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def oom_spec() -> str | None:
    """OOM_ENV in the driver's environment (handed to the trials with the sweep's inputs), or None."""
    return os.environ.get(OOM_ENV) or None


def inject_oom(spec: str | None, trial: str, trial_dir: Path) -> None:
    """Fault injection for tests (OOM_ENV): the trial runs out of GPU memory as it starts, once (a marker
    file in its working directory records that it fired), as CUDA's allocator would say it."""
    if not spec or trial not in [t.strip() for t in spec.split(",")]:
        return
    marker = Path(trial_dir) / ".oom_injected"
    if marker.exists():
        return
    marker.write_text("1\n")
    import torch
    raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate 2.00 GiB (injected: {OOM_ENV})")


def record_oom(trial_dir_files, share: float) -> int:
    """Count an out-of-memory end of the trial (TrialFiles): memory.json's 'oom' += 1, the share it had."""
    mem = trial_dir_files.read_json(OOM_FILE, {}) or {}
    mem = {**mem, "oom": int(mem.get("oom", 0)) + 1, "last_share": share}
    trial_dir_files.write_json(OOM_FILE, mem)
    return mem["oom"]


def oom_doublings(run_root: Path, name: str) -> int:
    """How often the trial ran out of memory so far (its share doubles that often)."""
    try:
        return int(json.loads((Path(run_root) / "trials" / name / OOM_FILE).read_text()).get("oom", 0))
    except (OSError, ValueError):
        return 0


class Packing:
    """The GPU share of every trial of a plan (module doc), and of every job as Tune sees it."""

    def __init__(self, plan, card: int | None = None) -> None:
        from orchestration.stages.handoff import variant_at
        from poxm_core.training.memory import estimate_peak_bytes, shape_from_stats
        self.plan, self.res = plan, plan.cfg.resources
        self.card = card if card is not None else (card_bytes() if self.res.gpus_per_trial > 0 else None)
        from poxm_core.training.eval_threads import eval_threads_for
        threads = eval_threads_for("cuda" if self.res.gpus_per_trial > 0 else None)   # as the trial will count them
        self.estimates: dict[str, int | None] = {}
        for s in plan.specs:
            stats = None
            if self.card and plan.storage is None:
                stats = trial_stats(plan.cache_dir, variant_at(plan.cfg, s.dataset, s.seed, s.variant).levels)
            self.estimates[s.name] = (estimate_peak_bytes(shape_from_stats(plan.cfg, s, stats, threads))
                                      if stats is not None else None)

    def share(self, name: str) -> float:
        return gpu_share(self.res.gpus_per_trial, self.estimates.get(name), self.card,
                         oom_doublings(self.plan.rd.root, name))

    def annotate(self, grid: list[dict]) -> list[dict]:
        """Each job of Tune's grid with its GPU share ('gpu': its largest member's); no change without GPUs."""
        if self.res.gpus_per_trial <= 0:
            return grid
        return [{**job, "gpu": max(self.share(n) for n in job["members"])} for job in grid]

    def line(self) -> str | None:
        """What the sweep prints about it: the estimates' range and the shares, or why by count only."""
        if self.res.gpus_per_trial <= 0:
            return None
        known = [e for e in self.estimates.values() if e is not None]
        if not self.card or not known:
            return (f"by count ({self.res.gpus_per_trial:g} GPU a trial): "
                    + ("the card's memory is unknown" if not self.card else "shapes known once prepared"))
        shares = sorted({self.share(n) for n in self.estimates})
        return (f"by memory: estimates {min(known) / 2**30:.1f}-{max(known) / 2**30:.1f} GiB a trial "
                f"({len(known)}/{len(self.estimates)} known), GPU shares {', '.join(f'{x:g}' for x in shares)}")


def mps_memory_limit(share: float, card: int | None, index: int = 0) -> str | None:
    """CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for a client holding `share` of the card (device `index` as the
    client sees it), in MiB; None when the card's memory is unknown."""
    if not card or share <= 0:
        return None
    return f"{index}={max(1, int(share * card) >> 20)}M"


def oom_passes(plan, make_tuner, say, max_passes: int = 6) -> None:
    """Run the trials that ran out of GPU memory again, each pass at twice their last share, until none
    is left or the share is a whole card. `make_tuner(specs, name)`: a Tuner over those trials."""
    from orchestration.rundir import trial_state
    for k in range(1, max_passes + 1):
        redo = []
        for s in plan.specs:
            st = trial_state(plan.rd.trial(s.name))
            if st.get("state") == "errored" and st.get("oom") and not (plan.rd.trial(s.name) / "done.json").exists():
                mem = json.loads((plan.rd.trial(s.name) / OOM_FILE).read_text()) \
                    if (plan.rd.trial(s.name) / OOM_FILE).exists() else {}
                if float(mem.get("last_share", 1.0)) < 1.0:
                    redo.append(s)
        if not redo:
            return
        say(f"  memory   {len(redo)} trial(s) ran out of GPU memory: again at twice the share (pass {k})")
        make_tuner(redo, f"oom-{k}").fit()
