"""The sweep bar counts head-epochs (issue 10 item 4) and writes no ANSI codes off a terminal."""
from __future__ import annotations

import io
import sys
from types import SimpleNamespace

import pytest

from orchestration.progress import SweepProgress, head_epochs_done


def _trial(name, status, heads):
    return SimpleNamespace(trial_id=name, status=status, config={"trial": {"name": name, "heads": heads}})


def test_head_epochs_done_hand_values():
    assert head_epochs_done("TERMINATED", 4, 0, 10) == 40
    assert head_epochs_done("RUNNING", 4, 3, 10) == 12
    assert head_epochs_done("PENDING", 4, 0, 10) == 0
    assert head_epochs_done("ERROR", 2, 12, 10) == 20   # never more than the trial's work


def test_work_counts_heads_times_epochs_and_estimates_unseen_trials():
    p = SweepProgress(total=3, epochs=10)
    trials = [_trial("a", "TERMINATED", 4), _trial("b", "RUNNING", 2)]
    p._epoch["b"] = 3
    # seen 4 + 2 heads, one unseen trial taken as the mean (3): 9 heads x 10 epochs
    assert p.work(trials) == (40 + 6, 90)
    exact = SweepProgress(total=3, epochs=10, heads=[4, 2, 1])
    exact._epoch["b"] = 3
    assert exact.work(trials) == (46, 70)


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
    assert p._bar.n == 3 and p._bar.total == 8   # 3 heads x epoch 1 of 4 x 2 head-epochs
    out = buf.getvalue()
    assert "3/8" in out and "trials done=0/2" in out and "<" in out   # tqdm's elapsed<remaining (the ETA)
    p.on_experiment_end(t)
