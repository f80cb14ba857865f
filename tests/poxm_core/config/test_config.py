"""The strict config loader: bad input gives one line naming the key (and the nearest valid one) or the
file and line; layering defaults < file < overrides; the resolved config loads back unchanged."""
from __future__ import annotations

import pytest
import yaml

from poxm_core.config.schema import (PUBLISHED_METHOD_KEYS, SweepConfig, config_hash, load_config,
                              resolved_dict, resolved_yaml)
from poxm_core.common.errors import PoxmInputError

BASE = {
    "name": "t",
    "datasets": [{"name": "synthetic",
                  "synthetic": {"n_train": 50, "n_test": 20, "n_features": 30, "n_labels": 10},
                  "variants": [{"name": "A", "alpha": 0.2, "beta": 0.0, "T": 2.0}]}],
    "methods": {"poxm": {"p": [10], "lam": [0.9]}},
}


def _write(tmp_path, text: str):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("override, needle", [
    ("trainig.epochs=3", "unknown config key 'trainig' (did you mean 'training'?)"),
    ("training.epoch=3", "unknown config key 'training.epoch' (did you mean 'training.epochs'?)"),
    ("datasets.0.variants.0.alpha=0", "alpha must be in (0, 1], got 0"),
    ("datasets.0.variants.0.alpha=1.5", "alpha must be in (0, 1]"),
    ("datasets.0.variants.0.alpha=.nan", "should be a finite number"),
    ("datasets.0.variants.0.beta=-1", "beta must be a finite number >= 0"),
    ("datasets.0.variants.0.beta=.inf", "should be a finite number"),
    ("datasets.0.variants.0.T=0", "T must be a finite number > 0"),
    ("datasets.0.variants.0.T=-2", "T must be a finite number > 0"),
    ("training.epochs=0", "config key 'training.epochs'"),
    ("device=tpu", "config key 'device'"),
    ("seeds=[1,1]", "seeds must be a non-empty list of distinct ints"),
    ("epochs", "expected key=value"),
    ("datasets.7.name=x", "'7' is not a valid index"),
])
def test_bad_values_give_one_line_naming_the_key(override, needle):
    with pytest.raises(PoxmInputError) as exc:
        load_config(data=BASE, overrides=[override])
    msg = str(exc.value)
    assert needle in msg
    assert "\n" not in msg


def test_bad_yaml_names_file_and_line(tmp_path):
    p = _write(tmp_path, "name: t\nseeds: [0\ndatasets: []\n")
    with pytest.raises(PoxmInputError, match=r"c\.yaml:\d+: not valid YAML"):
        load_config(p)


def test_value_error_names_file_and_line(tmp_path):
    text = yaml.safe_dump(BASE, sort_keys=False).replace("alpha: 0.2", "alpha: 3.0")
    p = _write(tmp_path, text)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "alpha: 3.0" in l)
    with pytest.raises(PoxmInputError) as exc:
        load_config(p)
    assert str(exc.value).startswith(f"{p}:{line}: config key 'datasets.0.variants.0.alpha'")


def test_unknown_key_names_file_line_and_nearest_key(tmp_path):
    text = yaml.safe_dump(BASE, sort_keys=False).replace("beta: 0.0", "betta: 0.0")
    p = _write(tmp_path, text)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "betta" in l)
    with pytest.raises(PoxmInputError) as exc:
        load_config(p)
    assert str(exc.value) == (f"{p}:{line}: unknown config key 'datasets.0.variants.0.betta' "
                              "(did you mean 'datasets.0.variants.0.beta'?)")


@pytest.mark.parametrize("override, needle", [
    ("training.epoch=3", "unknown config key 'training.epoch' (did you mean 'training.epochs'?)"),
    ("trainig.epochs=3", "unknown config key 'trainig' (did you mean 'training'?)"),
    ("datasets.0.variants.0.gamma=1", "unknown config key 'datasets.0.variants.0.gamma'"),
    ("training={epoch: 3}", "unknown config key 'training.epoch'"),
    ("datasets.0.variants.0.beta=-5", "config key 'datasets.0.variants.0.beta'"),
    ("seeds=[1,1]", "seeds must be a non-empty list of distinct ints"),
])
def test_an_override_is_blamed_not_the_file(tmp_path, override, needle):
    p = _write(tmp_path, yaml.safe_dump(BASE, sort_keys=False))
    with pytest.raises(PoxmInputError) as exc:
        load_config(p, overrides=["training.epochs=2", override])
    msg = str(exc.value)
    assert msg.startswith(f"override '{override}': "), msg
    assert needle in msg and str(p) not in msg


def test_one_key_notation_in_messages(tmp_path):
    """Every message writes a key path the way an override names it: datasets.0.variants.1.T, never [0]."""
    text = "name: t\ndatasets:\n  - name: a\n    name: b\n"
    with pytest.raises(PoxmInputError, match=r"c\.yaml:4: duplicate config key 'datasets\.0\.name'"):
        load_config(_write(tmp_path, text))
    for ov in ("datasets.0.variants.0.gamma=1", "datasets.0.bogus=1", "datasets.0.variants.0.T=-1"):
        with pytest.raises(PoxmInputError) as exc:
            load_config(data=BASE, overrides=[ov])
        assert "[" not in str(exc.value).split(": ", 1)[1].split(" (valid")[0], str(exc.value)


@pytest.mark.parametrize("override, got", [
    ("datasets.0.variants.0.beta=-5", "got -5"), ("datasets.0.variants.0.T=-5", "got -5"),
    ("datasets.0.variants.0.alpha=0", "got 0"), ("training.epochs=-5", "(got -5)"),
    ("device=tpu", "(got 'tpu')"), ("resources.num_workers=2", None), ("resources.trials_per_job=0", None),
])
def test_the_value_given_is_quoted_once(override, got):
    """'got -5', not 'got -5.0 (got -5)': one 'got', with the value as given; none where it is already shown."""
    with pytest.raises(PoxmInputError) as exc:
        load_config(data=BASE, overrides=[override])
    msg = str(exc.value)
    assert msg.count("got") == (1 if got else 0), msg
    assert got is None or msg.endswith(got), msg


def test_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(PoxmInputError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(PoxmInputError, match="expected a mapping"):
        load_config(_write(tmp_path, "- 1\n- 2\n"))


def test_layers_and_resolved_round_trip(tmp_path):
    cfg = load_config(data=BASE, overrides=["training.epochs=3", "datasets.0.variants.0.T=4"])
    assert cfg.training.epochs == 3                    # override beats file
    assert cfg.training.batch_size == 64               # default where neither says
    assert cfg.datasets[0].variants[0].T == 4.0
    again = load_config(_write(tmp_path, resolved_yaml(cfg)))
    assert again == cfg
    assert config_hash(again) == config_hash(cfg)
    assert config_hash(load_config(data=BASE)) != config_hash(cfg)


# Run ids (the run directory's name) computed before the per-method options classes, with the one flat
# MethodConfig: published results (docs/results) and scripts/benchmark.sh name runs by them.
# (configs/examples/own-data.yaml is not here: its data paths resolve against the checkout's folder, so its
# id differs between clones; it has no published results. The corel5k and stackex-cooking configs name
# their files inside `folder` under the data root, so their ids are the same everywhere.)
# The published dataset configs changed on purpose when they took the matched variant P, ten seeds and the
# paper's grids (ids before: amazon-670k 1d1450d7d242, bibtex 9dbd3a7cb879, corel5k a88d2a1394be,
# stackex-cooking 08691350aede, delicious 327a5953cbf6, real-data cbbc65991f98, eurlex 1ada728a4653, wiki10-31k
# 9c93d5bfbfc0); the results published before keep their own config.yaml under docs/results (superseded ones: tests/golden/published-configs/), ids unchanged.
# They changed again when they took supervised_logs and potec (ids before: amazon-670k 5a4a61f4cdcf, bibtex 628e681b0dc3, corel5k d4f8b3a85635, stackex-cooking 94a4aab2ae60, delicious c78ba0fc4031, real-data 3706df3bf937, eurlex 97ebc6aa1088, quickstart 66facd660c34, wiki10-31k 686ebc057b44).
# The quickstart's changed once more when supervised_logs took the IS-based rate there (before: quickstart fa6ee0a0b65a).
# They changed again when POTEC's label-cluster counts became their own grid `k` (was `p`) (ids before: amazon-670k 100735f67ec8, bibtex 4c837b2762ae, corel5k def86a2473f8, delicious 5063e901537b, eurlex 5b836e8658d9, quickstart c13cbd1451af, real-data 80d0d6d4b2b1, stackex-cooking 6a145d1f7c40, wiki10-31k 09ce0f8d1666).
# And when the real-data configs took the wide grids, p {2, ..., 100} x lambda {0.5, ..., 1.5} for every method (ids before: bibtex 7c99cca6f5d9, corel5k 2171d16e87f7, delicious 785cea0430eb, real-data cf708b4a61ed, stackex-cooking 5ba8ebe2890d).
PUBLISHED_IDS = {
    "configs/amazon-670k.yaml": "amazon-670k-27ab13341316",   # ce1f107f22e8 before training.input_adam: lazy, then 1d1450d7d242
    "docs/results/amazon-670k-generated/config.yaml": "amazon-670k-generated-5f4d2dd33cdb", "configs/bibtex.yaml": "bibtex-cbf4831fbfbb",
    "configs/corel5k.yaml": "corel5k-8b7ba2cbfeb5", "configs/stackex-cooking.yaml": "stackex-cooking-bf024bd90b37",
    "configs/delicious.yaml": "delicious-e1f5376784c7",
    "configs/real-data.yaml": "real-data-f1c85dacf69a", "tests/golden/published-configs/robustness-5seeds-real-data.yaml": "real-data-bb064814c18e",
    "docs/results/real-data/config.yaml": "real-data-b1e6c4d1af5b", "docs/results/ablation-warm-start/config.yaml": "real-data-c0506733ed55", "configs/eurlex.yaml": "eurlex-db4c81e0b828",
    "configs/gpu-smoke.yaml": "gpu-smoke-1477a310885d",
    "configs/prepare-check.yaml": "prepare-check-792e2157721a", "configs/quickstart.yaml": "quickstart-be6d72585a56",
    "configs/wiki10-31k.yaml": "wiki10-31k-6021feab0bb4",
    "tests/golden/published-configs/bibtex-legacy.yaml": "bibtex-legacy-429b64b7f877",
    "tests/golden/published-configs/bibtex-warm.yaml": "bibtex-warm-208295746dba",
    "tests/golden/published-configs/delicious-legacy.yaml": "delicious-legacy-7bc027ebf7be",
    "tests/golden/published-configs/delicious-warm.yaml": "delicious-warm-d236cbbe0f1a",
    "tests/golden/published-configs/bibtex-cpu.yaml": "bibtex-43a671178bb8", "tests/golden/published-configs/delicious-cpu.yaml": "delicious-423deeb7def7",
}


@pytest.mark.parametrize("path", sorted(PUBLISHED_IDS))
def test_per_method_options_keep_every_run_id(path):
    from pathlib import Path

    from orchestration.rundir import sweep_id
    root = Path(__file__).resolve().parents[3]
    cfg = load_config(root / path)
    assert sweep_id(cfg) == PUBLISHED_IDS[path]
    for name, mc in resolved_dict(cfg)["methods"].items():    # every method dumps the published keys
        assert list(mc)[:7] == ["p", "lam", "lr", "init", *PUBLISHED_METHOD_KEYS], name
        for k, v in PUBLISHED_METHOD_KEYS.items():                # at the published default where it has none
            assert mc[k] == getattr(cfg.methods[name], k, v) and (hasattr(cfg.methods[name], k) or mc[k] == v)


def test_option_of_another_method_is_refused_with_its_key_path(tmp_path):
    # config.py is schema-only (no registry import): a method's own options are extras of MethodConfig,
    # checked by the methods layer (`Method.validate`, which the sweep plan and trial setup run)
    from poxm_core.methods import get_method
    from poxm_core.methods.banditnet import BanditNetOptions

    def check(cfg):
        return {name: get_method(name).validate(mc) for name, mc in cfg.methods.items()}

    p = _write(tmp_path, yaml.safe_dump({**BASE, "methods": {"poxm": {}, "dm": {}, "banditnet": {}}}))
    opts = check(load_config(p, ["methods.banditnet.softmax=sampled", "methods.poxm.support=candidates"]))
    from poxm_core.methods.dm import DirectMethodOptions
    assert type(opts["dm"]) is DirectMethodOptions and type(opts["banditnet"]) is BanditNetOptions
    assert opts["banditnet"].softmax == "sampled" and opts["banditnet"].n_negatives == 1024
    assert opts["poxm"].support == "candidates" and not hasattr(opts["poxm"], "softmax")
    with pytest.raises(PoxmInputError, match=r"^methods\.dm\.support: method 'dm' has no option 'support' "
                                             r"\(its keys: p, lam, lr, init, loss_on\)$"):
        check(load_config(p, ["methods.dm.support=candidates"]))
    with pytest.raises(PoxmInputError, match=r"methods\.poxm\.n_negatives: method 'poxm' has no option"):
        check(load_config(p, ["methods.poxm.n_negatives=8"]))
    with pytest.raises(PoxmInputError, match=r"methods\.poxm\.suport: method 'poxm' has no option 'suport' "
                                             r"\(did you mean 'support'\?\)"):
        check(load_config(p, ["methods.poxm.suport=phi"]))
    with pytest.raises(PoxmInputError, match=r"config key 'methods\.banditnet\.n_negatives': expected an integer"):
        check(load_config(p, ["methods.banditnet.n_negatives=true"]))
    with pytest.raises(PoxmInputError, match=r"methods\.banditnet\.softmax: Input should be 'full' or 'sampled'"):
        check(load_config(p, ["methods.banditnet.softmax=ful"]))
    with pytest.raises(PoxmInputError, match=r"config key 'methods\.poxm\.lr': expected a number"):
        load_config(p, ["methods.poxm.lr=true"])             # the common keys: strict in config itself
    # a resolved config writes the published keys for every method: at their defaults they load back
    assert load_config(p, ["methods.dm.softmax=full", "methods.dm.support=phi"]) == load_config(p)
    # and the dump writes exactly today's keys: common, published (defaults), then an option only when given
    hot = load_config(p, ["methods.dm.temperature=2.5"])
    assert list(resolved_dict(hot)["methods"]["dm"]) == ["p", "lam", "lr", "init", *PUBLISHED_METHOD_KEYS, "temperature"]
    assert config_hash(hot) != config_hash(load_config(p))
    with pytest.raises(PoxmInputError, match=r"methods\.dm\.temperature: method 'dm' has no option"):
        check(hot)
    assert SweepConfig.model_validate({**BASE, "methods": {"dm": {"support": "candidates"}}})  # schema only


def test_selection_criterion_defaults_to_is_and_leaves_the_run_id_alone():
    from pathlib import Path

    from orchestration.rundir import sweep_id
    root = Path(__file__).resolve().parents[3]
    assert load_config(data=BASE).selection.criterion == "IS"
    ids = {c: sweep_id(load_config(root / "configs/bibtex.yaml", [f"selection.criterion={c}"]))
           for c in ("IS", "SNIS", "PIS")}
    assert set(ids.values()) == {PUBLISHED_IDS["configs/bibtex.yaml"]}   # selection trains nothing
    assert "criterion: IS" in resolved_yaml(load_config(root / "configs/bibtex.yaml"))


def test_default_data_root_is_next_to_the_repository(monkeypatch):
    """Without $POXM_DATA_ROOT the data root is ../shared/data beside the checkout, wherever the module
    defining it sits in the package (a wrong depth silently skips every real-data test)."""
    from pathlib import Path

    from poxm_core.config.schema import default_data_root
    monkeypatch.delenv("POXM_DATA_ROOT", raising=False)
    repo = Path(__file__).resolve().parents[3]
    assert default_data_root() == (repo.parent / "shared" / "data").resolve()
