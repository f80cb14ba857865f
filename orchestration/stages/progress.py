"""The sweep's progress view: a Tune callback on the driver with one tqdm bar in head-epochs.

A trial trains several heads (grid points) together and reports once per epoch through Tune, then
evaluates every head on the test set and reports once more ('finished'). So the unit of work is the
head-epoch, and the final evaluation of a head counts as many epochs as it costs (`eval_steps`): a
trial with h heads and E epochs has h*(E+w) of them; at epoch e it has done h*e, and the last h*w only
when its evaluation is over. w is learned from the run: a trial's time from its last epoch to its
'member_finished' report over its time per epoch (from the driver's clock at its epoch reports), the
mean over the trials measured so far; until one is measured, w = E (the evaluation as long as the
training). The bar therefore stays short of 100 % while the
trials evaluate, in proportion to what that costs, instead of sitting at 100 % with ETA 0. The ETA is
the bar's own (`SweepProgress.eta`): the work left at the rate measured from this session's first
progress on (so Ray's and the trials' start-up, paid before any epoch ends, does not make the first
ETA many times the run: 58 minutes were shown for a 3-minute quickstart), 'estimating' until that rate
has MIN_RATE_S behind it; never more than the previous ETA less the time since, so it only falls, and it
counts down between Tune's reports (Tune's `on_step_end`, at most once a second). Work finished before a
resume is done from the first line, not counted in the rate. Ray Tune's warnings that its own
bookkeeping was slow ('... may be a performance bottleneck') are counted, not shown, and said once at
the end; its other warnings are written above the bar, not into its line. The postfix shows the trial
counts; one line is written per finished or failed trial. The line fits 80 columns with a bar of ~20
characters (no rate, the ETA only, short trial counts: 'trials 3/8 done 2 run 1 err'). A Tune trial is
a job: one trial or a pack of trials run one after another (config 'members'); the bar and the counts
are per trial, from the job's reports ('member', 'member_finished', 'head_epochs').
Not on a terminal (a log file, CI): no bar and no ANSI codes; the per-trial lines, and every LINE_S
seconds one line with the share done, the trial counts and the ETA (`progress_line`).
"""
from __future__ import annotations

import sys
import time
from typing import Sequence

from ray.tune import Callback


def head_epochs_done(status: str, heads: int, epoch: int, epochs: int, finished: bool = False,
                     eval_steps: float = 1.0) -> float:
    """Head-epochs a trial has done, its final evaluation counting `eval_steps` epochs a head: all
    heads*(epochs+eval_steps) once it terminated or reported 'finished', else heads x its last epoch."""
    if status == "TERMINATED" or finished:
        return heads * (epochs + eval_steps)
    return heads * min(max(epoch, 0), epochs)


def eval_epochs(start: float, first: tuple[float, int] | None, last: tuple[float, int] | None,
                finished: float, epochs: int) -> float | None:
    """What a trial's final evaluation cost, in epochs: the time from its last epoch's end to its
    'finished' report over its time per epoch. first/last: (when, epoch) of its first and last epoch
    report (the last epoch itself is not reported: report_pace.py). The time per epoch is that
    between the two reports, or with one report since the trial's start (start-up included: a lower
    bound of the cost). None without an epoch report."""
    if last is None or last[1] <= 0:
        return None
    if first is not None and last[1] > first[1] and last[0] > first[0]:
        per_epoch = (last[0] - first[0]) / (last[1] - first[1])
    else:
        per_epoch = (last[0] - start) / last[1]
    if per_epoch <= 0:
        return None
    evaluation = finished - last[0] - max(0, epochs - last[1]) * per_epoch
    return max(0.0, evaluation / per_epoch)


# the ETA is the bar's own (SweepProgress.eta: it only falls), in the postfix; not tqdm's {remaining}
BAR_FORMAT = "{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt}{postfix}"     # tqdm puts ', ' before the postfix
TICK_S = 1.0          # the ETA counts down between Tune's reports at most this often
MIN_RATE_S = 30.0     # the ETA's rate is measured over at least this long (from the session's first progress)
LINE_S = 30.0         # not on a terminal: one progress line this often
QUIET_LOGGERS = ("ray.tune.utils.util", "ray.tune.execution.tune_controller", "ray.tune.execution.experiment_state")
SLOW_BOOKKEEPING = "performance bottleneck"     # Ray Tune's warn_if_slow and slow experiment-state saves


def fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return "estimating"
    s = int(round(max(0.0, seconds)))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m:02d}:{s % 60:02d}"


class BarLogFilter:
    """Ray Tune's warnings while the sweep's progress is shown: those that its own bookkeeping was slow
    ('... may be a performance bottleneck': nothing a user acts on) counted, not shown (`slow`); the
    others, while the bar is drawn, written on a line of their own above it (tqdm.write), not into it."""

    def __init__(self, progress: "SweepProgress"):
        self.progress = progress
        self.slow = 0

    def filter(self, record) -> bool:
        if SLOW_BOOKKEEPING in record.getMessage():
            self.slow += 1
            return False
        bar = self.progress._bar
        if bar is None or getattr(bar, "disable", True):
            return True
        bar.write(f"  {record.levelname.lower()}: {record.getMessage()}", file=sys.stderr)
        return False


def progress_line(done: float, total: float, counts: dict, n_trials: int, eta: float | None) -> str:
    """The line written every LINE_S seconds off a terminal: share done, head-epochs, trial counts, ETA."""
    return (f"  progress {100 * done / max(total, 1):3.0f}%  {round(done)}/{round(total)} head-epochs  "
            f"trials {counts['done']}/{n_trials} done {counts['running']} run"
            + (f" {counts['errored']} err" if counts["errored"] else "") + f"  eta {fmt_eta(eta)}")


class SweepProgress(Callback):
    """tqdm bar over the sweep's head-epochs (the epochs and the final evaluation, weighted, of each head).

    total: trials in the sweep; already_done: trials finished before a resume (they count as done);
    epochs: epochs per trial; heads: heads of each trial, in any order (when None, read from each
    trial's config['trial']['heads'] as Tune materialises it, the unseen ones taken as the mean);
    eval_steps: what a head's final evaluation counts, in epochs, until a trial has measured it (None:
    `epochs`, the evaluation as long as the training).
    """

    def __init__(self, total: int, already_done: int = 0, enabled: bool = True, epochs: int | None = None,
                 heads: Sequence[int] | None = None, done_before: Sequence[str] = (),
                 eval_steps: float | None = None):
        self.total, self.already_done, self.enabled, self.epochs = total, already_done, enabled, epochs
        self.done_before = set(done_before)       # trials done before this session (a resume): done from the start
        self._eta: tuple[float, float] | None = None    # (seconds left, when): the ETA only falls
        self._start: tuple[float, int] | None = None    # (when, work done) as this session's bar started
        self._rate_from: tuple[float, float] | None = None   # (when, share done) at this session's first progress
        self._line_at: float | None = None              # off a terminal: when the last progress line was written
        self._tick = 0.0
        self._log_filter = BarLogFilter(self)
        self.heads = list(heads) if heads is not None else None
        self._bar = None
        self._t0: dict[str, float] = {}
        self._epoch: dict[str, int] = {}
        # a Tune trial is a job: one trial, or a pack of trials run one after another (config 'members')
        self._member: dict[str, int] = {}         # job -> index of the trial it is running
        self._members_done: dict[str, int] = {}   # job -> trials of it finished
        self._head_epochs: dict[str, int] = {}    # job -> head-epochs it reported
        self._said: set[str] = set()              # trials with a 'done' line
        self._finished: set[str] = set()          # jobs that reported 'finished' (evaluation over)
        self.prior_eval_steps = float(max(1, int(epochs or 0)) if eval_steps is None else eval_steps)
        self._eval_measured: list[float] = []     # the final evaluations measured, in epochs (eval_epochs)
        self._reports: dict[str, list] = {}       # job -> [first, last] (when, epoch) of its trial's epoch reports
        self.clock = time.time

    def __getstate__(self):        # pickled into Tune's experiment state: drop the live bar
        d = dict(self.__dict__)
        d["_bar"] = None
        d["_log_filter"] = None
        return d

    @property
    def eval_steps(self) -> float:
        """A head's final evaluation, in epochs: the mean of the trials' measured ones, else the prior."""
        m = self._eval_measured
        return sum(m) / len(m) if m else self.prior_eval_steps

    def eta(self, done: float, total: float, now: float | None = None) -> float | None:
        """Seconds left: the work left at this session's measured rate (the share of the sweep done per
        second since its first progress, which the start-up before it does not slow: the total changes
        as the evaluation's weight is learned), never more than the previous ETA less the time since (so
        it only falls); None ('estimating') until the rate has MIN_RATE_S behind it."""
        now = self.clock() if now is None else now
        f = done / total if total > 0 else 1.0
        if self._start is None:
            self._start = (now, f)
        if self._rate_from is None and f > self._start[1]:
            self._rate_from = (now, f)
        est = None
        if self._rate_from is not None:
            t0, f0 = self._rate_from
            if f > f0 and now - t0 >= MIN_RATE_S:
                est = (1.0 - f) * (now - t0) / (f - f0)
        if done >= total:
            est = 0.0
        if self._eta is not None:
            left = max(0.0, self._eta[0] - (now - self._eta[1]))
            est = left if est is None else min(left, est)
        if est is not None:
            self._eta = (est, now)
        return est

    @staticmethod
    def _name(trial) -> str:
        return str(trial.config.get("trial", {}).get("name", trial.trial_id))

    @staticmethod
    def _heads_of(trial) -> int:
        try:
            return max(1, int(trial.config.get("trial", {}).get("heads", 1)))
        except (TypeError, ValueError):
            return 1

    @classmethod
    def _members(cls, trial) -> list[str]:
        return list(trial.config.get("trial", {}).get("members") or [cls._name(trial)])

    def _counts(self, trials) -> dict[str, int]:
        """Trials (not jobs) done / running / pending / errored."""
        c = {"done": 0, "running": 0, "pending": 0, "errored": 0}
        seen = 0
        for t in trials:
            st, n = t.status, len(self._members(t))
            seen += n
            k = min(self._members_done.get(self._name(t), 0), n)
            before = sum(1 for m in self._members(t) if m in self.done_before)
            if st == "TERMINATED" or before == n:
                c["done"] += n
                continue
            k = max(k, before)
            c["done"] += k
            if k < n:
                if st == "RUNNING":
                    c["running"] += 1
                elif st == "ERROR":
                    c["errored"] += 1
                else:
                    c["pending"] += 1
                c["pending"] += n - k - 1
        # trials the grid has not materialised yet count as pending
        c["pending"] += max(0, self.total - seen)
        return c

    def work(self, trials) -> tuple[float, float]:
        """(head-epochs done, head-epochs in the sweep); a head's: its epochs + its evaluation's weight."""
        E = max(0, int(self.epochs or 0))
        S = E + self.eval_steps
        seen = [self._heads_of(t) for t in trials]
        n_seen = sum(len(self._members(t)) for t in trials)
        if self.heads is not None:
            total = sum(self.heads) * S
        else:
            mean = sum(seen) / n_seen if n_seen else 1.0
            total = (sum(seen) + mean * max(0, self.total - n_seen)) * S
        done = 0
        for t, h in zip(trials, seen):
            name = self._name(t)
            if self.done_before and all(m in self.done_before for m in self._members(t)):
                done += h * S        # done before a resume: done from the bar's first line
            elif t.status != "TERMINATED" and name in self._head_epochs:
                # a job's reported head-epochs, plus an evaluation per head of its finished trials
                member_heads = (getattr(t, "config", None) or {}).get("trial", {}).get("member_heads") or []
                evaluated = sum(member_heads[:self._members_done.get(name, 0)]) * self.eval_steps
                done += min(self._head_epochs[name] + evaluated, h * S)
            else:
                done += head_epochs_done(t.status, h, self._epoch.get(name, 0), E, name in self._finished,
                                         self.eval_steps)
        return min(done, total), max(total, 1)

    def _refresh(self, trials, note: str | None = None) -> None:
        if not self.enabled:
            return
        done, total = self.work(trials)
        if self._bar is None:
            import shutil

            from tqdm.auto import tqdm
            # not a terminal (a log file, CI): no bar and no ANSI codes; the done/ERROR lines still come
            import logging
            self._bar = tqdm(total=round(total), initial=round(done), desc="sweep", unit="step", file=sys.stderr,
                             bar_format=BAR_FORMAT, ncols=min(shutil.get_terminal_size((80, 24)).columns, 120),
                             disable=not sys.stderr.isatty())
            for name in QUIET_LOGGERS:
                logging.getLogger(name).addFilter(self._log_filter)
        # the bar in whole head-epochs; n set, not added to: a learned evaluation weight moves done too
        self._bar.total = max(1, round(total))
        self._bar.n = min(round(done), self._bar.total)
        c = self._counts(trials)
        eta = self.eta(done, total)
        self._bar.set_postfix_str(f"eta {fmt_eta(eta)} trials {c['done']}/{self.total} done "
                                  f"{c['running']} run" + (f" {c['errored']} err" if c["errored"] else ""),
                                  refresh=False)
        self._bar.refresh()
        if note:
            self._bar.write(note, file=sys.stderr)
        now = self.clock()
        if self._bar.disable and (self._line_at is None or now - self._line_at >= LINE_S):
            self._line_at = now          # not a terminal: a line now and then, so a log shows the sweep moving
            print(progress_line(done, total, c, self.total, eta), file=sys.stderr, flush=True)

    def on_step_end(self, iteration, trials, **info):
        """Between reports: the ETA counts down (at most every TICK_S)."""
        now = self.clock()
        if self._bar is not None and now - self._tick >= TICK_S:
            self._tick = now
            self._refresh(trials)

    def on_trial_start(self, iteration, trials, trial, **info):
        self._t0[self._name(trial)] = self.clock()
        self._reports.pop(self._name(trial), None)
        self._refresh(trials)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        job, names = self._name(trial), self._members(trial)
        if "member" in result:
            try:
                self._member[job] = min(int(result["member"]), len(names) - 1)
            except (TypeError, ValueError):
                pass
        if "epoch" in result:
            self._epoch[job] = int(result["epoch"])
            if not result.get("member_finished") and not result.get("finished"):
                seen = self._reports.setdefault(job, [None, None])
                seen[1] = (self.clock(), int(result["epoch"]))
                seen[0] = seen[0] or seen[1]
        if "head_epochs" in result:
            self._head_epochs[job] = int(result["head_epochs"])
        if result.get("finished"):
            self._finished.add(job)
        note = None
        if result.get("member_finished"):
            i = self._member.get(job, 0)
            self._members_done[job] = max(self._members_done.get(job, 0), i + 1)
            now = self.clock()
            first, last = self._reports.pop(job, [None, None])
            w = eval_epochs(self._t0.get(job, now), first, last, now, max(0, int(self.epochs or 0)))
            if w is not None:
                self._eval_measured.append(w)
            note = self._done_line(names[i], now - self._t0.get(job, now))
            self._t0[job] = now          # the job's next trial starts now
        self._refresh(trials, note)

    def _done_line(self, name: str, took: float) -> str | None:
        if name in self._said:
            return None
        self._said.add(name)
        return f"  done    {name}  ({took:.0f} s)"

    def on_trial_complete(self, iteration, trials, trial, **info):
        job = self._name(trial)
        took = self.clock() - self._t0.get(job, self.clock())
        lines = [x for x in (self._done_line(n, took) for n in self._members(trial)) if x]
        self._refresh(trials, "\n".join(lines) or None)

    def on_trial_error(self, iteration, trials, trial, **info):
        job, names = self._name(trial), self._members(trial)
        failed = names[min(self._members_done.get(job, 0), len(names) - 1)]
        where = getattr(trial, 'path', None) or getattr(trial, 'local_path', '?')
        self._refresh(trials, f"  ERROR   {failed}  (see {where}/error.txt)")

    def on_experiment_end(self, trials, **info):
        if self._bar is not None:
            import logging
            self._refresh(trials)
            self._bar.close()
            self._bar = None
            for name in QUIET_LOGGERS:
                logging.getLogger(name).removeFilter(self._log_filter)
            if self._log_filter.slow:
                print(f"  note: Ray Tune said {self._log_filter.slow} time(s) that its own bookkeeping on the driver "
                      "was slow (saving its state, handling a trial's report)", file=sys.stderr)
