"""POTEC's label-cluster counts as a grid of their own (`methods.potec.k`) and the estimators' cluster
count (`selection.clusters`): the grids, the refusals with the key to write, and what a trial reads."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from poxm_core.common.errors import PoxmInputError
from poxm_core.config.schema import MethodConfig, load_config, resolved_dict
from poxm_core.estimators.mips import ESTIMATOR_CLUSTERS, estimator_clusters
from poxm_core.methods import get_method
from poxm_core.methods.base import DEFAULT_P
from poxm_core.methods.potec import POTECOptions
from poxm_core.methods.registry import head_grid
from poxm_core.training.command import pick_trial
from poxm_core.training.reporting import EvalInputs
from poxm_core.training.trainer import run_trial
from poxm_core.training.trial_setup import build_heads, check_spec
from tests.trial_fixtures import tiny_config, tiny_prepared

PREP = tiny_prepared(n_tr=120, L=40, K=16)


def test_potec_grid_is_k_by_lam_and_defaults_to_the_former_p_grid():
    grid = head_grid("potec", POTECOptions(k=[3, 20], lam=[0.8, 0.9]))
    assert [(h.p, h.lam) for h in grid] == [(3, 0.8), (3, 0.9), (20, 0.8), (20, 0.9)]
    assert sorted({h.p for h in head_grid("potec", None)}) == list(DEFAULT_P)     # as when p stood for k
    assert get_method("potec").size_key == "k" and get_method("poxm").size_key == "p"


def test_potec_p_is_refused_with_the_key_to_write():
    m = get_method("potec")
    with pytest.raises(PoxmInputError, match=r"^methods\.potec\.p: method 'potec' has no action selector p; its "
                                             r"grid is 'k': write methods\.potec\.k: \[10, 50\]$"):
        m.validate(MethodConfig(p=[10, 50]))
    for bad in ([0], [4, 4], []):
        with pytest.raises(PoxmInputError, match=r"^methods\.potec\.k: expected distinct positive ints"):
            m.validate(POTECOptions(k=bad))


def test_config_keys_round_trip_and_are_named_where_wrong(tmp_path):
    cfg = load_config(data={**_data(), "selection": {"clusters": 5}})
    d = resolved_dict(cfg)
    assert d["methods"]["potec"]["k"] == [3, 20] and d["selection"]["clusters"] == 5
    assert "clusters" not in resolved_dict(load_config(data=_data()))["selection"]   # unset: not in the run id
    for bad, msg in (("selection.clusters=0", "greater than or equal to 1"), ("selection.clusters=true", "boolean")):
        with pytest.raises(PoxmInputError, match=rf"selection\.clusters.*{msg}"):
            load_config(data=_data(), overrides=[bad])


def _data() -> dict:
    return {"name": "tiny-sweep", "seeds": [0], "device": "cpu",
            "datasets": [{"name": "tiny", "variants": [{"name": "A", "alpha": 0.5}]}],
            "methods": {"logging": {}, "dm": {"lr": 0.01}, "potec": {"k": [3, 20], "lam": [0.9], "lr": 0.01}},
            "training": {"epochs": 1, "batch_size": 16, "mc_slates": 8, "eval_max_support": 10}}


def test_k_may_exceed_the_candidates_but_not_the_labels():
    """k is not Phi^p: k = 20 > K = 16 candidates trains (each context sees at most K clusters); k > L
    is refused at trial start naming methods.potec.k."""
    cfg = tiny_config({"logging": {}, "dm": {"lr": 0.01}, "potec": {"k": [20], "lam": [0.9], "lr": 0.01}})
    spec = pick_trial(cfg)
    check_spec(cfg, spec, PREP)                                        # p > K would be refused here
    heads, _ = build_heads(cfg, spec, PREP, torch.device("cpu"))
    potec = next(h for h in heads if h.spec.method == "potec")
    assert int(potec.method.clusters.max()) == 19 and potec.method.clusters.shape == (PREP.n_labels,)
    big = tiny_config({"logging": {}, "dm": {}, "potec": {"k": [41], "lam": [0.9]}})
    with pytest.raises(PoxmInputError, match=r"^methods\.potec\.k: k=41 clusters exceed the 40 labels"):
        build_heads(big, pick_trial(big), PREP, torch.device("cpu"))


def test_a_trial_reads_k_and_selection_clusters(tmp_path):
    """POTEC has no Phi^p: its sIS reads all K candidates, so equals its IS (its policy's support is C(x)),
    whatever k. selection.clusters reaches MIPS: at k = L every label is a cluster of its own, and MIPS's
    weights are then sIS's exactly (docs/estimators.md), for every head."""
    methods = {"logging": {}, "dm": {"lr": 0.01}, "poxm": {"p": [4], "lam": [0.9], "lr": 0.01},
               "potec": {"k": [3], "lam": [0.9], "lr": 0.01}}
    cfg = load_config(data={**_data(), "methods": methods, "selection": {"clusters": PREP.n_labels}})
    rows = run_trial(cfg, pick_trial(cfg), PREP, tmp_path, progress=False)
    val = rows[(rows["split"] == "val") & rows["final"]].set_index(["method", "metric"])["value"]
    assert val[("potec", "sIS")] == pytest.approx(val[("potec", "IS")], rel=1e-12)
    assert set(rows[rows["method"] == "potec"]["p"]) == {3}                               # k in the size column
    for m in ("logging", "dm", "poxm", "potec"):
        assert val[(m, "MIPS")] == pytest.approx(val[(m, "sIS")], rel=1e-10), m


def test_estimator_clusters_default_key_and_limit():
    assert estimator_clusters(None, 1000) == ESTIMATOR_CLUSTERS == 32 and estimator_clusters(None, 7) == 7
    assert estimator_clusters(5, 40) == 5 and estimator_clusters(40, 40) == 40
    for bad in (41, 0, True, 2.0):
        with pytest.raises(PoxmInputError, match=r"^selection\.clusters: k=.*expected an int in \[1, 40\]"):
            estimator_clusters(bad, 40)


def test_the_trial_gives_mips_and_offcem_the_configured_clusters():
    dev = torch.device("cpu")
    default = EvalInputs(PREP, dev).action_arrays["action_cluster"]
    five = EvalInputs(PREP, dev, clusters=5).action_arrays["action_cluster"]
    assert default.shape == five.shape == (PREP.n_labels,)
    assert len(np.unique(default)) == 32 and sorted(np.unique(five)) == [0, 1, 2, 3, 4]
    with pytest.raises(PoxmInputError, match=r"^selection\.clusters: k=41"):
        EvalInputs(PREP, dev, clusters=41)


def test_the_plan_checks_p_against_the_candidates_but_not_k(tmp_path):
    """Before Ray starts: p > K is refused (Phi^p), POTEC's k > K is not; a POTEC entry still written with p
    is refused at its line with the key to write."""
    from orchestration.stages.plan import plan_sweep

    path = tmp_path / "sweep.yaml"
    path.write_text("name: tiny-sweep\nseeds: [0]\ndatasets:\n  - name: synthetic\n    synthetic: {n_labels: 60}\n"
                    "    variants: [{name: A, alpha: 0.5}]\nmodel: {n_candidates: 16}\n"
                    "methods:\n  logging: {}\n  potec: {p: [20], lam: [0.9]}\n")
    cfg = load_config(path)
    with pytest.raises(PoxmInputError, match=rf"^{path}:10: methods\.potec\.p: .*write methods\.potec\.k: \[20\]$"):
        plan_sweep(cfg, runs_dir=tmp_path, check_data=False)
    plan = plan_sweep(load_config(path, ["methods.potec={k: [20], lam: [0.9]}"]), runs_dir=tmp_path, check_data=False)
    assert {(h.method, h.p) for s in plan.specs for h in s.heads} >= {("potec", 20)}
    with pytest.raises(PoxmInputError, match=r"methods\.poxm\.p': p=20 exceeds the 16 candidates"):
        plan_sweep(load_config(path, ["methods={logging: {}, poxm: {p: [20], lam: [0.9]}}"]), runs_dir=tmp_path,
                   check_data=False)
