"""Off-policy learning from a real log (docs/data.md, "Learning from a log"): the config's logged dataset
kind, the prepare branch's mapping onto `Prepared` on the OBD sample (read from the data root), a trial's
test values as off-policy estimates, the report's table of the estimators against the truth, and (slow)
`poxm run configs/obd.yaml` writing its report tables."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from poxm_process import poxm_in_process

from poxm_core.common.errors import PoxmInputError
from poxm_core.config.schema import default_data_root, load_config

REPO = Path(__file__).resolve().parents[3]
OBD = default_data_root() / "obd"
needs_obd = pytest.mark.skipif(not (OBD / "original").is_dir(), reason="OBD sample not in the data root")


def _cfg(tmp_path, **logged):
    ds = {"name": "obd", "logged": {"source": "obd", **logged}, "val_fraction": 0.2,
          "variants": [{"name": "U"}, {"name": "R", "selector": "reward"}]}
    return load_config(data={"name": "t", "runs_dir": str(tmp_path), "datasets": [ds],
                             "training": {"epochs": 1, "batch_size": 512, "hidden": 8},
                             "methods": {"logging": {}, "dm": {}, "poxm": {"p": [5], "lam": [0.9]}}})


@pytest.mark.parametrize("entry, needle", [
    ({"logged": {"source": "obd", "campain": "all"}}, "unknown config key 'datasets.0.logged.campain' (did you mean 'datasets.0.logged.campaign'?)"),
    ({"logged": {"source": "table", "path": "x.csv", "columns": {"acton": "a", "context": ["x"]}}},
     "unknown config key 'datasets.0.logged.columns.acton' (did you mean 'datasets.0.logged.columns.action'?)"),
    ({"logged": {"source": "obd"}, "variants": [{"name": "U", "T": 2}]}, "variants take only 'name' and 'selector'"),
    ({"logged": {"source": "obd", "columns": {"context": ["x"]}}}, "'columns' is for source: table"),
    ({"logged": {"source": "table", "path": "x.csv"}}, "source: table needs 'columns'"),
    ({"synthetic": {"n_train": 10}, "variants": [{"name": "A", "alpha": 0.2, "selector": "reward"}]},
     "'selector' is for a logged dataset"),
])
def test_schema_refuses_with_one_line(entry, needle):
    ds = {"name": "obd", **entry}
    ds.setdefault("variants", None)
    if ds["variants"] is None:
        del ds["variants"]
    with pytest.raises(PoxmInputError) as e:
        load_config(data={"name": "t", "datasets": [ds], "methods": {"poxm": {"p": [5]}}})
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_schema_defaults_and_no_mixing():
    cfg = load_config(data={"name": "t", "datasets": [{"name": "obd", "logged": {"source": "obd"}}],
                            "methods": {"poxm": {"p": [5]}}})
    d = cfg.datasets[0]
    assert [v.name for v in d.variants] == ["log"] and d.logged.obd_policy == "random" and d.logged.obd_target == "bts"
    assert load_config(data=cfg.model_dump(mode="json")) == cfg       # a resolved config loads back as itself
    with pytest.raises(PoxmInputError, match="either logged datasets"):
        load_config(data={"name": "t", "methods": {"poxm": {"p": [5]}}, "datasets": [
            {"name": "obd", "logged": {"source": "obd"}},
            {"name": "synthetic", "synthetic": {"n_train": 50, "n_test": 20, "n_features": 30, "n_labels": 10},
             "variants": [{"name": "A", "alpha": 0.5}]}]})


@needs_obd
def test_prepare_maps_the_obd_log_onto_prepared(tmp_path):
    from poxm_core.data.obd import read_obd
    from poxm_core.prepare.pipeline import load_prepared

    cfg = _cfg(tmp_path)
    raw = read_obd(OBD, "random", "all")
    U = load_prepared(cfg, "obd", "U", 0, tmp_path / "cache")
    R = load_prepared(cfg, "obd", "R", 0, tmp_path / "cache")
    n_tr, n_te = U.Z_train.shape[0], U.Z_test.shape[0]
    assert (n_tr, n_te) == (7500, 2500) and U.Y_test is None and U.Y_train is None
    assert U.n_labels == raw.n_actions == 80 and not U.W.any()
    assert U.Z_train.shape[1] == U.X_train.shape[1] >= raw.context.shape[1] + 3      # context (+ TS's values) + slots
    # the fit and validation logs partition the training split; ell = 1, q = rho = the logged propensity (1/80)
    assert np.array_equal(np.sort(np.r_[U.log_train.instance, U.log_val.instance]), np.arange(n_tr))
    assert U.log_val.n == 1500 and U.log_train.slate_size == 1
    assert np.allclose(U.log_train.q, 1 / 80) and np.array_equal(U.log_train.q, U.log_train.rho)
    # C(x) = every action; uniform logging: the order is by id (Phi^p = the p smallest ids), rho = 1/80
    assert U.policy_train.cand.shape == (n_tr, 80) and np.allclose(U.policy_train.rho, 1 / 80)
    assert (U.policy_train.cand == np.arange(80)).all()
    assert np.array_equal(U.log_train.cand_pos[:, 0], U.log_train.actions[:, 0])
    # the reward selector reorders C(x) per slot; the logged action is at its rank in that order
    assert not (R.policy_train.cand == np.arange(80)).all()
    got = np.take_along_axis(R.policy_train.cand[R.log_train.instance], R.log_train.cand_pos, axis=1)
    assert np.array_equal(got, R.log_train.actions)
    # the logs' clicks are the raw log's (same rows, same total)
    assert U.log_train.rewards.sum() + U.log_val.rewards.sum() + U.eval_logs[0].log.rewards.sum() == raw.reward.sum()
    # evaluation logs: the held-out test part, then every row of the TS log (its own propensities)
    (test, target) = U.eval_logs
    assert (test.name, test.log.n, target.name, target.log.n) == ("test", 2500, "target", 10000)
    assert test.Z is U.Z_test and target.Z.shape[1] == U.Z_train.shape[1]
    assert not np.allclose(target.log.q, 1 / 80)


@needs_obd
def test_a_trial_reports_off_policy_estimates_not_label_metrics(tmp_path):
    from poxm_core.prepare.pipeline import load_prepared
    from poxm_core.training import run_trial, trial_specs

    cfg = _cfg(tmp_path)
    spec = next(s for s in trial_specs(cfg, "seed") if s.variant == "U" and s.seed == 0)
    prepared = load_prepared(cfg, "obd", "U", 0, tmp_path / "cache")
    df = run_trial(cfg, spec, prepared, tmp_path / "trial", progress=False)
    fin = df[df["final"]]
    assert set(fin["split"]) == {"val", "test", "target"}
    assert not fin["metric"].isin(["R@5", "P@1", "nDCG@5", "PSR@5"]).any()
    test = fin[fin["split"] == "test"]
    assert {"IS", "SNIS", "sIS", "DR", "ESS"} <= set(test["metric"])
    # the uniform logging policy's IS on the test rows is exactly its click rate there (every weight 1)
    lg = test[(test["method"] == "logging") & (test["metric"] == "IS")]["value"].item()
    assert lg == pytest.approx(prepared.eval_logs[0].log.rewards.mean())
    assert np.isfinite(fin[fin["split"] == "target"]["value"]).all()


@pytest.mark.slow
@needs_obd
def test_poxm_run_obd_writes_the_report_table(ray_session, tmp_path, capsys):
    r = poxm_in_process(capsys, "run", REPO / "configs" / "obd.yaml",        # on the test run's Ray
                        "seeds=[0]", "training.epochs=1", "methods.poxm.p=[5,10]", "methods.poxm.lam=[0.9]",
                        "methods.banditnet.lam=[0.9]", "methods.dr_poxm.p=[5]",
                        "datasets.0.variants=[{name: U}]", f"runs_dir={tmp_path}", "mlflow.enabled=false")
    assert r.returncode == 0, r.stderr[-3000:]
    run = next(p for p in tmp_path.iterdir() if p.name.startswith("obd-"))
    table = pd.read_csv(run / "report" / "tables" / "ope_obd-random.csv")
    assert {"logging", "dm", "banditnet", "poxm", "dr_poxm"} <= set(table["method"])
    assert {"test_IS_mean", "target_IS_mean", "test_IS_ci_halfwidth"} <= set(table.columns)
    index = (run / "report" / "index.md").read_text()
    assert "off-policy estimates of the learned policies" in index and "R@5" not in index
    # the estimators against the truth on the config's logs (campaign all, both directions: the config has a target)
    truth = pd.read_csv(run / "report" / "tables" / "ope_truth_obd-random.csv")
    assert {"campaign", "target", "log", "estimator", "value", "ci_low", "ci_high", "truth", "rel_error",
            "covers"} <= set(truth.columns)
    assert set(zip(truth.campaign, truth.target, truth.log, truth.estimator)) >= {
        ("all", "bts", "random", "IS"), ("all", "random", "bts", "IS")}
    assert (run / "report" / "tables" / "ope_truth_obd-random.md").is_file()
    assert (run / "report" / "tables" / "ope_truth_obd-random.tex").is_file()
    assert "the estimators against the truth" in index and "| all | bts ← random | IS |" in index
    for col in ("estimate %", "95 % interval %", "on-policy % (± se)", "rel. error", "covers"):
        assert col in index
    # the terminal's end-of-run lines are the report's estimates, not an empty R@5 table
    assert "off-policy IS estimates" in r.stdout and "Empty DataFrame" not in r.stdout and "R@5" not in r.stdout


@needs_obd
def test_truth_table_of_a_logged_dataset_on_the_obd_sample():
    from orchestration.report.ope_truth import obd_ope_frame
    from orchestration.report.logged import truth_table
    from orchestration.report.table_format import to_latex, to_markdown

    lg = {"source": "obd", "policy": "random", "campaign": "men", "target": "bts"}
    t = truth_table("d", lg, default_data_root(), n_boot=3)
    assert t.name == "ope_truth_d"
    assert t.columns[:8] == ["campaign", "target ← log", "estimator", "estimate %", "95 % interval %",
                             "on-policy % (± se)", "rel. error", "boot rel. error"] and "covers" in t.columns
    df = t.frame
    assert list(dict.fromkeys(zip(df.target, df.log))) == [("bts", "random"), ("random", "bts")]
    assert {"IS", "SNIS", "DR", "DM", "sIS p=10", "sIS p=20"} <= set(df.estimator) and set(df.campaign) == {"men"}
    # the numbers are poxm ope's (one library function, same seed and resamples)
    ref = obd_ope_frame(OBD, ("men",), n_boot=3)
    pd.testing.assert_frame_equal(df.reset_index(drop=True), ref, check_like=True)
    is_row = df[(df.target == "bts") & (df.estimator == "IS")].iloc[0]
    assert is_row.truth == pytest.approx(0.0069) and is_row.ci_low < is_row.value < is_row.ci_high
    assert is_row.rel_error == pytest.approx(abs(is_row.value - is_row.truth) / is_row.truth)
    assert "| men | bts ← random | IS |" in to_markdown(t) and r"$\leftarrow$" in to_latex(t)
    # target: none -> only the other policy estimated from the log learned from (still read for its truth)
    one = truth_table("d", {**lg, "target": "none"}, default_data_root(), n_boot=3).frame
    assert set(zip(one.target, one.log)) == {("bts", "random")}
    # a table log without a target: no truth to check against
    assert truth_table("d", {"source": "table", "path": "x.csv", "columns": {"context": ["x"]}}, OBD) is None


def test_end_of_run_lines_of_a_logged_sweep(tmp_path):
    from orchestration.cli import headline
    from orchestration.report.logged import terminal_headline

    (tmp_path / "results").mkdir()
    pd.DataFrame([{"dataset": "d", "variant": "U", "method": "poxm", "seed": 0, "selection": "is", "criterion": "IS",
                   "test_R@5": np.nan}]).to_csv(tmp_path / "results" / "selection.csv", index=False)
    assert headline(tmp_path) is None                                   # no label metric: no R@5 table
    assert terminal_headline(tmp_path / "report") is None               # no report yet
    (tmp_path / "report" / "tables").mkdir(parents=True)
    pd.DataFrame([{"variant": "U", "method": "poxm", "n_seeds": 2, "test_IS_mean": 0.004, "test_IS_ci_halfwidth": 0.002,
                   "target_IS_mean": 0.001, "target_IS_ci_halfwidth": 0.0005, "val_IS_mean": 0.003},
                  {"variant": "on-policy", "method": "test", "test_IS_mean": 0.002, "test_IS_ci_halfwidth": 0.001},
                  {"variant": "on-policy", "method": "target", "target_IS_mean": 0.0042,
                   "target_IS_ci_halfwidth": 0.0013}]).to_csv(tmp_path / "report" / "tables" / "ope_d.csv", index=False)
    text = terminal_headline(tmp_path / "report")
    assert text.startswith("d: off-policy IS estimates") and "selected by IS" in text and "mean of 2 seed(s)" in text
    lines = text.splitlines()
    assert lines[2].split()[-4:] == ["0.400", "0.200", "0.100", "0.050"]      # x100, as the report
    assert lines[3].split()[-4:] == ["0.200", "0.100", "0.420", "0.130"]


@needs_obd
def test_poxm_prepare_summarises_a_logged_dataset(tmp_path):
    from poxm_core.prepare.summary import format_shapes, format_table, prepare_all

    cfg = _cfg(tmp_path)
    rows = prepare_all(cfg, tmp_path / "cache", progress=False)
    assert [(r["variant"], r["selector"]) for r in rows] == [("U", "logging"), ("R", "reward")]
    assert "logged feedback, N_train=7500, N_test=2500" in format_shapes(cfg, tmp_path / "cache")
    table = format_table(rows)
    assert "click_rate_test" in table and table.startswith("logged feedback:") and "logging model P@k" not in table
