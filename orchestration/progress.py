"""The sweep's progress view: a Tune callback on the driver showing trial counts
(done / running / pending / errored) on one tqdm bar, and one line per finished or failed trial."""
from __future__ import annotations

import sys
import time

from ray.tune import Callback


class SweepProgress(Callback):
    """tqdm bar over the sweep's trials. `already_done` trials (finished before a resume) count as done."""

    def __init__(self, total: int, already_done: int = 0, enabled: bool = True, epochs: int | None = None):
        self.total, self.already_done, self.enabled, self.epochs = total, already_done, enabled, epochs
        self._bar = None
        self._t0: dict[str, float] = {}
        self._epoch: dict[str, int] = {}

    def __getstate__(self):        # pickled into Tune's experiment state: drop the live bar
        d = dict(self.__dict__)
        d["_bar"] = None
        return d

    @staticmethod
    def _name(trial) -> str:
        return str(trial.config.get("trial", {}).get("name", trial.trial_id))

    def _counts(self, trials) -> dict[str, int]:
        c = {"done": 0, "running": 0, "pending": 0, "errored": 0}
        for t in trials:
            st = t.status
            if st == "TERMINATED":
                c["done"] += 1
            elif st == "RUNNING":
                c["running"] += 1
            elif st == "ERROR":
                c["errored"] += 1
            else:
                c["pending"] += 1
        # trials the grid has not materialised yet count as pending
        c["pending"] += max(0, self.total - len(trials))
        return c

    def _refresh(self, trials, note: str | None = None) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            from tqdm.auto import tqdm
            # not a terminal (a log file, CI): no bar and no ANSI codes; the done/ERROR lines still come
            self._bar = tqdm(total=self.total, desc="trials", unit="trial", file=sys.stderr, dynamic_ncols=True,
                             disable=not sys.stderr.isatty())
        c = self._counts(trials)
        self._bar.n = c["done"]
        running = [f"{self._name(t)}@{self._epoch.get(self._name(t), 0)}/{self.epochs or '?'}"
                   for t in trials if t.status == "RUNNING"]
        self._bar.set_postfix_str(f"running={c['running']} pending={c['pending']} errored={c['errored']}"
                                  + (f" [{', '.join(running[:3])}{', ...' if len(running) > 3 else ''}]" if running else ""),
                                  refresh=False)
        self._bar.refresh()
        if note:
            self._bar.write(note, file=sys.stderr)

    def on_trial_start(self, iteration, trials, trial, **info):
        self._t0[self._name(trial)] = time.time()
        self._refresh(trials)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if "epoch" in result:
            self._epoch[self._name(trial)] = int(result["epoch"])
        self._refresh(trials)

    def on_trial_complete(self, iteration, trials, trial, **info):
        n = self._name(trial)
        took = time.time() - self._t0.get(n, time.time())
        self._refresh(trials, f"  done    {n}  ({took:.0f} s)")

    def on_trial_error(self, iteration, trials, trial, **info):
        n = self._name(trial)
        self._refresh(trials, f"  ERROR   {n}  (see {getattr(trial, 'path', None) or getattr(trial, 'local_path', '?')}/error.txt)")

    def on_experiment_end(self, trials, **info):
        if self._bar is not None:
            self._refresh(trials)
            self._bar.close()
            self._bar = None
