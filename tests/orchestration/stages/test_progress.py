"""The sweep bar counts head-steps (epochs + the final evaluation), fits 80 columns and writes no ANSI
codes off a terminal."""
from __future__ import annotations

import io
import sys
from types import SimpleNamespace

import pytest

from orchestration.stages.progress import SweepProgress, head_epochs_done


def _trial(name, status, heads):
    return SimpleNamespace(trial_id=name, status=status, config={"trial": {"name": name, "heads": heads}})


def test_head_epochs_done_hand_values():
    # a trial of 4 heads and 10 epochs has 4 x (10 + 1) head-steps: its epochs and its final evaluation
    assert head_epochs_done("TERMINATED", 4, 0, 10) == 44
    assert head_epochs_done("RUNNING", 4, 3, 10) == 12
    assert head_epochs_done("RUNNING", 4, 10, 10) == 40          # last epoch reported, evaluation running
    assert head_epochs_done("RUNNING", 4, 10, 10, finished=True) == 44
    assert head_epochs_done("PENDING", 4, 0, 10) == 0
    assert head_epochs_done("ERROR", 2, 12, 10) == 20   # never more than the trial's epochs


def test_work_counts_heads_times_steps_and_estimates_unseen_trials():
    p = SweepProgress(total=3, epochs=10)
    trials = [_trial("a", "TERMINATED", 4), _trial("b", "RUNNING", 2)]
    p._epoch["b"] = 3
    # seen 4 + 2 heads, one unseen trial taken as the mean (3): 9 heads x 11 steps
    assert p.work(trials) == (44 + 6, 99)
    exact = SweepProgress(total=3, epochs=10, heads=[4, 2, 1])
    exact._epoch["b"] = 3
    assert exact.work(trials) == (50, 77)


def test_bar_is_not_full_while_the_last_trial_evaluates():
    p = SweepProgress(total=1, epochs=2, enabled=False)
    t = [_trial("a", "RUNNING", 3)]
    p.on_trial_result(0, t, t[0], {"epoch": 2})          # last epoch reported; the test evaluation follows
    assert p.work(t) == (6, 9)
    p.on_trial_result(0, t, t[0], {"epoch": 2, "finished": 1})
    assert p.work(t) == (9, 9)


class _NotATTY(io.StringIO):
    def isatty(self):
        return False


def test_not_a_terminal_gives_lines_without_ansi(monkeypatch):
    # stderr redirected to a non-terminal buffer (a real stream object, not a mock of the callback)
    buf = _NotATTY()
    monkeypatch.setattr(sys, "stderr", buf)
    p = SweepProgress(total=2, epochs=2)
    t = [_trial("a", "RUNNING", 3), _trial("b", "PENDING", 1)]
    p.on_trial_start(0, t, t[0])
    p.on_trial_result(0, t, t[0], {"epoch": 1})
    t[0].status = "TERMINATED"
    p.on_trial_complete(0, t, t[0])
    p.on_experiment_end(t)
    out = buf.getvalue()
    assert "done    a" in out and "\x1b[" not in out and "head-epochs" not in out


@pytest.mark.parametrize("heads", [None, [3, 1]])
def test_bar_on_a_terminal_shows_head_epochs(monkeypatch, heads):
    class TTY(io.StringIO):
        def isatty(self):
            return True
    buf = TTY()
    monkeypatch.setattr(sys, "stderr", buf)
    p = SweepProgress(total=2, epochs=2, heads=heads)
    t = [_trial("a", "RUNNING", 3), _trial("b", "PENDING", 1)]
    p.on_trial_start(0, t, t[0])
    p.on_trial_result(0, t, t[0], {"epoch": 1})
    assert p._bar.n == 3 and p._bar.total == 12   # 3 heads x epoch 1 of 4 x (2 epochs + evaluation)
    out = buf.getvalue()
    assert "3/12" in out and "trials 0/2 done 1 run" in out and "eta " in out
    p.on_experiment_end(t)


def test_bar_is_readable_in_80_columns(monkeypatch):
    class TTY(io.StringIO):
        def isatty(self):
            return True
    buf = TTY()
    monkeypatch.setattr(sys, "stderr", buf)
    monkeypatch.setenv("COLUMNS", "80")
    p = SweepProgress(total=120, epochs=20)
    t = [_trial(f"t{i:03d}", "RUNNING", 8) for i in range(4)] + [_trial("t9", "ERROR", 8)]
    p.on_trial_start(0, t, t[0])
    p.on_trial_result(0, t, t[0], {"epoch": 13})
    line = buf.getvalue().split("\r")[-1]
    assert len(line) <= 80
    bar = line[line.index("|") + 1:line.rindex("|")]
    assert len(bar) >= 15, line          # the old postfix left the bar 1 character at 110 columns
    p.on_experiment_end(t)


def test_eta_only_falls_and_counts_down_between_reports():
    p = SweepProgress(total=1, epochs=2, enabled=False)
    assert p.eta(0, 100, now=0.0) is None                 # nothing done yet in this session: no guess
    assert p.eta(10, 100, now=10.0) == pytest.approx(90.0)
    assert p.eta(10, 100, now=40.0) == pytest.approx(60.0)    # no report for 30 s: counts down, does not stay
    # a slow stretch (the rate falls: 20 of 100 in 100 s would say 400 s): the ETA does not rise
    assert p.eta(20, 100, now=100.0) == pytest.approx(0.0)
    assert p.eta(100, 100, now=120.0) == 0.0


def test_a_resume_starts_at_the_trials_already_done():
    p = SweepProgress(total=4, already_done=2, epochs=2, enabled=False, done_before=["a", "b"])
    t = [_trial("a", "PENDING", 3), _trial("b", "PENDING", 3), _trial("c", "RUNNING", 3), _trial("d", "PENDING", 3)]
    assert p._counts(t)["done"] == 2
    assert p.work(t) == (2 * 3 * 3, 4 * 3 * 3)             # their steps done from the first line


def test_ray_warnings_go_above_the_bar_not_into_it(monkeypatch):
    import logging

    class TTY(io.StringIO):
        def isatty(self):
            return True
    buf = TTY()
    monkeypatch.setattr(sys, "stderr", buf)
    p = SweepProgress(total=1, epochs=2)
    t = [_trial("a", "RUNNING", 3)]
    p.on_trial_start(0, t, t[0])
    logging.getLogger("ray.tune.utils.util").warning("The `x` operation took 0.9 s, which may be a performance bottleneck.")
    out = buf.getvalue()
    line = next(x for x in out.replace("\r", "\n").split("\n") if "bottleneck" in x)
    assert "%|" not in line and line.strip().startswith("warning:")
    p.on_experiment_end(t)
    assert p._log_filter not in logging.getLogger("ray.tune.utils.util").filters
