"""Fresh splits (poxm_core/data/splits.py): a seeded test share of one file, a re-split of a dataset's own
train + test union (`split: {from: union}`), and a split re-drawn per run seed (`redraw_per_seed`); the
config checks of each and the prepare cache's data key."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from poxm_core.common.errors import PoxmInputError
from poxm_core.config.schema import (SplitConfig, config_hash, default_data_root, load_config, resolved_dict,
                                     resolved_yaml)
from poxm_core.data import DATASETS, DatasetSpec, load_dataset
from poxm_core.data.splits import resplit, split_rows
from poxm_core.data.types import XMCData, XMCSplit

VARIANTS = [{"name": "A", "alpha": 0.2, "beta": 0.0, "T": 2.0}]


def _cfg(dataset: dict, tmp_path=None, seeds=(0,)):
    data = {"name": "s", "seeds": list(seeds), "datasets": [{**dataset, "variants": VARIANTS}],
            "methods": {"logging": {}}}
    if tmp_path is not None:
        data["data_root"] = str(tmp_path)
    return load_config(data=data)


# ------------------------------------------------------------------ split_rows

def test_split_rows_is_a_seeded_partition():
    tr, te = split_rows(101, 0.25, seed=7)
    assert te.size == 25 and tr.size == 76                        # round(0.25 * 101) = 25
    assert np.array_equal(np.sort(np.concatenate([tr, te])), np.arange(101))   # every row, once
    assert np.all(np.diff(tr) > 0) and np.all(np.diff(te) > 0)
    again = split_rows(101, 0.25, seed=7)
    assert np.array_equal(again[0], tr) and np.array_equal(again[1], te)
    assert not np.array_equal(split_rows(101, 0.25, seed=8)[1], te)


def test_a_fixed_split_is_the_one_drawn_before_redrawing_existed():
    # the published npz splits (seed 0) are default_rng(seed).permutation(n)'s first round(f n) rows
    perm = np.random.default_rng(0).permutation(5000)
    tr, te = split_rows(5000, 0.25, seed=0)
    assert np.array_equal(te, np.sort(perm[:1250])) and np.array_equal(tr, np.sort(perm[1250:]))


def test_per_seed_splits_differ_by_run_seed_and_repeat_for_the_same_one():
    fixed = split_rows(200, 0.3, seed=5)[1]
    per = {s: split_rows(200, 0.3, seed=5, run_seed=s)[1] for s in (0, 1, 2)}
    assert len({tuple(t) for t in [fixed, *per.values()]}) == 4
    assert all(t.size == 60 for t in per.values())
    assert np.array_equal(split_rows(200, 0.3, seed=5, run_seed=1)[1], per[1])
    assert not np.array_equal(split_rows(200, 0.3, seed=6, run_seed=1)[1], per[1])   # the split seed counts too


def test_too_few_rows_is_one_line():
    with pytest.raises(PoxmInputError, match=r"^here: 3 rows are too few to split off test_fraction=0.1"):
        split_rows(3, 0.1, seed=0, where="here")


# ------------------------------------------------------------------ the union re-split

def _tagged(n_train: int, n_test: int, L: int = 6) -> XMCData:
    """Row r of the union (train first) has feature r with value r + 1 and label r % L: a row found in a
    split names the union row it came from."""
    def part(rows):
        X = sp.csr_matrix((rows + 1.0, (np.arange(rows.size), rows)), shape=(rows.size, n_train + n_test),
                          dtype=np.float32)
        Y = sp.csr_matrix((np.ones(rows.size, np.float32), (np.arange(rows.size), rows % L)), shape=(rows.size, L))
        return XMCSplit(X, Y)
    return XMCData("t", part(np.arange(n_train)), part(np.arange(n_train, n_train + n_test)))


def _origin(split: XMCSplit) -> np.ndarray:
    assert np.all(np.diff(split.X.indptr) == 1)
    return split.X.indices.copy()


def test_union_resplit_is_a_partition_of_all_rows_with_their_labels():
    data = _tagged(30, 12)
    out = resplit(data, SplitConfig(test_fraction=12 / 42, seed=2026, source="union"), run_seed=0)
    tr, te = _origin(out.train), _origin(out.test)
    assert (tr.size, te.size) == (30, 12)
    assert np.array_equal(np.sort(np.concatenate([tr, te])), np.arange(42))        # nothing lost, nothing twice
    assert set(te) & set(range(30, 42)) != set(range(30, 42))                      # not the given test rows
    for s, rows in ((out.train, tr), (out.test, te)):                                # features and labels move together
        assert np.array_equal(s.X.data, rows + 1.0) and np.array_equal(s.Y.indices, rows % 6)
    again = resplit(data, SplitConfig(test_fraction=12 / 42, seed=2026, source="union"), run_seed=3)
    assert np.array_equal(_origin(again.test), te)                                 # fixed across run seeds
    other = resplit(data, SplitConfig(test_fraction=12 / 42, seed=2027, source="union"), run_seed=0)
    assert not np.array_equal(_origin(other.test), te)
    per = [_origin(resplit(data, SplitConfig(test_fraction=0.25, seed=2026, source="union", redraw_per_seed=True),
                           run_seed=s).test) for s in (0, 1)]
    assert not np.array_equal(per[0], per[1])


@pytest.fixture
def toy(monkeypatch, tmp_path):
    """A registered XC dataset 'toy' (8 train, 4 test rows; row r of the union has feature r) under tmp_path."""
    monkeypatch.setitem(DATASETS, "toy", DatasetSpec(name="toy", folder="toy", description="test", N_train=8,
                                                     N_test=4, D=12, L=3, train_files=("toy_train.txt",),
                                                     test_files=("toy_test.txt",)))
    (tmp_path / "toy").mkdir()
    for name, rows in (("toy_train.txt", range(8)), ("toy_test.txt", range(8, 12))):
        lines = [f"{len(rows)} 12 3"] + [f"{r % 3} {r}:1" for r in rows]
        (tmp_path / "toy" / name).write_text("\n".join(lines) + "\n")
    return tmp_path


def test_registered_dataset_resplit_from_its_files_and_its_cache_key(toy):
    from poxm_core.prepare.cache import cache_keys

    plain = _cfg({"name": "toy"}, toy)
    assert load_dataset(plain.datasets[0], toy).train.n == 8
    union = {"name": "toy", "split": {"from": "union", "test_fraction": 0.25, "seed": 2026}}
    cfg = _cfg(union, toy)
    data = load_dataset(cfg.datasets[0], toy, seed=0)
    tr, te = _origin(data.train), _origin(data.test)
    assert (tr.size, te.size) == (9, 3) and sorted([*tr, *te]) == list(range(12))
    assert not np.array_equal(te, np.arange(8, 11))
    keys = {name: cache_keys(c, "toy", 0).data[1] for name, c in (
        ("plain", plain), ("union", cfg),
        ("seed", _cfg({**union, "split": {**union["split"], "seed": 2027}}, toy)),
        ("share", _cfg({**union, "split": {**union["split"], "test_fraction": 0.5}}, toy)))}
    assert len(set(keys.values())) == 4                                  # the split is part of the data key
    assert cache_keys(cfg, "toy", 1).data[1] == keys["union"]            # one split for every run seed
    per = _cfg({**union, "split": {**union["split"], "redraw_per_seed": True}}, toy, seeds=(0, 1))
    assert cache_keys(per, "toy", 0).data[1] != cache_keys(per, "toy", 1).data[1]
    assert not np.array_equal(_origin(load_dataset(per.datasets[0], toy, seed=0).test),
                              _origin(load_dataset(per.datasets[0], toy, seed=1).test))


def test_declared_npz_split_seed_and_union(tmp_path):
    from poxm_core.data import save_xy_npz
    from poxm_core.prepare.cache import cache_keys

    d = _tagged(16, 8)
    save_xy_npz(tmp_path / "tr.npz", d.train.X, d.train.Y)
    save_xy_npz(tmp_path / "te.npz", d.test.X, d.test.Y)
    common = {"name": "mine", "format": "npz", "folder": str(tmp_path), "propensity_A": 0.55, "propensity_B": 1.5}
    one = {**common, "train": "tr.npz", "split": {"test_fraction": 0.25, "seed": 0}}
    tests = {s: _origin(load_dataset(_cfg({**one, "split": {"test_fraction": 0.25, "seed": s}}).datasets[0],
                                     tmp_path).test) for s in (0, 1)}
    assert tests[0].size == 4 and not np.array_equal(tests[0], tests[1])           # a new split seed, a new split
    assert np.array_equal(tests[0], np.sort(np.random.default_rng(0).permutation(16)[:4]))
    both = {**common, "train": "tr.npz", "test": "te.npz", "split": {"from": "union", "test_fraction": 1 / 3,
                                                                      "seed": 4}}
    cfg = _cfg(both)
    data = load_dataset(cfg.datasets[0], tmp_path)
    assert sorted([*_origin(data.train), *_origin(data.test)]) == list(range(24)) and data.test.n == 8
    no_split = {k: v for k, v in both.items() if k != "split"}
    assert cache_keys(cfg, "mine", 0).data[1] != cache_keys(_cfg(no_split), "mine", 0).data[1]


def test_the_split_keys_dump_as_written_and_only_when_set(tmp_path):
    split = {"from": "union", "test_fraction": 0.34, "seed": 2026, "redraw_per_seed": True}
    cfg = _cfg({"name": "bibtex", "split": split})
    assert resolved_dict(cfg)["datasets"][0]["split"] == split
    (tmp_path / "c.yaml").write_text(resolved_yaml(cfg))
    assert load_config(tmp_path / "c.yaml") == cfg                     # the resolved config loads back
    off = _cfg({"name": "bibtex", "split": {**split, "redraw_per_seed": False}})
    assert resolved_dict(off)["datasets"][0]["split"] == {k: v for k, v in split.items() if k != "redraw_per_seed"}
    old = SplitConfig(test_fraction=0.25, seed=0)
    assert old.model_dump(mode="json") == {"test_fraction": 0.25, "seed": 0}      # earlier splits keep their hash
    assert config_hash(old) == config_hash({"test_fraction": 0.25, "seed": 0})


@pytest.mark.parametrize("dataset,match", [
    ({"name": "bibtex", "split": {"test_fraction": 0.3, "seed": 1}},
     r"datasets\.0': split: 'bibtex' has its own test split; to draw a new one .* set split\.from: union"),
    ({"name": "bibtex", "split": {"from": "unoin"}}, r"config key 'datasets\.0\.split\.from': Input should be 'train' or 'union'"),
    ({"name": "bibtex", "split": {"form": "union"}}, r"unknown config key 'datasets\.0\.split\.form' \(did you mean 'datasets\.0\.split\.from'\?\)"),
    ({"name": "bibtex", "split": {"from": "union", "test_fraction": 1.2}}, r"'datasets\.0\.split\.test_fraction': Input should be less than 1"),
    ({"name": "synthetic", "synthetic": {"preset": "eurlex"}, "split": {"from": "union"}}, r"the synthetic dataset is generated"),
    ({"name": "mine", "format": "npz", "train": "a.npz", "split": {"from": "union"}, "propensity": "default"},
     r"split\.from: union pools 'train' with 'test', but there is no 'test' file"),
])
def test_bad_split_is_one_line_naming_the_key(dataset, match):
    with pytest.raises(PoxmInputError, match=match) as err:
        _cfg(dataset)
    assert "\n" not in str(err.value)


def test_real_bibtex_union_resplit_keeps_every_row():
    root = default_data_root()
    if not (root / "bibtex").is_dir():
        pytest.skip(f"{root / 'bibtex'} absent")
    plain = load_dataset(_cfg({"name": "bibtex"}).datasets[0], root)
    cfg = _cfg({"name": "bibtex", "split": {"from": "union", "test_fraction": 0.3401, "seed": 2026}})
    new = load_dataset(cfg.datasets[0], root)
    assert (new.train.n, new.test.n) == (4880, 2515)                  # the original test share, new rows
    for part in ("X", "Y"):                                            # the same rows in all, re-dealt
        a = sp.vstack([getattr(plain.train, part), getattr(plain.test, part)])
        b = sp.vstack([getattr(new.train, part), getattr(new.test, part)])
        assert a.nnz == b.nnz and np.isclose(a.sum(), b.sum())
    assert (new.test.X != plain.test.X).nnz > 0


def test_a_dataset_with_its_own_reader_refuses_a_split(monkeypatch, tmp_path):
    def reader(dcfg, root, seed):
        raise AssertionError("not reached")
    monkeypatch.setitem(DATASETS, "made", DatasetSpec(name="made", folder="", description="test", reader=reader))
    cfg = _cfg({"name": "made", "split": {"from": "union", "seed": 1}})
    with pytest.raises(PoxmInputError, match=r"^datasets\.0\.split: dataset 'made' is read by its own reader .*remove 'split'$"):
        load_dataset(cfg.datasets[0], tmp_path)
