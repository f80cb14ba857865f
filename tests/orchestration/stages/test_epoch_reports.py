"""The test hold (POXM_INJECT_HOLD): parsed with a one-line error, a no-op on other epochs, waits
while its file exists and stops waiting when the file goes or the limit passes."""
from __future__ import annotations

import threading
import time

import pytest

from orchestration.stages.epoch_reports import HOLD_ENV, hold, hold_spec


def test_hold_spec_parses_and_names_a_malformed_value(monkeypatch, tmp_path):
    monkeypatch.delenv(HOLD_ENV, raising=False)
    assert hold_spec() is None
    monkeypatch.setenv(HOLD_ENV, f"3:{tmp_path / 'h'}")
    assert hold_spec() == (3, tmp_path / "h")
    for bad in ("3", "x:/tmp/h", "3:"):
        monkeypatch.setenv(HOLD_ENV, bad)
        with pytest.raises(ValueError, match=HOLD_ENV):
            hold_spec()


def test_hold_waits_while_its_file_exists(tmp_path):
    f = tmp_path / "hold"
    f.write_text("")
    t0 = time.monotonic()
    hold((1, f), epoch=2)                      # another epoch: no wait
    assert time.monotonic() - t0 < 0.05
    threading.Timer(0.4, f.unlink).start()
    t0 = time.monotonic()
    hold((1, f), epoch=1)
    assert 0.35 < time.monotonic() - t0 < 5.0   # released when the file went
    f.write_text("")
    t0 = time.monotonic()
    hold((1, f), epoch=1, max_s=0.3)             # never removed: gives up at the limit
    assert 0.25 < time.monotonic() - t0 < 5.0


class _Session:
    def __init__(self):
        self.reports = []

    def report(self, metrics, ckpt_dir=None, name=None):
        self.reports.append((metrics["epoch"], name))


class _Files:
    def __init__(self, store=None):
        self.store = store

    def set_state(self, *a, **k):
        pass


def _reports(monkeypatch, tmp_path, store=None, every="60", epochs=6, step_s=25.0):
    from orchestration.stages.epoch_reports import RAY_CHECKPOINT_ENV, EpochReports
    monkeypatch.setenv(RAY_CHECKPOINT_ENV, every)
    session, now = _Session(), [0.0]
    rep = EpochReports(trial="t", files=_Files(store), out_dir=tmp_path, logger=None, pace=None, crash=None,
                       epochs=epochs, member=0, heads=1, head_epochs_before=0, packed=False, session=session)
    rep._clock = lambda: now[0]
    for e in range(1, epochs + 1):
        rep(e, {}, tmp_path / f"epoch_{e:04d}")
        now[0] += step_s
    return session.reports


def test_ray_gets_a_checkpoint_only_every_so_many_seconds(monkeypatch, tmp_path):
    """Epochs of 25 s, a checkpoint for Ray every 60 s: epochs 1, 4 (75 s after 1) carry one; every epoch
    is still reported (metrics), and the trial folder keeps every checkpoint (resume takes the newer)."""
    assert _reports(monkeypatch, tmp_path) == [(1, "epoch_0001"), (2, None), (3, None), (4, "epoch_0004"),
                                               (5, None), (6, None)]
    assert [n for _, n in _reports(monkeypatch, tmp_path, every="0")] == [f"epoch_{e:04d}" for e in range(1, 7)]


def test_storage_mode_hands_ray_every_checkpoint(monkeypatch, tmp_path):
    assert all(n is not None for _, n in _reports(monkeypatch, tmp_path, store=object()))


def test_ray_checkpoint_seconds_are_checked(monkeypatch):
    from orchestration.stages.epoch_reports import RAY_CHECKPOINT_ENV, ray_checkpoint_s
    assert ray_checkpoint_s({}) == 60.0 and ray_checkpoint_s({RAY_CHECKPOINT_ENV: "5"}) == 5.0
    with pytest.raises(ValueError, match=RAY_CHECKPOINT_ENV):
        ray_checkpoint_s({RAY_CHECKPOINT_ENV: "soon"})


def test_resume_takes_the_trial_folders_checkpoint_when_ray_has_an_older_one(tmp_path):
    """Ray gets a checkpoint only now and then: a trial continues from the newer of Ray's and its folder's."""
    from types import SimpleNamespace

    from orchestration.stages.trial import resume_point
    for e in (3, 5):
        (tmp_path / "checkpoints" / f"epoch_{e:04d}").mkdir(parents=True)
        (tmp_path / "checkpoints" / f"epoch_{e:04d}" / "state.pt").write_bytes(b"")
    older, newer = (SimpleNamespace(path=str(tmp_path / "ray" / f"epoch_{e:04d}")) for e in (3, 6))
    assert resume_point(older, tmp_path) == (None, "trial_dir:epoch_0005")
    assert resume_point(newer, tmp_path) == (newer, "ray:epoch_0006")
    assert resume_point(None, tmp_path) == (None, "trial_dir:epoch_0005")
