"""Golden values (scripts/make_golden.py): estimators, metrics and every method's training on the
committed fixture tests/golden/fixture.npz must give the numbers in tests/golden/expected.json,
written before later changes (the commit is expected.json's `generated_from`). A failure names each
value that moved; regenerate the file only for an intended change of the numbers."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("make_golden", ROOT / "scripts" / "make_golden.py")
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)

EXPECTED = json.loads((golden.GOLDEN / "expected.json").read_text())
PREP = golden.load_fixture()


def test_committed_fixture_is_what_the_documented_generator_makes():
    """tests/golden/fixture.npz is `make_golden.make_fixture()` (seed SEED, shape SHAPE): every draw
    (features, labels, candidates, slates, rewards) the same to the bit; the logging probabilities rho
    and q within float32 rounding (they go through a float32 softmax). A fixture regenerated with other
    settings, or a generator changed without the fixture, fails here."""
    import numpy as np

    new = golden.make_fixture()
    for f in ("Z_train", "Z_test", "W", "b", "inv_propensity"):
        assert np.array_equal(getattr(new, f), getattr(PREP, f)), f
    for f in ("Y_train", "Y_test", "X_train", "X_test"):
        a, b = getattr(new, f).tocsr(), getattr(PREP, f).tocsr()
        assert a.shape == b.shape and (a != b).nnz == 0, f
    assert np.array_equal(new.policy_train.cand, PREP.policy_train.cand)
    np.testing.assert_allclose(new.policy_train.rho, PREP.policy_train.rho, rtol=1e-5, atol=1e-6)
    for split in ("train", "val"):
        a, b = getattr(new, f"log_{split}"), getattr(PREP, f"log_{split}")
        for k in ("instance", "actions", "cand_pos", "rewards"):
            assert np.array_equal(getattr(a, k), getattr(b, k)), (split, k)
        for k in ("q", "rho"):
            np.testing.assert_allclose(getattr(a, k), getattr(b, k), rtol=1e-4, atol=1e-6, err_msg=f"{split} {k}")
    s = golden.SHAPE
    assert PREP.n_labels == s["L"] and PREP.log_val.slate_size == s["ell"]


def test_every_builtin_estimator_has_a_golden_value():
    """Every estimator of the registry defined in poxm_core (a plugin registered by a test needs none):
    a new built-in one fails here until expected.json is regenerated with its value."""
    from poxm_core.estimators import ESTIMATORS

    builtin = {name for name, cls in ESTIMATORS.items() if cls.__module__.startswith("poxm_core.")}
    assert builtin | {"sis@phi4"} <= set(EXPECTED["estimators"])


def test_estimators_match_golden(tmp_path):
    got = {"estimators": golden.estimator_values(PREP)}
    assert golden.compare(EXPECTED, got, ["estimators"]) == []


def test_metrics_match_golden():
    assert golden.compare(EXPECTED, {"metrics": golden.metric_values(PREP)}, ["metrics"]) == []


def test_compare_names_a_moved_value():
    # the comparison can fail: a value moved beyond tolerance, and one missing, are both reported
    moved = json.loads(json.dumps(EXPECTED["metrics"]))
    moved["P@1"] += 1e-6
    del moved["R@5"]
    bad = golden.compare(EXPECTED, {"metrics": moved}, ["metrics"])
    assert len(bad) == 2 and any(b.startswith("metrics/P@1: got") for b in bad) and any("R@5: missing" in b for b in bad)


@pytest.mark.slow
def test_training_every_method_matches_golden(tmp_path):
    """~12 s on 2 cores: every method of make_golden.METHODS, 2 epochs, one trial."""
    got = {"training": golden.training_values(PREP, tmp_path)}
    bad = golden.compare(EXPECTED, got, ["training"])
    assert bad == [], f"{len(bad)} golden training values moved (generated from {EXPECTED['generated_from']}):\n" + \
        "\n".join(bad[:30])
    trained = {k for k in EXPECTED["training"]["heads"]}
    assert {k.split("/")[0] for k in trained} >= set(golden.METHODS) - {"logging"}
