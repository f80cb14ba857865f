"""The prepare stage on a tiny synthetic dataset: artifacts consistent, cache reuse and rebuild,
reproducibility, atomicity on failure, bad input."""
import json

import numpy as np
import pytest
import yaml

from poxm_core.prepare import pipeline as prep
from poxm_core.prepare import summary as prepare_summary
from poxm_core.bandit import build_variant, name_code, simulate_log, validation_split
from poxm_core.config.schema import load_config
from poxm_core.common.errors import PoxmInputError
from poxm_core.model import chunked_topk

BASE = {
    "name": "tiny",
    "datasets": [{"name": "synthetic",
                  "synthetic": {"n_train": 300, "n_test": 100, "n_features": 200, "n_labels": 50, "mean_labels": 3},
                  "variants": [{"name": "A", "alpha": 0.5, "beta": 0, "T": 2}]}],
    "model": {"dim": 16, "epochs": 3, "n_candidates": 20},
    "methods": {"poxm": {"p": [10], "lam": [0.9]}},
    "training": {"mc_slates": 4},
}


def _cfg(*overrides):
    return load_config(data=BASE, overrides=list(overrides))


@pytest.fixture
def counter(monkeypatch):
    calls = []
    real = prep.train_logging_model

    def counted(*a, **k):
        calls.append(k.get("rows"))
        return real(*a, **k)
    monkeypatch.setattr(prep, "train_logging_model", counted)
    return calls


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    cfg = _cfg()
    out = prep.prepare(cfg, "synthetic", 0, cache, progress=False)
    return cfg, cache, out


def test_artifacts_are_consistent(built):
    cfg, cache, out = built
    assert set(out) == {"A"} and (out["A"] / "manifest.json").is_file()
    P = prep.load_prepared(cfg, "synthetic", "A", 0, cache)
    n_tr, n_te, L, K, d = 300, 100, 50, 20, 16
    assert P.Z_train.shape == (n_tr, d) and P.Z_test.shape == (n_te, d) and P.Z_train.dtype == np.float32
    assert P.W.shape == (L, d) and P.b.shape == (L,)
    assert P.policy_train.cand.shape == (n_tr, K) and P.policy_test.rho.shape == (n_te, K)
    np.testing.assert_allclose(P.policy_train.rho.sum(1), 1.0)
    assert np.all(np.diff(P.policy_train.rho, axis=1) <= 0)
    # candidates = top-K of the cached head, rho = the variant built from them
    idx, sc = chunked_topk(P.Z_test, P.W, P.b, K)
    pol = build_variant(idx, sc, 0.0, 2.0, seed=(0, name_code("A"), 1))
    np.testing.assert_array_equal(pol.cand, P.policy_test.cand)
    np.testing.assert_allclose(pol.rho, P.policy_test.rho, rtol=1e-12)
    # logs: fit rows + validation rows, the validation split of the config, rewards from Y_train
    fit, val = validation_split(n_tr, 0.1, 0)
    np.testing.assert_array_equal(P.log_train.instance, fit)
    np.testing.assert_array_equal(P.log_val.instance, val)
    P.log_train.validate_against(P.policy_train.cand)
    P.log_val.validate_against(P.policy_train.cand)
    again = simulate_log(P.policy_train, P.Y_train, val, 5, seed=(0, name_code("A")))
    np.testing.assert_array_equal(again.actions, P.log_val.actions)
    Yd = P.Y_train.toarray()
    np.testing.assert_array_equal(P.log_train.rewards, Yd[P.log_train.instance[:, None], P.log_train.actions])
    assert P.Y_test.shape == (n_te, L) and P.inv_propensity.shape == (L,) and np.all(P.inv_propensity >= 1)
    # the alpha sample avoids the validation rows
    alpha_rows = np.load(cache / P.meta["variant"]["key"]["parents"]["model"] / "alpha_rows.npy")
    assert alpha_rows.size == 150 and not np.intersect1d(alpha_rows, val).size
    # statistics: manifests and the covering curve
    stats = P.meta["variant"]["stats"]
    for k in ("R@1", "R@3", "R@5", "nDCR@3", "PSR@5"):
        assert 0 <= stats["logging_policy_test"][k] <= 1
    cover = np.load(out["A"] / "covering.npy")
    assert cover.shape == (K,) and np.all(np.diff(cover) >= 0)
    csv = (out["A"] / "covering.csv").read_text().splitlines()
    assert csv[0] == "k,test,train" and len(csv) == K + 1
    row = prepare_summary.summary_row(cache, "synthetic", 0, out["A"])
    assert row["cover@1"] == pytest.approx(cover[0]) and 0 <= row["P@1"] <= 1
    mm = prep.load_prepared(cfg, "synthetic", "A", 0, cache, mmap=True)
    np.testing.assert_array_equal(np.asarray(mm.Z_train), P.Z_train)


def test_cache_reuse_and_rebuild(built, counter):
    cfg, cache, out = built
    mtime = (out["A"] / "manifest.json").stat().st_mtime_ns
    assert prep.prepare(cfg, "synthetic", 0, cache, progress=False) == out
    assert counter == [] and (out["A"] / "manifest.json").stat().st_mtime_ns == mtime
    # a new temperature: a new variant level, the logging model is reused
    out_t = prep.prepare(_cfg("datasets.0.variants.0.T=3"), "synthetic", 0, cache, progress=False)
    assert out_t["A"] != out["A"] and counter == []
    # a new model setting: retrained, data level reused
    before = {p.name for p in (cache / "data").iterdir()}
    out_m = prep.prepare(_cfg("model.epochs=2"), "synthetic", 0, cache, progress=False)
    assert len(counter) == 1 and out_m["A"] not in (out["A"], out_t["A"])
    assert {p.name for p in (cache / "data").iterdir()} == before
    # two variants sharing alpha train one model
    two = _cfg("model.epochs=4", "datasets.0.variants=[{name: A, alpha: 0.5}, {name: B, alpha: 0.5, beta: 1.5, T: 5}]")
    got = prep.prepare(two, "synthetic", 0, cache, progress=False)
    assert set(got) == {"A", "B"} and len(counter) == 2
    assert not list(cache.glob("*/.tmp-*"))


def test_reproducible_across_caches(built, tmp_path):
    cfg, cache, out = built
    other = prep.prepare(cfg, "synthetic", 0, tmp_path, progress=False)
    assert other["A"].name == out["A"].name           # same content address
    a = prep.load_prepared(cfg, "synthetic", "A", 0, cache)
    b = prep.load_prepared(cfg, "synthetic", "A", 0, tmp_path)
    for name in ("actions", "q", "rho", "rewards", "instance"):
        np.testing.assert_array_equal(getattr(a.log_train, name), getattr(b.log_train, name))
    np.testing.assert_array_equal(a.W, b.W)
    c = prep.load_prepared(cfg, "synthetic", "A", 1, tmp_path)
    assert not np.array_equal(a.log_train.actions, c.log_train.actions)


def test_failure_leaves_no_partial_artifact(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("simulated crash")
    monkeypatch.setattr(prep, "simulate_log", boom)
    with pytest.raises(RuntimeError, match="simulated crash"):
        prep.prepare(_cfg(), "synthetic", 0, tmp_path, progress=False)
    assert list((tmp_path / "variant").iterdir()) == []      # no final dir, no temporary dir
    for level in ("data", "model", "candidates"):              # complete upstream levels are kept
        (d,) = list((tmp_path / level).iterdir())
        assert (d / "manifest.json").is_file()


def test_bad_input(tmp_path):
    cfg = _cfg()
    with pytest.raises(PoxmInputError, match="unknown dataset 'synthetik'"):
        prep.prepare(cfg, "synthetik", 0, tmp_path, progress=False)
    with pytest.raises(PoxmInputError, match="unknown variant 'Z'"):
        prep.load_prepared(cfg, "synthetic", "Z", 0, tmp_path)
    with pytest.raises(PoxmInputError, match="seed"):
        prep.prepare(cfg, "synthetic", -1, tmp_path, progress=False)
    with pytest.raises(PoxmInputError, match="model.slate_size"):
        prep.prepare(_cfg("model.slate_size=30"), "synthetic", 0, tmp_path, progress=False)
    assert list((tmp_path / "variant").iterdir()) == []
    missing = load_config(data={**BASE, "data_root": str(tmp_path / "nowhere"),
                                "datasets": [{"name": "bibtex", "variants": [{"name": "A", "alpha": 0.2}]}]})
    with pytest.raises(PoxmInputError, match="not found"):
        prep.prepare(missing, "bibtex", 0, tmp_path, progress=False)


def test_prepare_command(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert prepare_summary.prepare_command(path, ["model.epochs=1"], print_config=True, cache_dir=tmp_path / "c") == 0
    out = capsys.readouterr().out
    assert "name: tiny" in out and "R@5" in out and "cover@10" in out and "synthetic" in out
    man = json.loads(next((tmp_path / "c" / "variant").iterdir()).joinpath("manifest.json").read_text())
    assert man["key"]["variant"] == {"name": "A", "beta": 0.0, "T": 2.0} and man["created_by"]["module"]
    with pytest.raises(PoxmInputError, match="model.epocs"):
        prepare_summary.prepare_command(path, ["model.epocs=1"], cache_dir=tmp_path / "c")
