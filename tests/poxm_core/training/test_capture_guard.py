"""A CUDA-graph capture and the overlapped validation kept apart (poxm_core/training/capture_guard.py).

The failure it prevents (seen on an H200): the training thread captured its step in a graph while the
validation thread, computing the previous epoch's estimates, made a synchronising call; CUDA refused the
call and invalidated the capture, and the trial died. Here the capture is a held `capture()` section and
the validation's device work a fake `val_estimates` that fails, as CUDA does, when it runs while a
capture is open: with the guard it never does, whichever side comes first."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch

from poxm_core.training import overlap
from poxm_core.training.capture_guard import CaptureGuard
from poxm_core.training.overlap import BackgroundValidation

CPU = torch.device("cpu")


class FakeDevice:
    """Validation device work that CUDA's global capture mode would refuse while a capture is open."""

    def __init__(self, guard: CaptureGuard, hold: threading.Event | None = None) -> None:
        self.guard, self.hold = guard, hold
        self.entered = threading.Event()
        self.during_capture: list[bool] = []

    def val_estimates(self, h, ev, reward, frozen=None):
        self.entered.set()
        self.during_capture.append(self.guard.capturing)
        if self.hold is not None:
            assert self.hold.wait(5)
        self.during_capture.append(self.guard.capturing)
        if any(self.during_capture):
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        return {"IS": (1.0, 0.1)}


@pytest.fixture
def fake(monkeypatch):
    def make(guard, hold=None):
        dev = FakeDevice(guard, hold)
        monkeypatch.setattr(overlap, "val_estimates", dev.val_estimates)
        monkeypatch.setattr(overlap, "freeze", lambda h, ev: (None, None))
        monkeypatch.setattr(overlap, "epoch_rows", lambda spec, trained, losses, ests, epoch: (ests, {}))
        monkeypatch.setenv("POXM_EVAL_THREADS", "1")
        return dev
    return make


def _heads(n=2):
    return [SimpleNamespace(trains=True, key=f"h{i}") for i in range(n)]


def test_validation_started_during_a_capture_waits_for_it_to_end(fake):
    guard = CaptureGuard()
    dev = fake(guard)
    bv = BackgroundValidation(CPU, guard=guard)
    try:
        with guard.capture():
            fut = bv.start(None, _heads(), {}, None, 1)
            ran_during = dev.entered.wait(0.5)       # on the old code it runs (and fails) at once
        assert not ran_during
        ests, _ = fut.result(timeout=10)
        assert ests == [{"IS": (1.0, 0.1)}] * 2 and dev.during_capture == [False] * 4
    finally:
        bv.close()


def test_a_capture_waits_for_the_validation_in_flight(fake):
    guard = CaptureGuard()
    release = threading.Event()
    dev = fake(guard, hold=release)
    bv = BackgroundValidation(CPU, guard=guard)
    captured = threading.Event()

    def capture():
        with guard.capture():
            captured.set()
    try:
        fut = bv.start(None, _heads(1), {}, None, 1)
        assert dev.entered.wait(5)
        t = threading.Thread(target=capture)
        t.start()
        assert not captured.wait(0.3)         # held back while the head's estimates run
        release.set()
        assert captured.wait(5)
        t.join(5)
        fut.result(timeout=10)
        assert dev.during_capture == [False, False]
    finally:
        release.set()
        bv.close()


def test_a_waiting_capture_goes_before_new_device_work():
    """Writer first: once a capture waits, the next head's work waits for the capture (else a long
    validation of many heads would hold the training thread for all of them)."""
    guard = CaptureGuard()
    order: list[str] = []
    first_in, release = threading.Event(), threading.Event()

    def work(name, gate=None):
        with guard.device_work():
            order.append(name)
            if gate is not None:
                first_in.set()
                assert gate.wait(5)

    def capture():
        with guard.capture():
            order.append("capture")
    a = threading.Thread(target=work, args=("a", release))
    a.start()
    assert first_in.wait(5)
    c = threading.Thread(target=capture)
    c.start()
    for _ in range(200):                       # the capture is waiting
        if guard._waiting:
            break
        threading.Event().wait(0.01)
    b = threading.Thread(target=work, args=("b",))
    b.start()
    assert not threading.Event().wait(0.2) and order == ["a"]
    release.set()
    for t in (a, c, b):
        t.join(5)
    assert order == ["a", "capture", "b"]
