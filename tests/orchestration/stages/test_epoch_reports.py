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
