"""A head whose parameters turn NaN or infinite stops the trial at the end of that epoch with a message
naming the head, before anything is evaluated or written (a NaN policy would otherwise score like
padding: estimates of 0, and a failure only at the final greedy ranking, naming nothing)."""
from __future__ import annotations

import pytest
import torch

from orchestration import cli
from poxm_core.common.errors import DivergedError
from poxm_core.methods.poxm import POXM
from poxm_core.training.command import pick_trial
from poxm_core.training.trainer import check_finite, run_trial
from poxm_core.training.trial_setup import build_heads
from tests.trial_fixtures import tiny_config, tiny_prepared

PREP = tiny_prepared(n_tr=80, L=20, K=8)
METHODS = {"logging": {}, "dm": {"lr": 0.01}, "poxm": {"p": [4, 8], "lam": [0.5], "lr": 0.01},
           "dr_poxm": {"p": [4], "lr": 0.01}}


def test_check_finite_names_only_the_broken_head():
    cfg = tiny_config(METHODS)
    spec = pick_trial(cfg)
    heads, _ = build_heads(cfg, spec, PREP, torch.device("cpu"))
    check_finite(heads, spec, 1)                              # a fresh trial is finite
    broken = next(h for h in heads if h.key.startswith("poxm/p=8"))
    broken.policy.out.b[3] = float("inf")
    with pytest.raises(DivergedError, match=r"poxm/p=8/lam=0\.5 became non-finite .* in epoch 7") as err:
        check_finite(heads, spec, 7)
    assert "poxm/p=4" not in str(err.value) and "dr_poxm" not in str(err.value)


def test_a_diverging_head_stops_the_trial_before_results_are_written(tmp_path, monkeypatch):
    real = POXM.loss

    def nan_for_p8(self, score, batch, ctx):
        # the p=8 head's loss stays finite but its gradient is NaN: the pattern that broke DR-POXM, a
        # torch.where whose unused branch overflows (0 * inf = NaN in the backward pass)
        loss = real(self, score, batch, ctx)
        if ctx.p != 8:
            return loss
        return loss + torch.where(torch.tensor(False), torch.exp(1000 * loss.abs() + 100), torch.zeros(()))

    monkeypatch.setattr(POXM, "loss", nan_for_p8)
    cfg = tiny_config(METHODS, epochs=3)
    with pytest.raises(DivergedError, match=r"poxm/p=8/lam=0\.5 became non-finite .* in epoch 1;"):
        run_trial(cfg, pick_trial(cfg), PREP, tmp_path / "trial", progress=False)
    assert not (tmp_path / "trial" / "rows.csv").exists() and not (tmp_path / "trial" / "summary.json").exists()


def test_a_non_finite_loss_is_the_same_error(tmp_path, monkeypatch):
    real = POXM.loss
    monkeypatch.setattr(POXM, "loss", lambda self, score, batch, ctx: real(self, score, batch, ctx) * float("nan"))
    cfg = tiny_config(METHODS, epochs=2)
    with pytest.raises(DivergedError, match=r"poxm/p=4/lam=0\.5: non-finite training loss in epoch 1"):
        run_trial(cfg, pick_trial(cfg), PREP, tmp_path / "trial", progress=False)


def test_the_cli_says_it_in_one_line(monkeypatch, capsys):
    def diverge(*a, **k):
        raise DivergedError("trial tiny-A-s0: parameters of dr_poxm/p=4/lam=none became non-finite (NaN or inf) "
                            "in epoch 2; no results are written for this trial")

    monkeypatch.setattr("poxm_core.training.train_command", diverge)
    assert cli.main(["train", "configs/quickstart.yaml", "--out", "unused"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["poxm: error: trial tiny-A-s0: parameters of dr_poxm/p=4/lam=none became non-finite (NaN or inf) "
                   "in epoch 2; no results are written for this trial"]
