"""A trial's epoch reports are paced by Ray Train's poll (orchestration/stages/report_pace.py): an epoch is
reported only once a poll has passed since the previous report, so `ray.train.report` never waits for
the controller; the last epoch is left to the trial's member_finished report; fault injection forces
its epoch's report. A resume takes the newer of Ray's checkpoint and the trial folder's."""
from __future__ import annotations

import time

import pytest

from orchestration.stages.report_pace import DEFAULT_POLL_S, POLL_ENV, ReportPace, poll_interval
from orchestration.stages.trial import checkpoint_epoch, crashes_after


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_an_epoch_is_reported_once_a_poll_has_passed_since_the_last_report():
    clock = Clock()
    pace = ReportPace(2.0, clock)
    reported = []
    for epoch in range(1, 11):          # epochs of 0.7 s, 10 of them
        if pace.epoch_report_due(epoch, 10):
            reported.append(epoch)
            pace.sent()
        clock.t += 0.7
    # 1 at t=100; then the first epoch ending >= 2 s after it: epoch 4 (t=102.1), epoch 7 (t=104.2);
    # epoch 10 is the last: its member_finished report follows
    assert reported == [1, 4, 7]
    assert pace.skipped == 7


def test_slow_epochs_are_all_reported_but_the_last_and_a_forced_one_always():
    clock = Clock()
    pace = ReportPace(2.0, clock)
    got = []
    for epoch in range(1, 5):
        clock.t += 3.0
        if pace.epoch_report_due(epoch, 4):
            got.append(epoch)
            pace.sent()
    assert got == [1, 2, 3]
    assert pace.epoch_report_due(5, 5, forced=True)          # injected crash right after it: reported
    pace.sent()
    assert not pace.epoch_report_due(6, 8)                     # 0 s since the forced one
    assert pace.epoch_report_due(6, 8, forced=True)


def test_the_member_finished_report_restarts_the_wait():
    clock = Clock()
    pace = ReportPace(2.0, clock)
    assert pace.due()
    pace.sent()                     # e.g. worker_loop's member_finished report
    clock.t += 1.9
    assert not pace.epoch_report_due(1, 10)
    clock.t += 0.1
    assert pace.epoch_report_due(2, 10)


def test_poll_interval_follows_rays_variable_and_default():
    from ray.train.v2._internal import constants
    assert DEFAULT_POLL_S == constants.DEFAULT_HEALTH_CHECK_INTERVAL_S
    assert POLL_ENV == constants.HEALTH_CHECK_INTERVAL_S_ENV_VAR
    assert poll_interval({}) == 2.0
    assert poll_interval({POLL_ENV: "0.25"}) == 0.25
    assert poll_interval({POLL_ENV: " "}) == 2.0
    assert poll_interval({POLL_ENV: "soon"}) == 2.0


def test_checkpoint_epoch_and_crash_target():
    assert checkpoint_epoch("epoch_0007") == 7
    assert checkpoint_epoch("bibtex-A-s0-all.epoch_0012") == 12
    assert checkpoint_epoch("corrupt-epoch_0003") == 3
    assert checkpoint_epoch("latest") == -1
    assert crashes_after("2", "t", 2) and not crashes_after("2", "t", 3)
    assert crashes_after("2:t", "t", 2) and not crashes_after("2:u", "t", 2)
    assert not crashes_after(None, "t", 2)


@pytest.mark.slow
def test_paced_reports_do_not_wait_for_ray_trains_poll(ray_session, tmp_path):
    """A real one-worker Ray Train job of 30 short epochs: unpaced, each report after the first would
    wait about a poll (2 s); paced, only the first epoch's and the final report go to Ray, at most about a
    poll each, against some 29 polls unpaced."""
    import ray.train
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    out = tmp_path / "inside.txt"

    def paced_job(config):      # defined here: Ray pickles it by value
        import ray.train

        from orchestration.stages.report_pace import ReportPace
        pace = ReportPace()
        inside, sent = 0.0, 0
        for epoch in range(1, config["epochs"] + 1):
            time.sleep(0.05)                  # an epoch far shorter than Ray Train's 2 s poll
            if pace.epoch_report_due(epoch, config["epochs"]):
                t = time.perf_counter()
                ray.train.report({"epoch": epoch})
                inside += time.perf_counter() - t
                pace.sent()
                sent += 1
        t = time.perf_counter()
        ray.train.report({"finished": 1, "inside": inside, "sent": sent})
        inside += time.perf_counter() - t
        with open(config["out"], "w") as f:
            f.write(f"{inside} {sent}\n")

    trainer = DataParallelTrainer(
        paced_job, train_loop_config={"epochs": 30, "out": str(out)},
        scaling_config=ray.train.ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
        run_config=ray.train.RunConfig(name="paced", storage_path=str(tmp_path / "ray")))
    trainer.fit()
    inside, sent = out.read_text().split()
    assert int(sent) == 1                       # 30 x 0.05 s < 2 s: only the first epoch went to Ray
    # two report calls went to Ray (the first epoch's and the final one), each of which may wait up to one
    # poll on a loaded machine (1.63 s seen in CI); unpaced, the 30 calls would wait about 29 polls (~58 s)
    assert float(inside) < 2 * 2.0 + 1.0, f"{inside} s in ray.train.report"
