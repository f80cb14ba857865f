"""Where a trial's evaluation time goes, head by head (no threads, synchronised): the per-epoch validation
estimates, the final ones (with DR), V_true and the test metrics of every visible head, on the config's
device (the stages' cost hardly depends on the trained values); with --train-epochs, first the seconds
of each training epoch of the trial's phases.

  python -m benchmarks.profile eval configs/bibtex.yaml device=cuda --cache-dir DIR [--dataset D
      --variant V --seed S] [--json OUT.json]

Prints one line per head (its policy kind and the seconds of each stage) and the totals; the trial
itself evaluates the heads on a thread pool, so its eval_s is below the sum printed here.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from trial_cli import add_trial_args, load_trial  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_trial_args(ap)
    ap.add_argument("--repeat", type=int, default=2, help="time each stage this many times, keep the last")
    ap.add_argument("--train-epochs", type=int, default=0,
                    help="first time this many training epochs of each phase (seconds per epoch, synchronised)")
    ap.add_argument("--also-without", nargs="*", default=[], metavar="METHOD",
                    help="with --train-epochs: time the last phase again without these methods' heads")
    ap.add_argument("--eval-threads", type=int, nargs="*", default=[],
                    help="also time the trial's final report (heads on a thread pool) with these pool sizes")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)

    import torch

    from poxm_core.model.core import resolve_device
    from poxm_core.training import reporting as R
    from poxm_core.training.epoch import train_data_for, train_epoch
    from poxm_core.training.trial_setup import REWARD_KEY, build_heads

    cfg, spec, prep = load_trial(a)
    dev = resolve_device(cfg.device)
    heads, _ = build_heads(cfg, spec, prep, dev)
    data = train_data_for(prep, heads, dev)
    ev = R.EvalInputs(prep, dev, Z_train=data.Z, X_train=data.X)
    ev.prefetch_sparse()
    reward = next(h for h in heads if h.key == REWARD_KEY)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    epochs: dict[str, list[float]] = {}

    def time_epochs(name, group, rw) -> None:
        for e in range(1, a.train_epochs + 1):
            sync()
            t = time.perf_counter()
            train_epoch(cfg, spec, prep, group, e, dev, rw, data)
            sync()
            epochs.setdefault(name, []).append(time.perf_counter() - t)
        print(f"{name}: " + " ".join(f"{s:.3f}" for s in epochs[name]) + " s an epoch", flush=True)

    if a.train_epochs:      # the trainer's phases: the reward model alone when DR-POXM trains, then the others
        two = any(h.method.needs_reward_model for h in heads)
        phases = [("phase1", [reward], None), ("phase2", [h for h in heads if h is not reward], reward)] if two \
            else [("joint", heads, None)]
        for name, group, rw in phases:
            time_epochs(name, group, rw)
        if a.also_without:
            name, group, rw = phases[-1]
            time_epochs(f"{name} without {' '.join(a.also_without)}",
                        [h for h in group if h.method.name not in a.also_without or h is reward], rw)

    def timed(fn, *args):
        for _ in range(a.repeat):
            sync()
            t = time.perf_counter()
            fn(*args)
            sync()
        return time.perf_counter() - t

    stages = {"epoch_val": lambda h: R.val_estimates(h, ev, None),
              "final_val": lambda h: R.val_estimates(h, ev, reward),
              "val_truth": lambda h: R.val_truth(cfg, spec, h, ev),
              "test": lambda h: R.test_metrics(cfg, spec, h, ev)}
    print(f"{spec.name} on {dev}: {prep.log_val.n} validation log rows, {prep.Z_test.shape[0]} test instances, "
          f"{prep.n_labels} labels")
    total: collections.Counter = collections.Counter()
    per_head = {}
    for h in heads:
        if h.hidden:
            continue
        secs = {k: timed(fn, h) for k, fn in stages.items()}
        total.update(secs)
        per_head[h.key] = {"kind": h.view().kind, **secs}
        print(f"{h.key:34s} {h.view().kind:8s} " + " ".join(f"{k} {v:.3f}" for k, v in secs.items()), flush=True)
    print("total: " + " ".join(f"{k} {v:.2f} s" for k, v in total.items()))
    pooled = {}
    visible = [h for h in heads if not h.hidden]
    for n in a.eval_threads:        # the trial's own final report, its heads on a pool of n threads
        os.environ["POXM_EVAL_THREADS"] = str(n)
        pooled[n] = timed(R.final_report, cfg, spec, visible, reward, ev, 1)
        print(f"final report on {n} threads: {pooled[n]:.2f} s", flush=True)
    if a.json:
        a.json.write_text(json.dumps({"trial": spec.name, "device": str(dev), "epochs": epochs, "total": dict(total), "final_report_by_threads": pooled,
                                      "heads": per_head}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
