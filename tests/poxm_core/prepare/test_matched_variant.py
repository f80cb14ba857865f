"""A logging variant matched to a target logging quality (`match: {logging_to_skyline_R@5: r}`): T solved on
held-out training rows reaches the target; the recorded T gives the recorded ratio when recomputed; test
labels are never read; the cache keys it by its target; bad input is one line naming dataset, variant
and key (config errors at load, an unreachable target at prepare, before a variant is published)."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import yaml

from orchestration.cli import main
from poxm_core.bandit import build_variant, name_code
from poxm_core.common.errors import PoxmInputError
from poxm_core.config.schema import config_hash, load_config, resolved_yaml
from poxm_core.metrics.ranking import greedy_metrics, stochastic_metrics
from poxm_core.prepare import match as match_mod
from poxm_core.prepare import pipeline as prep
from poxm_core.prepare import summary as prepare_summary
from poxm_core.prepare.cache import cache_keys, read_manifest

STAT = "logging_to_skyline_R@5"
TARGET = 0.5
KEY = f"datasets.0.variants.0.match.{STAT}"


def base(target=TARGET, beta=0.0) -> dict:
    return {
        "name": "matched",
        "datasets": [{"name": "synthetic",
                      "synthetic": {"n_train": 800, "n_test": 100, "n_features": 300, "n_labels": 60, "mean_labels": 3},
                      "variants": [{"name": "P", "alpha": 0.2, "beta": beta, "match": {STAT: target}},
                                   {"name": "A", "alpha": 0.2, "beta": 0.0, "T": 2}]}],
        "model": {"dim": 16, "epochs": 5, "n_candidates": 25},
        "methods": {"poxm": {"p": [10], "lam": [0.9]}},
        "training": {"mc_slates": 4},
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    cfg = load_config(data=base())
    out = prep.prepare(cfg, "synthetic", 0, cache, progress=False)
    return cfg, cache, out


def _levels(cache, vdir):
    man = read_manifest(vdir)
    return man, {k: cache / p for k, p in man["key"]["parents"].items()}


def test_reaches_the_target_and_records_it(built):
    cfg, cache, out = built
    man, par = _levels(cache, out["P"])
    m = man["stats"]["match"]
    assert abs(m["ratio"] - TARGET) <= 0.005 and abs(m["ratio"] - TARGET) <= 0.02
    assert m["target"] == TARGET and m["statistic"] == STAT and man["stats"]["T"] == m["T"] > 0
    assert m["limits"]["T_to_inf"] < TARGET < m["limits"]["T_to_0"] and m["monotone"]
    ref = read_manifest(par["reference"])["stats"]
    assert m["n_heldout"] == ref["n_heldout"] == 200 and m["reference_P@5"] == ref["reference_heldout"]["P@5"] > 0
    # the cache key holds the target, not a T; a declared variant's key is as it always was
    assert man["key"]["variant"] == {"name": "P", "beta": 0.0, "match": {STAT: TARGET}}
    assert read_manifest(out["A"])["key"]["variant"] == {"name": "A", "beta": 0.0, "T": 2.0}
    # held-out rows: training rows outside the validation slice and the logging model's sample; the
    # reference trained on the other fit rows
    held = np.load(par["reference"] / "heldout_rows.npy")
    alpha_rows = np.load(par["model"] / "alpha_rows.npy")
    val = prep.validation_split(800, 0.1, 0)[1]
    assert not np.intersect1d(held, alpha_rows).size and not np.intersect1d(held, val).size
    assert ref["n_reference"] == 800 - val.size - held.size
    # the prepare summary shows it
    rows = {r["variant"]: r for r in prepare_summary.prepare_all(cfg, cache, progress=False)}
    assert rows["P"]["T"] == m["T"] and rows["P"]["ratio"] == m["ratio"] and rows["P"]["target"] == TARGET
    assert rows["P"]["ref_P@5"] == m["reference_P@5"] and rows["P"]["n_heldout"] == 200 and rows["A"]["T"] == 2.0
    table = prepare_summary.format_table(list(rows.values()))
    assert "target" in table and "ratio" in table and "ref_P@5" in table and "n_heldout" in table


def test_recorded_T_recomputes_the_ratio_and_is_the_variant_s_T(built):
    cfg, cache, out = built
    man, par = _levels(cache, out["P"])
    m = man["stats"]["match"]
    held = np.load(par["reference"] / "heldout_rows.npy")
    Y = sp.load_npz(par["data"] / "Y_train.npz").tocsr()
    inv = np.load(par["data"] / "inv_propensity.npy")
    cand, score = np.load(par["candidates"] / "cand_train.npy"), np.load(par["candidates"] / "score_train.npy")
    ref_p5 = greedy_metrics(Y[held], np.load(par["reference"] / "reference_top5.npy"), inv, (5,))["P@5"]
    assert ref_p5 == pytest.approx(m["reference_P@5"], abs=1e-12)
    pol = build_variant(cand[held], score[held], 0.0, m["T"], seed=(0, name_code("P"), 0), rows=held)
    exact = stochastic_metrics(Y[held], pol.cand, pol.rho, inv, (5,), exact_budget=held.size * cand.shape[1])
    assert exact["R@5"] / ref_p5 == pytest.approx(m["ratio"], abs=1e-9)
    # a Monte-Carlo estimate of the same expectation (no quadrature) agrees within its error
    mc = stochastic_metrics(Y[held], pol.cand, pol.rho, inv, (5,), n_slates=2000, seed=3, exact_budget=0)
    assert abs(mc["R@5"] - exact["R@5"]) <= 4 * mc["R@5_se"] + 1e-12
    # the variant logs with rho at exactly that T: every training row's rho, and the test split's
    P = prep.load_prepared(cfg, "synthetic", "P", 0, cache)
    full = build_variant(cand, score, 0.0, m["T"], seed=(0, name_code("P"), 0))
    np.testing.assert_array_equal(full.cand, P.policy_train.cand)
    np.testing.assert_array_equal(full.rho, P.policy_train.rho)
    np.testing.assert_array_equal(pol.rho, P.policy_train.rho[held])
    cand_te, score_te = np.load(par["candidates"] / "cand_test.npy"), np.load(par["candidates"] / "score_test.npy")
    np.testing.assert_array_equal(build_variant(cand_te, score_te, 0.0, m["T"], seed=(0, name_code("P"), 1)).rho,
                                  P.policy_test.rho)


@pytest.mark.slow
def test_test_labels_are_never_read(built, tmp_path):
    """The same prepared data with other test labels: the same reference, the same T."""
    cfg, cache, out = built
    man, par = _levels(cache, out["P"])
    for level in ("data", "model", "candidates"):     # the reference and the variant are built again
        shutil.copytree(par[level], tmp_path / man["key"]["parents"][level])
    y_test = tmp_path / man["key"]["parents"]["data"] / "Y_test.npz"
    Y_te = sp.load_npz(y_test)
    other = sp.random(*Y_te.shape, density=0.2, format="csr", random_state=1, dtype=np.float32)
    other.data[:] = 1.0
    y_test.unlink()
    sp.save_npz(y_test, other, compressed=False)
    again = prep.prepare(cfg, "synthetic", 0, tmp_path, progress=False)
    m0, m1 = man["stats"]["match"], read_manifest(again["P"])["stats"]["match"]
    assert m1["T"] == m0["T"] and m1["ratio"] == m0["ratio"] and m1["reference_P@5"] == m0["reference_P@5"]
    # ...while the test metrics did read them
    assert read_manifest(again["P"])["stats"]["logging_policy_test"] != man["stats"]["logging_policy_test"]


def test_cache_reuse_and_a_new_target(built, monkeypatch):
    cfg, cache, out = built
    trained, solved = [], []
    real_train, real_solve = match_mod.train_logging_model, prep.solve_temperature
    monkeypatch.setattr(match_mod, "train_logging_model", lambda *a, **k: trained.append(1) or real_train(*a, **k))
    monkeypatch.setattr(prep, "train_logging_model", lambda *a, **k: trained.append(1) or real_train(*a, **k))
    monkeypatch.setattr(prep, "solve_temperature", lambda *a, **k: solved.append(1) or real_solve(*a, **k))
    # which label files the solve reads (the variant's test metrics read Y_test afterwards)
    loads, inside = [], []
    real_load, real_solve_T = sp.load_npz, prep._solve_T
    monkeypatch.setattr(sp, "load_npz", lambda p, *a, **k: loads.append((Path(p).name, bool(inside)))
                        or real_load(p, *a, **k))

    def solve_T(*a, **k):
        inside.append(1)
        try:
            return real_solve_T(*a, **k)
        finally:
            inside.pop()
    monkeypatch.setattr(prep, "_solve_T", solve_T)
    mtime = (out["P"] / "manifest.json").stat().st_mtime_ns
    assert prep.prepare(cfg, "synthetic", 0, cache, progress=False) == out
    assert trained == [] and solved == [] and (out["P"] / "manifest.json").stat().st_mtime_ns == mtime
    # a changed target: that variant again (one solve), nothing trained, the declared variant untouched
    cfg2 = load_config(data=base(target=0.45))
    out2 = prep.prepare(cfg2, "synthetic", 0, cache, progress=False)
    assert out2["P"] != out["P"] and out2["A"] == out["A"] and trained == [] and solved == [1]
    assert ("Y_train.npz", True) in loads and ("Y_test.npz", True) not in loads
    assert ("Y_test.npz", False) in loads
    assert abs(read_manifest(out2["P"])["stats"]["match"]["ratio"] - 0.45) <= 0.005
    keys = cache_keys(cfg2, "synthetic", 0)
    assert keys.variant["P"][0]["reference"] == cache_keys(cfg, "synthetic", 0).variant["P"][0]["reference"]


def test_beta_noise_is_handled(built):
    """beta > 0: the limits and the solve use the variant's frozen noise; the target is still reached."""
    _, cache, _ = built
    cfg = load_config(data=base(target=0.45, beta=1.5))
    out = prep.prepare(cfg, "synthetic", 0, cache, progress=False)
    man, par = _levels(cache, out["P"])
    m = man["stats"]["match"]
    assert abs(m["ratio"] - 0.45) <= 0.005 and man["key"]["variant"]["beta"] == 1.5
    held = np.load(par["reference"] / "heldout_rows.npy")
    cand, score = np.load(par["candidates"] / "cand_train.npy"), np.load(par["candidates"] / "score_train.npy")
    pol = build_variant(cand[held], score[held], 1.5, m["T"], seed=(0, name_code("P"), 0), rows=held)
    Y = sp.load_npz(par["data"] / "Y_train.npz").tocsr()[held]
    inv = np.load(par["data"] / "inv_propensity.npy")
    r = stochastic_metrics(Y, pol.cand, pol.rho, inv, (5,), exact_budget=held.size * cand.shape[1])["R@5"]
    assert r / m["reference_P@5"] == pytest.approx(m["ratio"], abs=1e-9)


@pytest.mark.parametrize("target", [0.01, 1.0])
def test_unreachable_target_is_one_line_before_a_variant_exists(built, target, tmp_path, capsys):
    cfg, cache, out = built
    limits = read_manifest(out["P"])["stats"]["match"]["limits"]
    assert not limits["T_to_inf"] < target < limits["T_to_0"]       # below uniform, above greedy
    bad = load_config(data=base(target=target))
    with pytest.raises(PoxmInputError) as exc:
        prep.prepare(bad, "synthetic", 0, cache, progress=False)
    msg = str(exc.value)
    assert len(msg.splitlines()) == 1 and "out of reach" in msg
    assert f"dataset 'synthetic', variant 'P': config key '{KEY}'" in msg
    assert not (cache / "variant" / cache_keys(bad, "synthetic", 0).variant["P"][1]).exists()
    # through the command line: exit 2, the same line
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(base(target=target)))
    assert main(["prepare", str(path), "--cache-dir", str(cache)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == f"poxm: error: {msg}"


@pytest.mark.parametrize("variant, key, needle", [
    ({"name": "P", "alpha": 0.2, "T": 2, "match": {STAT: 0.5}}, "datasets.0.variants.0.T", "not both"),
    ({"name": "P", "alpha": 0.2, "match": {"logging_to_skyline_R@3": 0.5}},
     "datasets.0.variants.0.match.logging_to_skyline_R@3", f"did you mean '{STAT}'"),
    ({"name": "P", "alpha": 0.2, "match": {STAT: 1.5}}, KEY, "must be a number in (0, 1]"),
    ({"name": "P", "alpha": 0.2, "match": {STAT: 0}}, KEY, "must be a number in (0, 1]"),
])
def test_config_errors_name_dataset_variant_and_key(tmp_path, capsys, variant, key, needle):
    data = base()
    data["datasets"][0]["variants"][0] = variant
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(PoxmInputError) as exc:
        load_config(path)
    msg = str(exc.value)
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "name: P" in t)
    assert len(msg.splitlines()) == 1 and msg.startswith(f"{path}:")
    assert int(msg.split(":")[1]) >= line                         # at the variant's lines
    assert f"config key '{key}'" in msg and "dataset 'synthetic', variant 'P'" in msg and needle in msg
    assert main(["prepare", str(path), "--cache-dir", str(tmp_path / "cache")]) == 2
    assert not (tmp_path / "cache").exists()                      # nothing prepared
    assert capsys.readouterr().err.strip() == f"poxm: error: {msg}"
    # an override is named as the place
    with pytest.raises(PoxmInputError, match="override 'datasets.0.variants.0.T=2'.*not both"):
        load_config(data=base(), overrides=["datasets.0.variants.0.T=2"])


def test_dump_loads_back_and_declared_variants_keep_their_hash():
    cfg = load_config(data=base())
    dumped = yaml.safe_load(resolved_yaml(cfg))
    assert dumped["datasets"][0]["variants"][0] == {"name": "P", "alpha": 0.2, "beta": 0.0, "match": {STAT: TARGET}}
    assert config_hash(load_config(data=dumped)) == config_hash(cfg)
    # a declared variant dumps as before `match` existed: T always written, no match key
    assert dumped["datasets"][0]["variants"][1] == {"name": "A", "alpha": 0.2, "beta": 0.0, "T": 2.0}
    plain = load_config(data={**base(), "datasets": [{**base()["datasets"][0], "variants": [{"name": "A", "alpha": 0.2}]}]})
    assert plain.datasets[0].variants[0].T == 1.0 and not plain.datasets[0].variants[0].matched
    assert json.dumps(yaml.safe_load(resolved_yaml(plain))["datasets"][0]["variants"][0]) == \
        '{"name": "A", "alpha": 0.2, "beta": 0.0, "T": 1.0}'
