"""The capture race on a real GPU (skipped without CUDA): a CUDA graph captured on one thread while
another thread makes synchronising calls; a trial whose validation overlaps its epochs with graph
captures; and a capture that fails (a synchronising call inside it) leaving the trial training eagerly."""
from __future__ import annotations

import threading
import warnings

import pandas as pd
import pytest
import torch

from poxm_core.accel.graph import GraphedSteps
from poxm_core.training import run_trial
from poxm_core.training.capture_guard import CAPTURE_GUARD

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_captures_beside_a_thread_that_synchronises():
    """200 captures on this thread while another one copies to the host and synchronises its stream in
    a loop (what the overlapped validation does): every capture succeeds and replays right."""
    dev = torch.device("cuda")
    x = torch.randn(1 << 16, device=dev)
    stop, errors = threading.Event(), []

    def validation():
        s = torch.cuda.Stream(device=dev)
        y = torch.randn(1 << 16, device=dev)
        try:
            while not stop.is_set():
                with CAPTURE_GUARD.device_work(), torch.cuda.stream(s):
                    float((y * 2).sum().cpu())
                    torch.empty(1 << 20, device=dev)      # an allocation too
                    s.synchronize()
        except Exception as exc:   # noqa: BLE001
            errors.append(exc)
    t = threading.Thread(target=validation)
    t.start()
    try:
        for i in range(200):
            out = torch.empty_like(x)
            s = torch.cuda.Stream(device=dev)
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                out.copy_(x * 3)          # warm-up, as torch.cuda.graph asks
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with CAPTURE_GUARD.capture(), torch.cuda.graph(g, capture_error_mode="thread_local"):
                out.copy_(x * (i + 1))
            out.zero_()
            g.replay()
            torch.testing.assert_close(out, x * (i + 1))
    finally:
        stop.set()
        t.join(30)
    assert not errors, errors


def _trial(tmp_path, name, monkeypatch, graphs: bool, epochs=4):
    from test_trainer import PREP, SMALL, spec_of
    from trial_fixtures import tiny_config
    monkeypatch.setenv("POXM_VALIDATION_OVERLAP", "1")
    monkeypatch.setenv("POXM_CUDA_GRAPHS", "1" if graphs else "0")
    cfg = tiny_config(SMALL, epochs=epochs, batched_heads=True)
    cfg = cfg.model_copy(update={"device": "cuda"})
    return run_trial(cfg, spec_of(cfg, "poxm", "banditnet"), PREP, tmp_path / name, progress=False)


def test_a_trial_with_overlapped_validation_captures_and_finishes(tmp_path, monkeypatch):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="CUDA graph capture failed")
        df = _trial(tmp_path, "a", monkeypatch, graphs=True)
    assert len(df) and df.select_dtypes("number").notna().any().all()


def test_a_failed_capture_leaves_the_trial_training_eagerly(tmp_path, monkeypatch):
    """A synchronising call inside the capture (refused in any mode) breaks it: the trial goes on with
    the same steps without a graph and ends with the rows of a run without graphs (tolerance: the
    atomic adds' order)."""
    real = GraphedSteps._step

    def bad_step(self):
        if torch.cuda.is_current_stream_capturing():
            torch.cuda.synchronize()
        return real(self)
    monkeypatch.setattr(GraphedSteps, "_step", bad_step)
    with pytest.warns(RuntimeWarning, match="CUDA graph capture failed"):
        df = _trial(tmp_path, "broken", monkeypatch, graphs=True)
    monkeypatch.setattr(GraphedSteps, "_step", real)
    ref = _trial(tmp_path, "eager", monkeypatch, graphs=False)
    num = ref.select_dtypes("number").columns
    pd.testing.assert_frame_equal(df[num], ref[num], rtol=1e-3, atol=1e-4, check_dtype=False)
