"""The sweep bar counts head-epochs (epochs + the final evaluation at what it costs, in epochs), fits 80
columns and writes no ANSI codes off a terminal."""
from __future__ import annotations

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
    p = SweepProgress(total=3, epochs=10, eval_steps=1)      # an evaluation as long as one epoch
    trials = [_trial("a", "TERMINATED", 4), _trial("b", "RUNNING", 2)]
    p._epoch["b"] = 3
    # seen 4 + 2 heads, one unseen trial taken as the mean (3): 9 heads x 11 steps
    assert p.work(trials) == (44 + 6, 99)
    exact = SweepProgress(total=3, epochs=10, heads=[4, 2, 1], eval_steps=1)
    exact._epoch["b"] = 3
    assert exact.work(trials) == (50, 77)


def test_bar_is_not_full_while_the_last_trial_evaluates():
    p = SweepProgress(total=1, epochs=2, enabled=False)
    t = [_trial("a", "RUNNING", 3)]
    p.on_trial_result(0, t, t[0], {"epoch": 2})          # last epoch reported; the test evaluation follows
    assert p.work(t) == (6, 12)          # until measured, the evaluation counts as many epochs as training
    p.on_trial_result(0, t, t[0], {"epoch": 2, "finished": 1})
    assert p.work(t) == (12, 12)


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _train(p, t, clock, start, epoch_s, eval_s, epochs=5):
    """One trial of one head: epochs of epoch_s reported but the last (report_pace), then its evaluation.
    The ETA after each report."""
    clock.t = start
    p.on_trial_start(0, t, t[0])
    p.eta(*p.work(t))                    # the bar's first line (on_trial_start's refresh): the rate's start
    etas = []
    for e in range(1, epochs):
        clock.t = start + e * epoch_s
        p.on_trial_result(0, t, t[0], {"epoch": e, "member": 0})
        etas.append(p.eta(*p.work(t)))
    clock.t = start + epochs * epoch_s + eval_s
    p.on_trial_result(0, t, t[0], {"member_finished": 1, "member": 0, "finished": 1})
    etas.append(p.eta(*p.work(t)))
    return etas


def test_the_final_evaluation_counts_what_it_costs():
    # the quickstart: the final evaluation takes about as long as the 5 epochs. At the end of training
    # the bar is half way, not 5/6 (83 %, the evaluation as one step) with an ETA near 0
    p = SweepProgress(total=1, epochs=5, enabled=False)
    t = [_trial("a", "RUNNING", 1)]
    p.on_trial_result(0, t, t[0], {"epoch": 5})
    done, total = p.work(t)
    assert done / total == pytest.approx(0.5)


def test_the_evaluation_weight_is_learned_from_the_first_trial():
    clock = _Clock()
    p = SweepProgress(total=2, epochs=5, enabled=False, eval_steps=1)    # a prior 5 times too low
    p.clock = clock
    a, b = _trial("a", "RUNNING", 1), _trial("b", "PENDING", 1)
    _train(p, [a, b], clock, 0.0, epoch_s=10.0, eval_s=50.0)
    assert p.eval_steps == pytest.approx(5.0)      # (100 s - 40 s - one unreported 10 s epoch) / 10 s
    a.status, b.status = "TERMINATED", "RUNNING"
    clock.t = 140.0
    p.on_trial_result(0, [b, a], b, {"epoch": 4, "member": 0})
    done, total = p.work([a, b])
    assert (done, total) == (pytest.approx(14.0), pytest.approx(20.0))     # not 10/12 with one step


def test_eta_counts_the_evaluation_and_only_falls():
    clock = _Clock()
    p = SweepProgress(total=2, epochs=5, enabled=False)
    p.clock = clock
    a, b = _trial("a", "RUNNING", 1), _trial("b", "PENDING", 1)
    etas = _train(p, [a, b], clock, 0.0, epoch_s=10.0, eval_s=50.0)    # the evaluation as long as training
    a.status, b.status = "TERMINATED", "RUNNING"
    etas += _train(p, [b, a], clock, 100.0, epoch_s=10.0, eval_s=50.0)
    assert etas[:2] == [None, None]          # the rate from the first epoch on needs 30 s behind it: estimating
    etas = [e for e in etas if e is not None]
    assert all(x >= y for x, y in zip(etas, etas[1:])), etas
    # b's last reported epoch (t = 140 s): one epoch and the 50 s evaluation are left (not 28 s: one step)
    assert etas[-2] == pytest.approx(60.0)
    assert etas[-1] == 0.0


def test_not_a_terminal_gives_lines_without_ansi(stderr_buffer):
    # stderr redirected to a non-terminal buffer (a real stream object, not a mock of the callback)
    buf = stderr_buffer(tty=False)
    p = SweepProgress(total=2, epochs=2)
    t = [_trial("a", "RUNNING", 3), _trial("b", "PENDING", 1)]
    p.on_trial_start(0, t, t[0])
    p.on_trial_result(0, t, t[0], {"epoch": 1})
    t[0].status = "TERMINATED"
    p.on_trial_complete(0, t, t[0])
    p.on_experiment_end(t)
    out = buf.getvalue()
    assert "done    a" in out and "\x1b[" not in out and "%|" not in out
    # a progress line at once (no bar to show it): the share done, the trial counts, the ETA's state
    assert out.splitlines()[0] == "  progress   0%  0/16 head-epochs  trials 0/2 done 1 run  eta estimating"


def test_not_a_terminal_a_progress_line_every_30_s_with_a_measured_eta(stderr_buffer):
    buf = stderr_buffer(tty=False)
    clock = _Clock()
    p = SweepProgress(total=1, epochs=10, eval_steps=0)
    p.clock = clock
    t = [_trial("a", "RUNNING", 2)]
    p.on_trial_start(0, t, t[0])                       # t = 0: Ray and the trial start up
    for now, epoch in ((100.0, 1), (110.0, 2), (125.0, 3), (131.0, 4), (140.0, 5)):
        clock.t = now
        p.on_trial_result(0, t, t[0], {"epoch": epoch})
    lines = [x for x in buf.getvalue().splitlines() if x.startswith("  progress")]
    # lines at 0, 100 (30 s after the first) and 131 s (30 s after that); none in between
    assert [x.split("eta ")[1] for x in lines] == ["estimating", "estimating", "01:02"]
    # at 131 s: 8 of 20 head-epochs, the rate from the first epoch (100 s, 2 of 20) on: 6 in 31 s,
    # 12 left -> 62 s (01:02); the start-up's 100 s do not count (from the start: 0.4 done in 131 s -> 196 s).
    # At 140 s: 10 of 20, 8 in 40 s -> 50 s, below the 62 - 9 s counted down
    assert p.eta(10, 20, now=140.0) == pytest.approx(50.0)
    assert "40%  8/20 head-epochs  trials 0/1 done 1 run" in lines[-1]


@pytest.mark.parametrize("heads", [None, [3, 1]])
def test_bar_on_a_terminal_shows_head_epochs(stderr_buffer, heads):
    buf = stderr_buffer(tty=True)
    p = SweepProgress(total=2, epochs=2, heads=heads)
    t = [_trial("a", "RUNNING", 3), _trial("b", "PENDING", 1)]
    p.on_trial_start(0, t, t[0])
    p.on_trial_result(0, t, t[0], {"epoch": 1})
    assert p._bar.n == 3 and p._bar.total == 16   # 3 heads x epoch 1 of 4 x (2 epochs + an evaluation of 2)
    out = buf.getvalue()
    assert "3/16, eta estimating trials 0/2 done 1 run" in out
    p.on_experiment_end(t)


def test_bar_is_readable_in_80_columns(stderr_buffer, monkeypatch):
    buf = stderr_buffer(tty=True)
    monkeypatch.setenv("COLUMNS", "80")
    clock = _Clock()
    p = SweepProgress(total=120, epochs=20)
    p.clock = clock
    t = [_trial(f"t{i:03d}", "RUNNING", 8) for i in range(4)] + [_trial("t9", "ERROR", 8)]
    p.on_trial_start(0, t, t[0])

    def bar_after(now, epoch):
        clock.t = now
        p.on_trial_result(0, t, t[0], {"epoch": epoch})
        line = buf.getvalue().split("\r")[-1]
        assert len(line) <= 80
        return line, line[line.index("|") + 1:line.rindex("|")]
    line, bar = bar_after(10.0, 1)
    assert "estimating" in line and len(bar) >= 10, line      # the widest postfix, for the first half minute
    line, bar = bar_after(60.0, 13)
    assert len(bar) >= 15, line          # the old postfix left the bar 1 character at 110 columns
    p.on_experiment_end(t)


def test_eta_only_falls_and_counts_down_between_reports():
    p = SweepProgress(total=1, epochs=2, enabled=False)
    assert p.eta(0, 100, now=0.0) is None                 # nothing done yet in this session: no guess
    assert p.eta(10, 100, now=300.0) is None              # the first progress (after 300 s of start-up)
    assert p.eta(15, 100, now=320.0) is None              # a rate over 20 s: still estimating
    assert p.eta(20, 100, now=330.0) == pytest.approx(240.0)   # 10 % in 30 s, 80 % left; not 990 s from t = 0
    assert p.eta(20, 100, now=360.0) == pytest.approx(210.0)   # no report for 30 s: counts down, does not stay
    # a slow stretch (30 % in 200 s would say 467 s): the ETA does not rise
    assert p.eta(40, 100, now=500.0) == pytest.approx(70.0)
    assert p.eta(100, 100, now=520.0) == 0.0


def test_a_resume_starts_at_the_trials_already_done():
    p = SweepProgress(total=4, already_done=2, epochs=2, enabled=False, done_before=["a", "b"])
    t = [_trial("a", "PENDING", 3), _trial("b", "PENDING", 3), _trial("c", "RUNNING", 3), _trial("d", "PENDING", 3)]
    assert p._counts(t)["done"] == 2
    assert p.work(t) == (2 * 3 * 4, 4 * 3 * 4)             # their head-epochs done from the first line


@pytest.mark.parametrize("tty", [True, False])
def test_ray_warnings_stay_out_of_the_bar(stderr_buffer, tty):
    import logging

    from orchestration.stages.progress import QUIET_LOGGERS, BarLogFilter
    for name in QUIET_LOGGERS:       # bars of other tests that never ended: their filters would count first
        for f in [f for f in logging.getLogger(name).filters if isinstance(f, BarLogFilter)]:
            logging.getLogger(name).removeFilter(f)
    buf = stderr_buffer(tty=tty)
    p = SweepProgress(total=1, epochs=2)
    t = [_trial("a", "RUNNING", 3)]
    p.on_trial_start(0, t, t[0])
    # Ray Tune's slow-bookkeeping warnings (both loggers that write them): counted, said once at the end
    logging.getLogger("ray.tune.utils.util").warning("The `x` operation took 0.9 s, which may be a performance bottleneck.")
    logging.getLogger("ray.tune.execution.experiment_state").warning(
        "Saving the experiment state (...) took ~1.20 seconds, which may be a performance bottleneck.\nThis")
    # another warning: on a line of its own above the bar
    logging.getLogger("ray.tune.execution.tune_controller").warning("Trial x: something to know")
    out = buf.getvalue()
    assert "bottleneck" not in out
    if tty:
        line = next(x for x in out.replace("\r", "\n").split("\n") if "something to know" in x)
        assert "%|" not in line and line.strip().startswith("warning:")
    p.on_experiment_end(t)
    assert "Ray Tune said 2 time(s) that its own bookkeeping on the driver was slow" in buf.getvalue()
    assert p._log_filter not in logging.getLogger("ray.tune.utils.util").filters
