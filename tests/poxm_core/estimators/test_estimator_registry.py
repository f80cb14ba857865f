"""The estimator registry is the only list: an estimator registered with one line shows up in a
trial's rows (rows.csv, summary.json, the per-epoch metrics), in the MLflow runs the tracker logs
(a real local sqlite store) and in the report's estimator-figure data, with nothing else edited."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest

from poxm_core.common.errors import PoxmInputError
from poxm_core.estimators import ESTIMATORS, IS, BaseEstimator, importance_weights
from poxm_core.estimators.registry import register_estimator
from poxm_core.estimators.validation import reported_labels, validation_estimates
from poxm_core.common.results import mlflow_name
from poxm_core.training import run_trial, trial_specs
from trial_fixtures import tiny_config, tiny_prepared


@dataclass(frozen=True)
class ScaledIS(IS):
    """A throwaway estimator: twice IS (so its value is checkable against the IS row by hand)."""
    name: ClassVar[str] = "scaled_is"
    label: ClassVar[str] = "ScaledIS"

    def per_sample(self, w, r):
        return 2.0 * super().per_sample(w, r)

    def torch_value(self, w, r):
        return 2.0 * super().torch_value(w, r)


METHODS = {"logging": {}, "poxm": {"p": [4, 8], "lam": [0.5], "lr": 0.01}}


@pytest.fixture(scope="module")
def trial(tmp_path_factory):
    """One tiny trial (every head side by side, 2 epochs) with ScaledIS registered; unregistered after."""
    register_estimator(ScaledIS)
    try:
        out = tmp_path_factory.mktemp("trial")
        cfg = tiny_config(METHODS, epochs=2)
        spec = trial_specs(cfg, "seed")[0]
        epochs: dict[int, dict] = {}
        df = run_trial(cfg, spec, tiny_prepared(), out, progress=False,
                       on_epoch=lambda e, m, c: epochs.update({e: dict(m)}))
        yield cfg, spec, df, epochs, out
    finally:
        ESTIMATORS.pop("scaled_is", None)


def test_registered_estimator_is_in_rows_summary_and_epoch_metrics(trial):
    cfg, spec, df, epochs, out = trial
    disk = pd.read_csv(out / "rows.csv")
    fin = disk[disk["final"] & (disk["split"] == "val")]
    for h in spec.heads:
        rows = fin[(fin.method == h.method) & (fin.p == (h.p or -1))].set_index("metric")
        # the hand value: twice the IS row of the same head
        assert rows.value["ScaledIS"] == pytest.approx(2 * rows.value["IS"], rel=1e-12)
        assert rows.stderr["ScaledIS"] == pytest.approx(2 * rows.stderr["IS"], rel=1e-12)
        summary = json.loads((out / "summary.json").read_text())["heads"][h.key]["metrics"]
        assert summary["val/ScaledIS"] == pytest.approx(2 * summary["val/IS"], rel=1e-12)
        if h.method != "logging":       # per-epoch rows and metrics of every trained head
            per_epoch = disk[(disk.method == h.method) & (disk.p == (h.p or -1)) & ~disk["final"]]
            assert set(per_epoch[per_epoch.metric == "ScaledIS"].epoch) == {1, 2}
            for e in (1, 2):
                assert mlflow_name(f"{h.key}/ScaledIS") in epochs[e]


def test_registered_estimator_is_in_the_estimator_figure_data(trial):
    from orchestration.report.figures import estimator_error_data

    _, _, df, _, _ = trial
    data = estimator_error_data(df, "tiny", "A", ("poxm",)).set_index(["estimator", "p"])
    fin = df[df["final"] & (df.method == "poxm")]
    for p in (4, 8):
        one = fin[fin.p == p].set_index(["split", "metric"]).value
        assert data.loc[("ScaledIS", p), "bias"] == pytest.approx(one[("val", "ScaledIS")] - one[("val_truth", "V_true")])
    assert {"IS", "SNIS", "ScaledIS"} <= set(data.index.get_level_values("estimator"))


@pytest.mark.slow
def test_registered_estimator_is_in_mlflow(trial, tmp_path):
    """The tracker's own calls on a real sqlite store: per-epoch and final metrics of every head."""
    from orchestration.tracking import runs as tracking
    from poxm_core.config.schema import resolved_dict

    cfg, spec, df, epochs, _ = trial
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    exp = tracking.init_store(uri, "registry", tmp_path / "mlartifacts")
    parent = tracking.ensure_parent(uri, exp, "registry", {})
    points = [({"dataset": spec.dataset, "variant": spec.variant, "method": h.method, "p": h.p, "lam": h.lam,
                "seed": spec.seed}, spec.name) for h in spec.heads]
    ids = tracking.ensure_points(uri, exp, parent, "registry", resolved_dict(cfg), points, {})
    runs = {h.key: ids[tracking.point_key(pt)] for h, (pt, _) in zip(spec.heads, points)}
    log = tracking.PointLogger(uri, runs)
    log.start()
    for e, m in sorted(epochs.items()):
        log.log_epoch(e, m)
    log.log_final(df, {(h.method, h.p, h.lam): runs[h.key] for h in spec.heads})
    c = tracking.client(uri)
    for h in spec.heads:
        metrics = c.get_run(runs[h.key]).data.metrics
        assert metrics["val/ScaledIS"] == pytest.approx(2 * metrics["val/IS"], rel=1e-6)
        if h.method != "logging":
            assert [m.step for m in c.get_metric_history(runs[h.key], "val/ScaledIS")] == [1, 2]


# ------------------------------------------------------------------------------------ the registry itself

def test_every_entry_is_consistent():
    labels = [cls.label for cls in ESTIMATORS.values() if cls.reported]
    assert len(set(labels)) == len(labels) == len(reported_labels())
    for name, cls in ESTIMATORS.items():
        assert cls.name == name and issubclass(cls, BaseEstimator)
        assert cls.support in ("policy", "selector") and cls.weights in ("pruned", "prefix")


def test_validation_estimates_pick_weights_support_and_aux_from_the_class():
    rng = np.random.default_rng(3)
    lp = {"policy": np.log(rng.uniform(0.05, 1, (40, 3))), "selector": np.log(rng.uniform(0.05, 1, (40, 3)))}
    lp["selector"][:, 1] = -np.inf                  # a position outside Phi^p: weight 0
    q, r = rng.uniform(0.2, 1, (40, 3)), rng.integers(0, 2, (40, 3)).astype(float)
    aux = {"dm_term": rng.uniform(size=(40, 3)), "rhat_logged": rng.uniform(size=(40, 3))}
    got = validation_estimates(lp, q, r, aux)
    # every reported estimator whose weights are the importance weights (those with `needs` make their own
    # from arrays this log does not have, so they are skipped: tests/poxm_core/estimators/test_estimator_hook.py)
    assert list(got) == [cls.label for cls in ESTIMATORS.values() if cls.reported and not cls.needs]
    for cls in ESTIMATORS.values():
        if cls.reported and not cls.needs:
            w = importance_weights(lp[cls.support], q, pruned=cls.weights == "pruned")
            want = cls().estimate(w, r, **{k: aux[k] for k in cls.aux_names})
            assert got[cls.label] == want
    assert "DR" not in validation_estimates(lp, q, r)          # no reward model: DR is skipped
    assert "sIS" not in validation_estimates({"policy": lp["policy"]}, q, r)


@pytest.mark.parametrize("cls, message", [
    (int, "expected a BaseEstimator subclass"),
    (type("NoLabel", (IS,), {"name": "nolabel", "label": ""}), "needs a `label`"),
    (type("Other", (IS,), {"name": "is", "label": "X"}), "already registered"),
    (type("Odd", (IS,), {"name": "odd", "label": "O", "support": "labels"}), "support must be"),
])
def test_bad_registrations_are_refused(cls, message):
    with pytest.raises((TypeError, ValueError), match=message):
        register_estimator(cls)
    assert set(ESTIMATORS) >= {"is"} and "nolabel" not in ESTIMATORS and "odd" not in ESTIMATORS


def test_registering_the_same_class_twice_is_a_noop_and_unknown_names_list_the_registry():
    assert register_estimator(IS) is IS
    with pytest.raises(PoxmInputError, match="valid: " + ", ".join(sorted(ESTIMATORS))):
        ESTIMATORS["nope"]
