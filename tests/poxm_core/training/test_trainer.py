"""The single-trial trainer: resume = uninterrupted, grouped heads = heads alone, the rows schema,
hand-checkable validation quantities, and the trial grid."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from poxm_core.common.errors import PoxmInputError
from poxm_core.estimators.validation import reported_labels
from poxm_core.common.results import COLUMNS
from poxm_core.training import HeadSpec, TrialSpec, run_trial, trial_specs
from poxm_core.training.evaluation import PolicyView, _greedy_logpi, val_arrays
from poxm_core.training.command import final_table, pick_trial
from trial_fixtures import tiny_config, tiny_prepared

PREP = tiny_prepared()
SMALL = {"logging": {}, "poxm": {"p": [4], "lam": [0.5], "lr": 0.01},
         "banditnet": {"lam": [0.5], "lr": 0.01, "softmax": "sampled", "n_negatives": 6}, "dm": {"lr": 0.01}}


def spec_of(cfg, *methods):
    return next(s for s in trial_specs(cfg, "method") if s.methods == methods) if len(methods) == 1 else \
        TrialSpec("tiny", "A", 0, tuple(h for s in trial_specs(cfg, "method") if s.methods[0] in methods for h in s.heads))


def head_rows(df, method, p=-1):
    return df[(df.method == method) & (df.p == p)].reset_index(drop=True)


# --------------------------------------------------------------------------------- resume

@pytest.mark.slow
def test_resume_after_one_epoch_equals_uninterrupted(tmp_path):
    spec = spec_of(tiny_config(SMALL), "poxm", "banditnet")
    full = run_trial(tiny_config(SMALL, epochs=3), spec, PREP, tmp_path / "a", progress=False)
    run_trial(tiny_config(SMALL, epochs=1), spec, PREP, tmp_path / "b", progress=False)
    resumed = run_trial(tiny_config(SMALL, epochs=3), spec, PREP, tmp_path / "b", progress=False)
    pd.testing.assert_frame_equal(full, resumed)
    assert sorted(p.name for p in (tmp_path / "b" / "checkpoints").iterdir()) == ["epoch_0002", "epoch_0003"]


@pytest.mark.slow
def test_crash_in_on_epoch_then_restart_equals_uninterrupted(tmp_path):
    cfg = tiny_config(SMALL, epochs=3)
    spec = spec_of(cfg, "poxm")
    full = run_trial(cfg, spec, PREP, tmp_path / "a", progress=False)

    def crash(epoch, metrics, ckpt):
        if epoch == 2:
            raise RuntimeError("killed")
    with pytest.raises(RuntimeError, match="killed"):
        run_trial(cfg, spec, PREP, tmp_path / "b", on_epoch=crash, progress=False)
    assert not (tmp_path / "b" / "rows.csv").exists()
    seen = []
    again = run_trial(cfg, spec, PREP, tmp_path / "b", on_epoch=lambda e, m, c: seen.append(e), progress=False)
    assert seen == [2, 3]     # epoch 2's on_epoch never returned: handed over again from its checkpoint
    pd.testing.assert_frame_equal(full, again)
    # explicit resume_from: same result
    ck = tmp_path / "b" / "checkpoints" / "epoch_0002"
    third = run_trial(cfg, spec, PREP, tmp_path / "c", resume_from=ck, progress=False)
    pd.testing.assert_frame_equal(full, third)


def test_an_epoch_whose_on_epoch_never_returned_is_handed_over_once_on_restart(tmp_path):
    """Killed between the last checkpoint and its on_epoch (the MLflow epoch metrics, the Ray report): the
    restart hands that epoch over from the metrics its checkpoint keeps, once; a finished one does not."""
    cfg = tiny_config(SMALL, epochs=2)
    spec = spec_of(cfg, "poxm")
    full = []
    run_trial(cfg, spec, PREP, tmp_path / "a", on_epoch=lambda e, m, c: full.append((e, m)), progress=False)

    def crash(epoch, metrics, ckpt):
        if epoch == 2:
            raise RuntimeError("killed")
    with pytest.raises(RuntimeError, match="killed"):
        run_trial(cfg, spec, PREP, tmp_path / "b", on_epoch=crash, progress=False)
    seen = []
    run_trial(cfg, spec, PREP, tmp_path / "b", on_epoch=lambda e, m, c: seen.append((e, m, c)), progress=False)
    assert [(e, c.name) for e, _, c in seen] == [(2, "epoch_0002")]
    assert seen[0][1] == pytest.approx(full[1][1]) and full[1][0] == 2
    again = []
    run_trial(cfg, spec, PREP, tmp_path / "b", on_epoch=lambda e, m, c: again.append(e), progress=False)
    assert again == []


@pytest.mark.slow
def test_checkpoint_every_resumes_from_last_written_and_equals_uninterrupted(tmp_path):
    spec = spec_of(tiny_config(SMALL), "poxm")
    full = run_trial(tiny_config(SMALL, epochs=4), spec, PREP, tmp_path / "a", progress=False)
    seen = []

    def crash(epoch, metrics, ckpt):
        seen.append((epoch, ckpt is not None))
        if epoch == 3:   # epoch 3 wrote no checkpoint: the restart continues from epoch 2's
            raise RuntimeError("killed")
    cfg = tiny_config(SMALL, epochs=4, checkpoint_every=2)
    with pytest.raises(RuntimeError, match="killed"):
        run_trial(cfg, spec, PREP, tmp_path / "b", on_epoch=crash, progress=False)
    assert seen == [(1, False), (2, True), (3, False)]
    assert sorted(p.name for p in (tmp_path / "b" / "checkpoints").iterdir()) == ["epoch_0002"]
    later = []     # epoch 2's on_epoch had returned: not handed over again
    again = run_trial(cfg, spec, PREP, tmp_path / "b", on_epoch=lambda e, m, c: later.append(e), progress=False)
    assert later == [3, 4]
    pd.testing.assert_frame_equal(full, again)


def test_last_checkpoint_is_complete_when_the_final_report_fails_and_the_rerun_equals(tmp_path, monkeypatch):
    """The last epoch's checkpoint is written while the final report runs: when the report fails, the
    trial still waits for it, so the rerun restarts from it (no training) and ends as an uninterrupted run;
    on_epoch of the last epoch comes after the report, with the written checkpoint."""
    import poxm_core.training.trainer as trainer_mod
    cfg = tiny_config(SMALL, epochs=1)
    spec = spec_of(cfg, "poxm")
    full = run_trial(cfg, spec, PREP, tmp_path / "a", progress=False)
    real = trainer_mod.final_report

    def broken(*a, **k):
        raise RuntimeError("report failed")
    monkeypatch.setattr(trainer_mod, "final_report", broken)
    seen = []
    with pytest.raises(RuntimeError, match="report failed"):
        run_trial(cfg, spec, PREP, tmp_path / "b", progress=False, on_epoch=lambda e, m, c: seen.append((e, c)))
    assert seen == []                               # the last epoch's on_epoch waits for the report
    last = tmp_path / "b" / "checkpoints" / "epoch_0001"
    assert (last / "state.pt").is_file() and not list((tmp_path / "b" / "checkpoints").glob(".tmp-*"))
    monkeypatch.setattr(trainer_mod, "final_report", real)
    trained = []
    monkeypatch.setattr(trainer_mod, "train_epoch", lambda *a, **k: trained.append(1))
    again = run_trial(cfg, spec, PREP, tmp_path / "b", progress=False, on_epoch=lambda e, m, c: seen.append((e, c)))
    assert not trained
    pd.testing.assert_frame_equal(full, again)


def test_resume_from_other_config_is_refused(tmp_path):
    spec = spec_of(tiny_config(SMALL), "poxm")
    run_trial(tiny_config(SMALL, epochs=1), spec, PREP, tmp_path, progress=False)
    with pytest.raises(PoxmInputError, match="different trial or config"):
        run_trial(tiny_config(SMALL, epochs=2, lr_is=0.5), spec, PREP, tmp_path, progress=False)


# --------------------------------------------------------------------------------- grouping

@pytest.mark.slow
def test_grouped_heads_equal_heads_trained_alone(tmp_path):
    cfg = tiny_config(SMALL, epochs=2)
    group = spec_of(cfg, "logging", "poxm", "banditnet", "dm")
    together = run_trial(cfg, group, PREP, tmp_path / "g", progress=False)
    for method, p in (("poxm", 4), ("banditnet", -1), ("dm", -1), ("logging", -1)):
        alone = run_trial(cfg, spec_of(cfg, method), PREP, tmp_path / method, progress=False)
        pd.testing.assert_frame_equal(head_rows(together, method, p), head_rows(alone, method, p))


# --------------------------------------------------------------------------------- rows and files

@pytest.mark.slow
def test_time_in_on_epoch_is_report_s(tmp_path):
    """summary.json's timing: report_s is the time spent in on_epoch (on Ray: handing the epoch to Ray
    Train), outside training and evaluation; absent without a callback."""
    import time
    cfg = tiny_config({"dm": {"lr": 0.01}}, epochs=2)
    spec = spec_of(cfg, "dm")
    run_trial(cfg, spec, PREP, tmp_path / "a", on_epoch=lambda e, m, c: time.sleep(0.2), progress=False)
    s = json.loads((tmp_path / "a" / "summary.json").read_text())
    t = s["timing"]
    assert 0.4 <= t["report_s"] < 0.4 + 0.5
    # the parts and report_s account for the trial's time: the callback is in none of the others
    parts = sum(t[k] for k in ("setup_s", "train_s", "eval_s", "checkpoint_s"))
    assert abs(s["seconds"] - parts - t["report_s"]) < 0.3
    run_trial(cfg, spec, PREP, tmp_path / "b", progress=False)
    assert "report_s" not in json.loads((tmp_path / "b" / "summary.json").read_text())["timing"]


def test_rows_schema_files_and_metric_names(tmp_path):
    cfg = tiny_config(epochs=1)          # every method of the registry
    spec = trial_specs(cfg, "seed")[0]
    got = {}
    df = run_trial(cfg, spec, PREP, tmp_path, on_epoch=lambda e, m, c: got.update(m), progress=False)
    assert list(df.columns) == COLUMNS
    assert set(df.split) == {"train", "val", "val_truth", "test"}
    assert set(df[df.split == "val_truth"].metric) == {"V_true"}
    fin = df[df.final]
    want_test = {f"{m}@{k}" for m in ("R", "nDCR", "PSR", "P", "nDCG", "PSP") for k in (1, 3, 5)}
    for h in spec.heads:
        rows = fin[(fin.method == h.method) & (fin.p == (h.p or -1))]
        assert want_test <= set(rows[rows.split == "test"].metric)
        assert set(reported_labels()) | {"ESS"} == set(rows[rows.split == "val"].metric)   # the registry's
        assert rows.epoch.unique().tolist() == ([0] if h.method == "logging" else [1])
        if h.method != "logging":
            key = f"{h.method}/p_eq_{h.p if h.p else 'none'}/lam_eq_{h.lam if h.lam else 'none'}"
            assert {f"{key}/{m}" for m in ("loss", "IS", "sIS", "SNIS", "ESS")} <= set(got)
    assert not any("@" in k or "=" in k for k in got)
    assert set(fin[fin.metric == "truncated_mass"].method) == {"banditnet", "pm_banditnet"}
    assert fin[fin.split == "test"].value.between(0, 1).all()
    # stochastic metrics carry a Monte-Carlo/exact stderr, greedy ones none
    assert fin[fin.metric == "R@5"].stderr.notna().all() and fin[fin.metric == "P@5"].stderr.isna().all()
    disk = pd.read_csv(tmp_path / "rows.csv")
    assert list(disk.columns) == COLUMNS and len(disk) == len(df)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["heads"]) == {h.key for h in spec.heads}
    assert "test/R@5" in summary["heads"]["poxm/p=4/lam=0.5"]["metrics"]
    conf = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert conf["trial"] == spec.to_dict() and conf["config"]["training"]["epochs"] == 1
    assert not [p for p in tmp_path.rglob("*") if ".tmp" in p.name]
    assert len(final_table(df)) == len(spec.heads)
    # every head's per-instance test values, whose means are its rows' values (the claims' test-set term)
    with np.load(tmp_path / "test_instances.npz") as z:
        assert len(z.files) == 3 * len(spec.heads)
        for h in spec.heads:
            v = fin[(fin.method == h.method) & (fin.p == (h.p or -1)) & (fin.split == "test")].set_index("metric").value
            for m, twin in (("R@5", "P@5"), ("PSR@5", "PSP@5"), ("P@5", "P@5")):
                p = -1 if h.p is None else h.p
                lam = "nan" if h.lam is None else repr(float(h.lam))
                a = z[f"{spec.dataset}|{spec.variant}|{spec.seed}|{h.method}|{p}|{lam}|{m}"]
                assert a.shape == (PREP.Y_test.shape[0],)
                assert float(a.astype(float).mean()) == pytest.approx(v.get(m, v[twin]), abs=1e-6)


def test_greedy_policy_metrics_are_exact():
    cfg = tiny_config({"dm": {"lr": 0.01}}, epochs=1)
    df = run_trial(cfg, spec_of(cfg, "dm"), PREP, __import__("tempfile").mkdtemp(), progress=False)
    fin = df[df.final & (df.split == "test")].set_index("metric")
    for k in (1, 3, 5):
        assert fin.value[f"R@{k}"] == fin.value[f"P@{k}"] and fin.stderr[f"R@{k}"] == 0.0
        assert fin.value[f"PSR@{k}"] == fin.value[f"PSP@{k}"]


# --------------------------------------------------------------------------------- hand-checked values

def test_logging_policy_weights_are_one_and_is_is_mean_reward(tmp_path):
    cfg = tiny_config({"logging": {}}, epochs=1)
    df = run_trial(cfg, spec_of(cfg, "logging"), PREP, tmp_path, progress=False)
    val = df[df.final & (df.split == "val")].set_index("metric").value
    mean_reward = PREP.log_val.rewards.sum(axis=1).mean()
    for m in ("IS", "sIS", "SNIS"):
        assert math.isclose(val[m], mean_reward, rel_tol=1e-7)   # w = rho-conditional / q = 1 up to rounding
    assert math.isclose(val["ESS"], PREP.log_val.rewards.size, rel_tol=1e-7)


def test_phi_policy_val_logpi_matches_hand_softmax():
    from poxm_core.policy.heads import HeadParams
    P = HeadParams(torch.tensor(PREP.W), torch.tensor(PREP.b))
    log = PREP.log_val
    arr = val_arrays(PolicyView("phi", 4, P), PREP.Z_train, PREP.policy_train.cand, PREP.policy_train.rho, log, 4,
                     None, torch.device("cpu"))
    i = 0
    inst = log.instance[i]
    s = PREP.Z_train[inst].astype(np.float64) @ PREP.W.T.astype(np.float64) + PREP.b
    phi = PREP.policy_train.cand[inst, :4]
    removed = 0.0
    for j in range(log.slate_size):
        y = log.actions[i, j]
        if y in phi:
            want = s[y] - np.log(np.exp(s[phi]).sum() - removed)
            assert math.isclose(arr["logpi_is"][i, j], want, rel_tol=1e-5)
            removed += np.exp(s[y])
        else:
            assert arr["logpi_is"][i, j] == -np.inf
    assert np.array_equal(arr["logpi_is"], arr["logpi_sis"])


def test_all_label_val_arrays_match_the_full_row_and_a_hand_loop():
    """The all-label kind (BanditNet) lumps the labels a slate does not hold into one column: log pi and
    the DR term must equal the Plackett-Luce formulas over the whole float64 row, and a hand loop."""
    from poxm_core.estimators import pl_expectations_torch, pl_log_conditionals_torch
    from poxm_core.policy.heads import HeadParams
    g = torch.Generator().manual_seed(3)
    L, d = PREP.n_labels, PREP.Z_train.shape[1]
    P = HeadParams(torch.randn(L, d, generator=g) * 2, torch.randn(L, generator=g))   # peaked rows too
    R = HeadParams(torch.randn(L, d, generator=g), torch.randn(L, generator=g))
    log = PREP.log_val
    arr = val_arrays(PolicyView("all", None, P), PREP.Z_train, PREP.policy_train.cand, PREP.policy_train.rho, log, 4,
                     (R, PREP.Z_train), torch.device("cpu"))
    z = torch.as_tensor(PREP.Z_train[log.instance])
    S = (z @ P.W.T + P.b).double()
    V = torch.sigmoid((z @ R.W.T + R.b).double())
    act = torch.as_tensor(log.actions)
    np.testing.assert_allclose(arr["logpi_is"], pl_log_conditionals_torch(S, act).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(arr["dm_term"], pl_expectations_torch(S, V, act).numpy(), rtol=1e-6, atol=1e-7)
    s, v = S[0].numpy(), V[0].numpy()
    left = np.ones(L, dtype=bool)
    for j, y in enumerate(log.actions[0]):
        e = np.exp(s - s.max()) * left
        assert math.isclose(arr["logpi_is"][0, j], np.log(e[y] / e.sum()), rel_tol=1e-6, abs_tol=1e-7)
        assert math.isclose(arr["dm_term"][0, j], (e * v).sum() / e.sum(), rel_tol=1e-6)
        left[y] = False
    assert (arr["logpi_is"] < 0).all() and np.isfinite(arr["logpi_sis"]).any()


def test_all_label_test_table_is_the_renormalised_top_of_the_softmax():
    from poxm_core.policy.heads import HeadParams
    from poxm_core.training.evaluation import test_table
    g = torch.Generator().manual_seed(4)
    L, d = PREP.n_labels, PREP.Z_test.shape[1]
    P = HeadParams(torch.randn(L, d, generator=g), torch.randn(L, generator=g))
    m = 5
    sup, probs, ranking, lost = test_table(PolicyView("all", None, P), PREP.Z_test, PREP.policy_test.cand,
                                           PREP.policy_test.rho, 3, m, torch.device("cpu"))
    s = PREP.Z_test.astype(np.float64) @ P.W.numpy().T.astype(np.float64) + P.b.numpy()
    pi = np.exp(s - s.max(axis=1, keepdims=True))
    pi /= pi.sum(axis=1, keepdims=True)
    top = np.argsort(-s, axis=1, kind="stable")[:, :m]
    assert np.array_equal(sup, top) and np.array_equal(ranking, top[:, :3])
    kept = np.take_along_axis(pi, top, axis=1)
    np.testing.assert_allclose(probs, kept / kept.sum(axis=1, keepdims=True), rtol=1e-5)
    assert math.isclose(lost, (1 - kept.sum(axis=1)).mean(), rel_tol=1e-5) and lost > 0
    # ties across the kmax-th place go to the smaller label id, as for every other policy
    b = torch.zeros(L)
    b[[5, 2]] = 1.0
    sup, _, ranking, _ = test_table(PolicyView("all", None, HeadParams(torch.zeros(L, d), b)), PREP.Z_test,
                                    PREP.policy_test.cand, PREP.policy_test.rho, 3, L, torch.device("cpu"))
    assert (ranking == [2, 5, 0]).all() and sorted(sup[0]) == list(range(L))


def test_device_ranking_and_softmax_equal_the_host_ones_with_ties():
    """The GPU trial's test table (sort and softmax on the device, tie-break on the sorted prefix) gives
    greedy_from_policy's ranking and NumPy's softmax; run here on CPU tensors, the same code."""
    from poxm_core.metrics.ranking import greedy_from_policy
    from poxm_core.training.evaluation import _ranking_probs_on_device
    rng = np.random.default_rng(3)
    n, m = 200, 12
    ids = np.stack([rng.permutation(50)[:m] for _ in range(n)]).astype(np.int64)
    s = np.round(rng.normal(size=(n, m)), 1)          # coarse scores: many ties, across the kmax-th place too
    s[0] = 0.0                                          # a row of equal scores: label ids decide
    for kmax in (1, 3, 5, m + 2):
        ranking, probs = _ranking_probs_on_device(torch.tensor(s), ids, kmax, True)
        assert np.array_equal(ranking, greedy_from_policy(ids, s, kmax)), kmax
        e = np.exp(s - s.max(axis=1, keepdims=True))
        np.testing.assert_allclose(probs, e / e.sum(axis=1, keepdims=True), rtol=1e-12)
    assert np.array_equal(ranking[0, :m], np.sort(ids[0]))
    assert _ranking_probs_on_device(torch.tensor(s), ids, 3, False)[1] is None


def test_lumped_scores_handle_short_slates_and_a_slate_holding_every_label():
    from poxm_core.estimators import pl_log_conditionals_torch
    from poxm_core.training.evaluation import _lumped
    S = torch.tensor([[0.0, 1.0, 2.0, 3.0], [5.0, -1.0, 0.5, 0.0]])
    act = torch.tensor([[3, 1, -1], [0, 1, 2]])
    lumped, pos, _ = _lumped(S.clone(), act, None)
    lp = pl_log_conditionals_torch(lumped, pos)
    want = pl_log_conditionals_torch(S.double(), act)
    assert torch.allclose(lp[:, :2], want[:, :2], atol=1e-7) and torch.isneginf(lp[0, 2])
    assert torch.allclose(lp[1], want[1], atol=1e-7)
    lumped, pos, _ = _lumped(S[:, :3].clone(), torch.tensor([[2, 0, 1]]).expand(2, 3), None)
    assert torch.isneginf(lumped[:, 0]).all()                     # nothing left outside the slate
    assert torch.allclose(pl_log_conditionals_torch(lumped, pos)[:, 2], torch.zeros(2, dtype=torch.float64))
    # a peaked row: the logged top label 100+ nats above the rest, whose float32 exp relative to it would
    # flush to 0, although after the first position the 2,000 unlogged labels hold most of what is left
    S = torch.full((1, 2003), -105.0)
    S[0, :3] = torch.tensor([0.0, -101.0, -112.0])
    act = torch.tensor([[0, 1, 2]])
    lumped, pos, _ = _lumped(S.clone(), act, None)
    want = pl_log_conditionals_torch(S.double(), act)
    assert torch.allclose(pl_log_conditionals_torch(lumped, pos), want, rtol=1e-6) and want[0, 1] < -1.0


def test_greedy_conditional_picks_best_label_outside_the_logged_prefix():
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.9]], dtype=torch.float64)
    cand = torch.tensor([[7, 4, 2, 3]])
    # greedy order: label 3 (0.9, smaller id than 4), 4, 2, 7; logged slate columns (3, 1, 2)
    lp, picks = _greedy_logpi(scores, cand, torch.tensor([[3, 1, 2]]), 4)
    assert picks.tolist() == [[3, 1, 2]] and lp.tolist() == [[0.0, 0.0, 0.0]]
    lp, picks = _greedy_logpi(scores, cand, torch.tensor([[1, 3, 0]]), 4)
    assert picks.tolist() == [[3, 3, 2]] and lp.tolist() == [[-np.inf, 0.0, -np.inf]]
    lp, picks = _greedy_logpi(scores, cand, torch.tensor([[3, 1, 2]]), 1)   # restricted to Phi^1 = {7}
    assert picks.tolist() == [[0, 0, 0]] and bool(torch.isneginf(lp).all())


# --------------------------------------------------------------------------------- input checks and grid

def test_bad_trials_are_one_line_errors(tmp_path):
    cfg = tiny_config({"poxm": {"p": [50], "lam": [0.5]}}, epochs=1)
    with pytest.raises(PoxmInputError, match=r"methods\.poxm\.p: p=50 exceeds the 8 candidates"):
        run_trial(cfg, spec_of(cfg, "poxm"), PREP, tmp_path, progress=False)
    with pytest.raises(PoxmInputError, match="prepared data is"):
        run_trial(cfg, TrialSpec("tiny", "B", 0, (HeadSpec("poxm", 50, 0.5),)), PREP, tmp_path, progress=False)
    with pytest.raises(PoxmInputError, match=r"methods\.dm"):
        run_trial(cfg, TrialSpec("tiny", "A", 0, (HeadSpec("dm"),)), PREP, tmp_path, progress=False)
    with pytest.raises(PoxmInputError, match="twice"):
        TrialSpec("tiny", "A", 0, (HeadSpec("dm"), HeadSpec("dm")))


def test_trial_specs_grid_and_train_defaults():
    cfg = tiny_config()
    by_method = trial_specs(cfg, "method")
    assert len(by_method) == 7 and sum(len(s.heads) for s in by_method) == 8
    by_seed = trial_specs(cfg, "seed")
    assert len(by_seed) == 1 and by_seed[0].heads == tuple(h for s in by_method for h in s.heads)
    assert by_method[4].name == "tiny-A-s0-poxm" and by_seed[0].name == "tiny-A-s0-all"
    assert TrialSpec.from_dict(by_seed[0].to_dict()) == by_seed[0]
    t = pick_trial(cfg, method="poxm")
    assert (t.dataset, t.variant, t.seed) == ("tiny", "A", 0) and [h.p for h in t.heads] == [4, 8]
    with pytest.raises(PoxmInputError, match="did you mean 'poxm'"):
        pick_trial(cfg, method="poxn")
    with pytest.raises(PoxmInputError, match="--seed"):
        pick_trial(cfg, seed=5)


def test_corrupt_latest_checkpoint_is_set_aside_and_the_trial_finishes(tmp_path):
    """A finished trial whose done.json is gone and whose newest checkpoint is damaged: running it again
    continues from the previous checkpoint (or from scratch) and ends with the uninterrupted rows,
    instead of failing on the damaged file at every resume."""
    cfg = tiny_config(SMALL, epochs=3)
    spec = spec_of(cfg, "poxm")
    full = run_trial(cfg, spec, PREP, tmp_path / "a", progress=False)
    ck = tmp_path / "a" / "checkpoints"
    newest = sorted(ck.iterdir())[-1]
    data = (newest / "state.pt").read_bytes()
    (newest / "state.pt").write_bytes(data[: len(data) // 3])      # truncated mid-write
    with pytest.warns(UserWarning, match="not a readable checkpoint"):
        again = run_trial(cfg, spec, PREP, tmp_path / "a", progress=False)
    pd.testing.assert_frame_equal(full, again)
    assert (ck / f"corrupt-{newest.name}").is_dir()
