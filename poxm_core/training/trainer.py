"""The single-trial trainer: every head of a TrialSpec trained in one pass over the cached data.

    run_trial(cfg, spec, prepared, out_dir, resume_from=None, on_epoch=None, progress=True) -> DataFrame

Loop (docs/training.md): for epoch e = 1..training.epochs, the fit log (`prepared.log_train`) is
shuffled by a generator seeded from (seed, e) and cut into mini-batches; each batch is given to every
trainable head in turn (its own policy: dense layers + row-sparse output layer, `poxm_core.policy`,
with its optimisers and learning rate: MethodConfig.lr, else training.lr_is / lr_supervised). The
reward model (the DM head) is fitted first, for all its epochs (phase 1), so that DR estimates and
DR-POXM use a fitted rhat; the other heads then train side by side (phase 2). After the epoch every head reports its mean training loss and the IS, sIS, SNIS
estimates and ESS of its test-time policy on the validation log; a checkpoint is written every
training.checkpoint_every epochs and after the last; then `on_epoch(e, metrics, ckpt_dir)` (ckpt_dir None
after an epoch without a checkpoint). When each of those happens is schedule.py's (EpochSchedule): on a
GPU, epoch e's estimates are computed beside epoch e+1's training (overlap.py); its rows, its checkpoint
(its state as at the end of epoch e) and its on_epoch follow once they are in, so the outputs are the
same. The last epoch's checkpoint is copied to the host and written on a thread while the final
evaluation runs (at Amazon-670K's size it is gigabytes), and its on_epoch comes once both are done. At the end: test metrics (docs/metrics.md), the final validation
estimates (with DR), the ground-truth value V_true (split 'val_truth', never read by selection),
written as long-form rows to out_dir/rows.csv with out_dir/summary.json and out_dir/config.yaml.

Heads share nothing but the batches, and every random draw of a head comes from a generator seeded
by (seed, epoch, head key): a head trained in a group gives the same numbers as trained alone, and a
trial resumed from its latest checkpoint (whichever epoch wrote it) ends identical to an uninterrupted
one (CPU; deterministic kernels there: training.deterministic, auto = CPU only).

Stages, one module each: trial_setup.py (checks, heads, settings hash), batches.py (the data on the
device), epoch.py (one epoch of a group of heads), reporting.py (validation estimates, test metrics),
checkpoint.py (state on disk), schedule.py (what follows each epoch's training, and when). This module
runs them in order: run_trial reads set-up, phase 1, phase 2, final report, outputs.
summary.json's "timing" splits the wall time into set-up (of it: setup_heads_s, the heads' initial draws,
and setup_data_s, the data on the device), training, evaluation (of it: eval_final_s, the final report;
the rest is the per-epoch validation estimates, or the wait for them when they overlap training),
checkpoints and, with an on_epoch callback, report_s:
the time spent in it (on Ray: handing each epoch's report to Ray Train, which takes one report a poll).
"""
from __future__ import annotations

import json
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml

from poxm_core.bandit.estimated_propensity import dataset_propensities
from poxm_core.common.atomic import atomic_file, write_text
from poxm_core.config.schema import SweepConfig, protocol_name, resolved_dict
from poxm_core.common.errors import DivergedError, PoxmInputError
from poxm_core.policy import NetworkStack
from poxm_core.prepare.prepared import Prepared
from poxm_core.common.results import COLUMNS, INSTANCES, to_frame
from poxm_core.training.batches import TrainData
from poxm_core.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from poxm_core.training.crossfit import cross_fitted_rows
from poxm_core.training.epoch import train_data_for, train_epoch
from poxm_core.training.overlap import overlap_wanted
from poxm_core.training.memory import PeakMemory, estimate_peak_bytes, shape_from_stats, stats_of
from poxm_core.training.eval_threads import eval_threads_for
from poxm_core.training.reporting import KS, EvalInputs, epoch_report, final_report
from poxm_core.training.schedule import REPORTED, EpochSchedule, OnEpoch, Timing, mark_reported
from poxm_core.training.spec import TrialSpec
from poxm_core.training.trial_setup import (REWARD_KEY, TrialHead, build_heads, check_spec, deterministic, head_lr,
                                            result_hash, wants_deterministic)

__all__ = ["run_trial", "KS", "REWARD_KEY", "DivergedError", "check_finite"]


def check_finite(heads: list[TrialHead], spec: TrialSpec, epoch: int) -> None:
    """Raise DivergedError naming every trained head whose own parameters (output layer, dense layers,
    its block of a shared stack) hold a NaN or an infinity. One device synchronisation per call."""
    trained = [h for h in heads if h.trains]
    if not trained:
        return
    flags = [torch.stack([torch.isfinite(t).all() for t in h.policy.own_tensors()]).all() for h in trained]
    ok = torch.stack(flags).cpu().tolist()
    bad = [h.key for h, good in zip(trained, ok) if not good]
    if bad:
        raise DivergedError(f"trial {spec.name}: parameters of {', '.join(bad)} became non-finite (NaN or inf) "
                            f"in epoch {epoch}; no results are written for this trial")


def _restore(path: Path, heads: list[TrialHead], stacks: dict[str, NetworkStack], spec: TrialSpec, rhash: str, epochs: int,
             device) -> tuple[int, list[dict], dict]:
    """(epoch, rows, {"path", "metrics"}) of the checkpoint at `path`, loaded into the heads and stacks."""
    st = load_checkpoint(path, device)
    if st.get("result_hash") != rhash or st.get("spec") != spec.to_dict():
        raise PoxmInputError(f"{path}: checkpoint of a different trial or config (settings hash "
                             f"{st.get('result_hash')} != {rhash}); use a fresh --out directory")
    if st["epoch"] > epochs:
        raise PoxmInputError(f"{path}: checkpoint is at epoch {st['epoch']} but training.epochs={epochs}")
    for h in heads:
        if h.trains:
            h.policy.load_state(st["heads"][h.key])
    for g, stack in stacks.items():
        stack.load_full_state(st["stacks"][g])
    return int(st["epoch"]), list(st["rows"]), {"path": path, "metrics": st.get("metrics")}


def _restore_latest(out_dir: Path, heads, stacks, spec: TrialSpec, rhash: str, epochs: int, device
                    ) -> tuple[int, list[dict], dict]:
    """Continue from the newest readable checkpoint in out_dir (epoch 0 and no rows if none). A checkpoint
    that cannot be read (truncated, corrupt) is renamed `corrupt-epoch_XXXX` and
    the next older one is tried: a damaged file costs the epochs since that one, never the sweep (a
    resume that failed on it would fail again forever). Checkpoints of another trial or config still
    refuse, and so does one that asks to load code (load_checkpoint)."""
    while (ckpt := latest_checkpoint(out_dir)) is not None:
        try:
            return _restore(ckpt, heads, stacks, spec, rhash, epochs, device)
        except PoxmInputError as exc:
            if "not a readable checkpoint" not in str(exc):   # a crafted (code-carrying) one: refused, not skipped
                raise
            aside = ckpt.with_name(f"corrupt-{ckpt.name}")
            shutil.rmtree(aside, ignore_errors=True)
            ckpt.rename(aside)
            warnings.warn(f"{exc}; set aside as {aside.name}, continuing from the previous checkpoint", stacklevel=2)
    return 0, [], {}


def _report_restored(out_dir: Path, start: int, restored: dict, on_epoch) -> bool:
    """A trial restarted from its folder's checkpoint of epoch `start` whose on_epoch never returned
    (killed between the checkpoint and its report: the epoch's MLflow metrics, its Ray report) hands
    it over now, from the metrics kept in the checkpoint. Not for a checkpoint Ray handed back: its
    report was made. Returns whether it did."""
    if on_epoch is None or start == 0 or restored.get("metrics") is None:
        return False
    try:
        done = int(json.loads((out_dir / REPORTED).read_text())["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        done = 0
    if done >= start:
        return False
    on_epoch(start, restored["metrics"], restored["path"])
    mark_reported(out_dir, start)
    return True


@dataclass
class _Trial:
    """What run_trial's phases read (`_begin`): the heads, the epochs each phase trains (from where a
    checkpoint left off), the rows so far, the data on the device."""
    spec: TrialSpec
    out_dir: Path
    device: torch.device
    det: bool
    rhash: str
    timing: Timing
    heads: list[TrialHead]
    stacks: dict[str, NetworkStack]
    start: int
    rows: list[dict]
    reward: TrialHead
    visible: list[TrialHead]
    others: list[TrialHead]
    phase1: range
    epochs: range
    data: TrainData
    ev: EvalInputs
    memory: PeakMemory

    def state(self, epoch: int, rows: list[dict], metrics: dict | None = None) -> dict:
        """A checkpoint's content; `metrics`: what its epoch hands on_epoch (handed again by a restart that
        finds it was not: `_report_restored`)."""
        return {"epoch": epoch, "rows": rows, "spec": self.spec.to_dict(), "result_hash": self.rhash,
                "heads": {h.key: h.policy.state() for h in self.heads if h.trains},
                "stacks": {g: st.full_state() for g, st in self.stacks.items()},
                **({"metrics": metrics} if metrics is not None else {})}


def _begin(cfg: SweepConfig, spec: TrialSpec, prepared: Prepared, out_dir: Path, resume_from: Path | None,
           on_epoch: OnEpoch | None) -> _Trial:
    """run_trial's set-up: the checks, the heads (restored from a checkpoint when there is one; a restored
    epoch whose on_epoch never returned is handed over now), which epochs each phase trains, the data on
    the device; its seconds in timing's setup_s (setup_heads_s, setup_data_s)."""
    from poxm_core.model.core import resolve_device

    if not isinstance(cfg, SweepConfig):
        raise TypeError(f"cfg: expected a SweepConfig, got {type(cfg).__name__}")
    if not isinstance(spec, TrialSpec):
        raise TypeError(f"spec: expected a TrialSpec, got {type(spec).__name__}")
    check_spec(cfg, spec, prepared)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = resolve_device(cfg.device)
    timing = Timing(device, report=on_epoch is not None)
    rhash = result_hash(cfg, spec)
    E = cfg.training.epochs
    det = wants_deterministic(cfg, device)
    with deterministic(det), torch.no_grad():
        heads, stacks = build_heads(cfg, spec, prepared, device)
    timing.sync()
    timing["setup_heads_s"] = time.perf_counter() - timing.t0     # parts of setup_s: the heads' initial draws
    if resume_from is not None:
        start, rows, _ = _restore(Path(resume_from), heads, stacks, spec, rhash, E, device)
    else:
        start, rows, restored = _restore_latest(out_dir, heads, stacks, spec, rhash, E, device)
        t = time.perf_counter()
        if _report_restored(out_dir, start, restored, on_epoch):
            timing.since("report_s", t)
    reward = next(h for h in heads if h.key == REWARD_KEY)
    # A head that needs a fitted reward model (DR-POXM) makes the trial fit the DM head first (phase 1);
    # otherwise the DM head trains beside the others, as the reward model of the final DR estimates.
    two_phase = any(h.method.needs_reward_model for h in heads)
    epochs = range(start + 1, E + 1) if any(h.trains for h in heads) else range(0)
    phase1 = range(1, E + 1) if two_phase and start == 0 and len(epochs) else range(0)
    t = time.perf_counter()
    memory = PeakMemory(device, estimate_peak_bytes(shape_from_stats(cfg, spec, stats_of(prepared),
                                                                           eval_threads_for(device))))
    data = train_data_for(prepared, heads, device)
    ev = EvalInputs(prepared, device, Z_train=data.Z, X_train=data.X, clusters=cfg.selection.clusters)
    timing.sync()
    timing["setup_data_s"] = time.perf_counter() - t     # ... and the data on the device
    timing["setup_s"] = time.perf_counter() - timing.t0
    return _Trial(spec, out_dir, device, det, rhash, timing, heads, stacks, start, rows, reward,
                  visible=[h for h in heads if not h.hidden],
                  others=[h for h in heads if h is not reward] if two_phase else heads,
                  phase1=phase1, epochs=epochs, data=data, ev=ev, memory=memory)


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(progress: bool, spec: TrialSpec, total: int):
    if not progress:
        return _NoBar()
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=spec.name, unit="epoch", leave=False)


def run_trial(cfg: SweepConfig, spec: TrialSpec, prepared: Prepared, out_dir: Path,
              resume_from: Path | None = None, on_epoch: OnEpoch | None = None, progress: bool = True) -> pd.DataFrame:
    """Train every head of `spec` on `prepared`; returns (and writes to out_dir/rows.csv) the result rows.

    Continues from `resume_from` (a checkpoint dir) or else from the latest checkpoint in out_dir.
    Metric keys given to on_epoch: mlflow_name(f"{head.key}/{metric}"), e.g. 'poxm/p_eq_10/lam_eq_0.9/SNIS'.
    Set-up (`_begin`), phase 1, phase 2, the final report, the outputs; what follows each epoch's training
    (its validation estimates, checkpoint and on_epoch, and when each happens) is the EpochSchedule's.
    """
    # the dataset option `logging_propensities: estimated`: every rho and q from a model fitted on the log
    prepared = dataset_propensities(cfg, spec.dataset, prepared)
    t = _begin(cfg, spec, prepared, Path(out_dir), resume_from, on_epoch)
    timing, E = t.timing, cfg.training.epochs
    schedule = EpochSchedule(spec, t.ev, t.out_dir, t.rows, t.state, t.rhash, timing=timing, on_epoch=on_epoch,
                             every=cfg.training.checkpoint_every, overlap=overlap_wanted(t.device, t.heads),
                             validate=epoch_report, save=save_checkpoint)   # the stages, named here
    bar = _progress_bar(progress, spec, len(t.phase1) + len(t.epochs))
    try:
        with deterministic(t.det):
            # phase 1: the reward model (DM) alone, all its epochs, when a head needs it fitted (DR-POXM)
            for epoch in t.phase1:
                losses = timing.timed("train_s", train_epoch, cfg, spec, prepared, [t.reward], epoch, t.device, None,
                                      t.data)
                check_finite([t.reward], spec, epoch)
                schedule.reward_epoch(epoch, [] if t.reward.hidden else [t.reward], losses, last=epoch == t.phase1[-1])
                t.memory.epoch_done()
                bar.update(1)
            # phase 2: the other heads side by side (the DM head among them unless phase 1 fitted it)
            for epoch in t.epochs:
                losses = timing.timed("train_s", train_epoch, cfg, spec, prepared, t.others, epoch, t.device, t.reward,
                                      t.data)
                check_finite(t.others, spec, epoch)
                schedule.epoch(epoch, [h for h in t.visible if h in t.others], losses, last=epoch == E)
                t.memory.epoch_done()
                bar.update(1)
    finally:
        schedule.close()
    # the final report (test metrics, validation estimates with DR, V_true), the last checkpoint written meanwhile
    with deterministic(t.det):
        bar.close()
        last = max(E, t.start) if any(h.trains for h in t.heads) else 0
        instances: dict = {}
        with schedule.last_checkpoint():
            before = timing["eval_s"]
            final = timing.timed("eval_s", final_report, cfg, spec, t.visible, t.reward, t.ev, last, instances)
            timing["eval_final_s"] = timing["eval_s"] - before     # part of eval_s: the final report
    if cfg.selection.cross_fit:    # selection reads cross-fitted validation estimates (training/crossfit.py)
        timing["cross_fit_s"] = 0.0
        crossed = timing.timed("cross_fit_s", cross_fitted_rows, run_trial, cfg, spec, prepared, t.out_dir, last,
                               progress)
        final = [r for r in final if r["split"] not in ("val", "val_truth")] + crossed
    # the outputs: rows.csv, summary.json, config.yaml (and the per-instance test values)
    df = to_frame(schedule.rows + final)
    _write_outputs(cfg, spec, t.out_dir, df, t.heads, time.perf_counter() - timing.t0, str(t.device), timing, instances,
                   t.memory.facts())
    return df


def _write_outputs(cfg, spec: TrialSpec, out_dir: Path, df: pd.DataFrame, heads: list[TrialHead], seconds: float,
                   device: str, timing: dict[str, float], instances: dict | None = None,
                   memory: dict | None = None) -> None:
    if instances:   # each head's per-instance test values (the claims' test-set term), beside the rows
        with atomic_file(out_dir / INSTANCES) as tmp:
            with open(tmp, "wb") as fh:
                pre = f"{spec.dataset}|{spec.variant}|{spec.seed}"
                np.savez_compressed(fh, **{f"{pre}|{h}|{m}": a for h, per in sorted(instances.items())
                                           for m, a in sorted(per.items())})
    with atomic_file(out_dir / "rows.csv") as tmp:
        df.to_csv(tmp, index=False, columns=COLUMNS)
    fin = df[df["final"]]
    summary = {"trial": spec.to_dict(), "name": spec.name, "epochs": cfg.training.epochs, "device": device,
               "protocol": protocol_name(cfg.training),
               "seconds": round(seconds, 3),
               "timing": {k: round(v, 3) for k, v in timing.items()},
               # GPU memory: the estimate from the shapes (training/memory.py) and the measured peaks
               **({"memory": memory} if memory else {}),
               "heads": {h.key: {"method": h.spec.method, "p": h.spec.p, "lam": h.spec.lam,
                                 "lr": head_lr(cfg, h.method, h.mc) if h.trains else None,
                                 "metrics": {f"{s}/{m}": float(v) for s, m, v in
                                             fin[(fin.method == h.spec.method) & (fin.p == (h.spec.p if h.spec.p is not None else -1))
                                                 & ((fin.lam == h.spec.lam) if h.spec.lam is not None else fin.lam.isna())]
                                             [["split", "metric", "value"]].itertuples(index=False)}}
                         for h in heads if not h.hidden}}
    write_text(out_dir / "summary.json", json.dumps(summary, indent=1))
    write_text(out_dir / "config.yaml", yaml.safe_dump({"config": resolved_dict(cfg), "trial": spec.to_dict()},
                                                        sort_keys=False, default_flow_style=None))
