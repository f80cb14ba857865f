"""An epoch's validation estimates computed beside the next epoch's training (poxm_core/training/overlap.py;
on by default on a GPU, forced here on the CPU with POXM_VALIDATION_OVERLAP=1): the rows are those of the
schedule without it, each checkpoint holds its own epoch's parameters and rows (a restart from it equals
an uninterrupted run), and on_epoch still sees every epoch in order with its checkpoint."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from poxm_core.common.errors import PoxmInputError
from poxm_core.training import run_trial
from poxm_core.training.checkpoint import load_checkpoint
from poxm_core.training.overlap import ENV, overlap_wanted
from test_trainer import PREP, SMALL, spec_of
from trial_fixtures import tiny_config

TWO_PHASE = {**SMALL, "dr_poxm": {"p": [4], "lr": 0.01}}     # DR-POXM: the reward model trains first (phase 1)


def _run(tmp, name, overlap, monkeypatch, cfg, spec, **kw):
    monkeypatch.setenv(ENV, "1" if overlap else "0")
    return run_trial(cfg, spec, PREP, tmp / name, progress=False, **kw)


def test_rows_and_checkpoints_equal_the_schedule_without_it(tmp_path, monkeypatch):
    cfg = tiny_config(TWO_PHASE, epochs=3)
    spec = spec_of(cfg, "poxm", "banditnet", "dm", "dr_poxm")
    seen = {True: [], False: []}
    frames = {ov: _run(tmp_path, f"ov{ov}", ov, monkeypatch, cfg, spec,
                       on_epoch=lambda e, m, c, ov=ov: seen[ov].append((e, sorted(m), c is not None)))
              for ov in (False, True)}
    pd.testing.assert_frame_equal(frames[False], frames[True])
    assert seen[True] == seen[False] and [e for e, _, _ in seen[True]] == [1, 2, 3]
    for ep in ("epoch_0002", "epoch_0003"):
        a, b = (load_checkpoint(tmp_path / f"ov{ov}" / "checkpoints" / ep, torch.device("cpu")) for ov in (False, True))
        pd.testing.assert_frame_equal(pd.DataFrame(a["rows"]), pd.DataFrame(b["rows"]))
        for k in a["heads"]:
            assert torch.equal(a["heads"][k]["W"], b["heads"][k]["W"])


@pytest.mark.slow
def test_a_restart_from_a_checkpoint_written_meanwhile_equals_uninterrupted(tmp_path, monkeypatch):
    """With the overlap, epoch 2's checkpoint and report come after epoch 3 has trained: the checkpoint
    must still hold epoch 2's parameters and rows."""
    cfg = tiny_config(SMALL, epochs=4)
    spec = spec_of(cfg, "poxm", "banditnet")
    full = _run(tmp_path, "a", False, monkeypatch, cfg, spec)

    def crash(epoch, metrics, ckpt):
        if epoch == 2:
            raise RuntimeError("killed")
    with pytest.raises(RuntimeError, match="killed"):
        _run(tmp_path, "b", True, monkeypatch, cfg, spec, on_epoch=crash)
    seen = []
    again = _run(tmp_path, "b", True, monkeypatch, cfg, spec, on_epoch=lambda e, m, c: seen.append(e))
    assert seen == [2, 3, 4]        # epoch 2's on_epoch never returned: handed over again from its checkpoint
    pd.testing.assert_frame_equal(full, again)


@pytest.mark.slow
def test_checkpoint_every_with_the_overlap(tmp_path, monkeypatch):
    cfg = tiny_config(SMALL, epochs=4, checkpoint_every=2)
    spec = spec_of(cfg, "poxm")
    seen = []
    full = _run(tmp_path, "a", True, monkeypatch, cfg, spec, on_epoch=lambda e, m, c: seen.append((e, c is not None)))
    assert seen == [(1, False), (2, True), (3, False), (4, True)]
    pd.testing.assert_frame_equal(full, _run(tmp_path, "b", False, monkeypatch, cfg, spec))


def test_when_it_is_used(monkeypatch):
    from poxm_core.training import overlap
    from poxm_core.training.trial_setup import build_heads
    cfg = tiny_config(SMALL)
    heads, _ = build_heads(cfg, spec_of(cfg, "poxm", "banditnet"), PREP, torch.device("cpu"))
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    monkeypatch.delenv(ENV, raising=False)
    assert not overlap_wanted(cpu, heads) and overlap_wanted(gpu, heads)      # default: GPU trials
    monkeypatch.setenv(ENV, "1")
    assert overlap_wanted(cpu, heads)
    monkeypatch.setenv(ENV, "0")
    assert not overlap_wanted(gpu, heads)
    monkeypatch.setenv(ENV, "")
    monkeypatch.setattr(overlap, "OVERLAP_MAX_BYTES", 100)                   # output layers too large to copy
    assert not overlap_wanted(gpu, heads)
    monkeypatch.setenv(ENV, "yes")
    with pytest.raises(PoxmInputError, match="POXM_VALIDATION_OVERLAP='yes'"):
        overlap_wanted(gpu, heads)
