"""The strict config loader: bad input gives one line naming the key (and the nearest valid one) or the
file and line; layering defaults < file < overrides; the resolved config loads back unchanged."""
from __future__ import annotations

import pytest
import yaml

from poxm_core.config import config_hash, load_config, resolved_yaml
from poxm_core.errors import PoxmInputError

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
    ("datasets.0.variants.0.alpha=.nan", "alpha must be in (0, 1]"),
    ("datasets.0.variants.0.beta=-1", "beta must be a finite number >= 0"),
    ("datasets.0.variants.0.beta=.inf", "beta must be a finite number >= 0"),
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
