"""Features + labels as two scipy.sparse.save_npz files (format npz, train: [X.npz, Y.npz]), the `folder`
key (files under the data root), and the two datasets shipped that way (StackEx-cooking, Corel5k)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import yaml
from poxm_process import REPO, poxm_in_process

from poxm_core.config.schema import default_data_root, load_config
from poxm_core.data import load_dataset, read_npz_pair, save_xy_npz
from poxm_core.common.errors import PoxmInputError

DATA = default_data_root()
MLDR = DATA / "mldr_misc"

# A hand-made pair: 4 rows, D = 3, L = 4. Row 2 has no label; X row 1 holds feature 0 twice (1 + 2 = 3),
# Y row 3 lists label 1 twice and label 2 as an explicit 0 (not a label).
X_PARTS = (np.array([2.5, 1.0, 2.0, -0.5, 4.0], np.float64), np.array([1, 0, 0, 2, 2], np.int32),
           np.array([0, 1, 3, 4, 5], np.int32))
X_DENSE = np.array([[0, 2.5, 0], [3.0, 0, 0], [0, 0, -0.5], [0, 0, 4.0]], np.float32)
Y_PARTS = (np.array([1, 1, 1, 1, 1, 0], np.int64), np.array([0, 3, 1, 1, 1, 2], np.int32),
           np.array([0, 1, 3, 3, 6], np.int32))
Y_DENSE = np.array([[1, 0, 0, 0], [0, 1, 0, 1], [0, 0, 0, 0], [0, 1, 0, 0]], np.float32)


def _save(path: Path, parts, shape, fmt: str = "csr") -> Path:
    m = sp.csr_matrix(parts, shape=shape)       # keeps the duplicates and the explicit zero as given
    sp.save_npz(path, m if fmt == "csr" else m.asformat(fmt), compressed=True)
    return path


@pytest.fixture
def pair(tmp_path):
    return _save(tmp_path / "X.npz", X_PARTS, (4, 3)), _save(tmp_path / "Y.npz", Y_PARTS, (4, 4))


def test_pair_reads_hand_checked_values(pair):
    X, Y = read_npz_pair(*pair)
    assert isinstance(X, sp.csr_matrix) and isinstance(Y, sp.csr_matrix)
    assert X.dtype == np.float32 and Y.dtype == np.float32
    assert np.array_equal(X.toarray(), X_DENSE)
    assert np.array_equal(Y.toarray(), Y_DENSE)
    assert X.nnz == 4 and Y.nnz == 4                        # duplicates merged, the explicit zero dropped
    assert X.has_canonical_format and Y.has_canonical_format
    assert np.array_equal(np.diff(Y.indptr), [1, 2, 0, 1])  # the row without a label is kept


def test_bool_labels_and_integer_features(tmp_path):
    X = sp.csr_matrix(np.array([[0, 3], [1, 0]], np.int64))
    Y = sp.csr_matrix(np.array([[True, False, True], [False, False, False]]))
    sp.save_npz(tmp_path / "X.npz", X)
    sp.save_npz(tmp_path / "Y.npz", Y)
    X2, Y2 = read_npz_pair(tmp_path / "X.npz", tmp_path / "Y.npz")
    assert np.array_equal(X2.toarray(), [[0, 3], [1, 0]]) and X2.dtype == np.float32
    assert np.array_equal(Y2.toarray(), [[1, 0, 1], [0, 0, 0]]) and Y2.dtype == np.float32


def _bad(tmp_path, what: str) -> tuple[Path, Path]:
    x, y = _save(tmp_path / "X.npz", X_PARTS, (4, 3)), _save(tmp_path / "Y.npz", Y_PARTS, (4, 4))
    if what == "missing":
        y.unlink()
    elif what == "rows":
        _save(y, (np.ones(1), np.array([0]), np.array([0, 1, 1, 1])), (3, 4))
    elif what == "text":
        y.write_text("0:1 1:1\n")
    elif what == "npy":
        np.save(tmp_path / "Y.npy", np.zeros(3))
        (tmp_path / "Y.npy").rename(y)
    elif what == "dense-savez":
        np.savez(y, Y=Y_DENSE)
    elif what == "xy-in-one":
        save_xy_npz(y, X_DENSE, Y_DENSE)
    elif what == "csc":
        _save(y, Y_PARTS, (4, 4), fmt="csc")
    elif what == "coo":
        _save(y, Y_PARTS, (4, 4), fmt="coo")
    elif what == "not-binary":
        _save(y, (np.array([1, 1, 2, 1, 1, 0]), *Y_PARTS[1:]), (4, 4))
    elif what == "fraction":
        _save(y, (np.array([1, 1, 1, 1, 0.5, 0]), *Y_PARTS[1:]), (4, 4))
    elif what == "nan-x":
        _save(x, (np.array([2.5, 1.0, np.nan, -0.5, 4.0]), *X_PARTS[1:]), (4, 3))
    elif what == "huge-x":
        _save(x, (np.array([2.5, 1.0, 2.0, 1e300, 4.0]), *X_PARTS[1:]), (4, 3))
    elif what == "index-out-of-range":
        np.savez(y, format=np.array("csr"), shape=np.array([4, 4]), data=np.ones(2), indices=np.array([0, 9]),
                 indptr=np.array([0, 1, 2, 2, 2]))
    elif what == "complex":
        np.savez(y, format=np.array("csr"), shape=np.array([4, 4]), data=np.ones(1, complex),
                 indices=np.array([0]), indptr=np.array([0, 1, 1, 1, 1]))
    return x, y


@pytest.mark.parametrize("what,msg", [
    ("missing", r"Y\.npz: file not found$"),
    ("rows", r"Y\.npz: has 3 rows but the features file X\.npz has 4$"),
    ("text", r"Y\.npz: not a \.npz file written by scipy\.sparse\.save_npz"),
    ("npy", r"Y\.npz: a single \.npy array, expected a \.npz file"),
    ("dense-savez", r"Y\.npz: not a scipy\.sparse\.save_npz file \(missing format, shape, data, indices, indptr; "
                    r"found Y\)$"),
    ("xy-in-one", r"Y\.npz: not a scipy\.sparse\.save_npz file .*declare it as one file, not a pair$"),
    ("csc", r"Y\.npz: holds a CSC matrix, expected CSR \(write it with scipy\.sparse\.save_npz\(path, m\.tocsr\(\)\)\)$"),
    ("coo", r"Y\.npz: holds a COO matrix, expected CSR"),
    ("not-binary", r"Y\.npz: labels must be 0 or 1, found 2 in row 1, column 1 \(0-based; 1 such entries\)$"),
    ("fraction", r"Y\.npz: labels must be 0 or 1, found 0\.5 in row 3, column 1 "),
    ("nan-x", r"X\.npz: value in row 1 \(0-based\) is NaN, inf or overflows float32$"),
    ("huge-x", r"X\.npz: value in row 2 \(0-based\) is NaN, inf or overflows float32$"),
    ("index-out-of-range", r"Y\.npz: its arrays do not form a valid CSR matrix"),
    ("complex", r"Y\.npz: values of type complex128, expected real numbers$"),
])
def test_bad_pair_is_one_line_naming_the_file(tmp_path, what, msg):
    x, y = _bad(tmp_path, what)
    with pytest.raises(PoxmInputError, match=msg) as exc:
        read_npz_pair(x, y)
    assert "\n" not in str(exc.value)
    assert str(exc.value).startswith(f"{y if msg.startswith('Y') else x}: ")


# --------------------------------------------------------------------------------------------
# declared in a config: `train: [X.npz, Y.npz]`, `folder` under the data root, a seeded split

def _config(d: Path, dataset: dict, name: str = "pair") -> Path:
    spec = {"name": "mine", "format": "npz", "propensity_A": 0.55, "propensity_B": 1.5,
            "variants": [{"name": "A", "alpha": 0.3}], **dataset}
    path = d / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "datasets": [spec], "methods": {"logging": {}}}, sort_keys=False))
    return path


def _rows(n: int, seed: int = 0):
    """n rows; row i has feature 0 = i + 1 (identifies it) and label i % 5; row 7 has no label."""
    X = sp.csr_matrix((np.arange(1, n + 1, dtype=np.float32), np.zeros(n, np.int32), np.arange(n + 1)), shape=(n, 3))
    lab = np.arange(n) % 5
    keep = np.arange(n) != 7
    Y = sp.csr_matrix((np.ones(keep.sum()), lab[keep], np.concatenate([[0], np.cumsum(keep)])), shape=(n, 5))
    return X, Y


def test_config_pair_under_the_data_root_with_a_seeded_split(tmp_path):
    root = tmp_path / "root"
    (root / "sets").mkdir(parents=True)
    X, Y = _rows(20)
    sp.save_npz(root / "sets" / "a_X.npz", X)
    sp.save_npz(root / "sets" / "a_Y.npz", Y)
    elsewhere = tmp_path / "configs"
    elsewhere.mkdir()
    cfg = load_config(_config(elsewhere, {"folder": "sets", "train": ["a_X.npz", "a_Y.npz"],
                                          "split": {"test_fraction": 0.25, "seed": 4}}))
    dcfg = cfg.datasets[0]
    assert dcfg.train == ["a_X.npz", "a_Y.npz"]          # kept as written: the run id does not depend on paths
    data = load_dataset(dcfg, root)
    # the split: numpy's permutation with the config's seed, its first round(0.25 n) rows the test rows
    perm = np.random.default_rng(4).permutation(20)
    test_rows, train_rows = np.sort(perm[:5]), np.sort(perm[5:])
    assert np.array_equal(data.test.X[:, 0].toarray().ravel(), test_rows + 1)
    assert np.array_equal(data.train.X[:, 0].toarray().ravel(), train_rows + 1)
    assert np.array_equal(data.train.Y.toarray(), Y[train_rows].toarray())
    assert np.array_equal(data.test.Y.toarray(), Y[test_rows].toarray())
    again = load_dataset(dcfg, root)
    assert abs(again.test.X - data.test.X).max() == 0    # deterministic
    # a test pair instead of the split; an absolute folder needs no data root
    sp.save_npz(root / "sets" / "b_X.npz", X[:6])
    sp.save_npz(root / "sets" / "b_Y.npz", Y[:6])
    cfg = load_config(_config(elsewhere, {"folder": str(root / "sets"), "train": ["a_X.npz", "a_Y.npz"],
                                          "test": ["b_X.npz", "b_Y.npz"]}))
    data = load_dataset(cfg.datasets[0], tmp_path / "no-such-root")
    assert (data.train.n, data.test.n) == (20, 6)
    assert np.array_equal(data.test.Y.toarray(), Y[:6].toarray())


def test_config_pair_relative_to_the_config_file(tmp_path, pair):
    cfg = load_config(_config(tmp_path, {"train": ["X.npz", "Y.npz"], "split": {"test_fraction": 0.25, "seed": 0}}))
    assert Path(cfg.datasets[0].train[0]) == tmp_path / "X.npz"
    data = load_dataset(cfg.datasets[0], tmp_path / "unused")
    assert (data.train.n, data.test.n) == (3, 1)
    assert data.train.Y.nnz + data.test.Y.nnz == 4


@pytest.mark.parametrize("dataset,msg", [
    ({"train": ["X.npz", "Y.npz", "Z.npz"], "split": {}}, "format=npz expects one file path .* or a list of two"),
    ({"train": ["X.npz", "Y.npz"], "test": "T.npz"}, "format=npz: 'train' and 'test' must be alike"),
    ({"format": None, "folder": "sets"}, "'folder' declares a dataset by its files: set 'format' too"),
])
def test_config_errors_name_the_key(tmp_path, dataset, msg):
    spec = {k: v for k, v in {"train": "X.npz", **dataset}.items()}
    path = _config(tmp_path, spec)
    if spec.get("format", "npz") is None:
        text = yaml.safe_load(path.read_text())
        del text["datasets"][0]["format"]
        path.write_text(yaml.safe_dump(text))
    with pytest.raises(PoxmInputError, match=msg):
        load_config(path)


def test_missing_folder_or_file_is_one_line(tmp_path):
    from poxm_core.data.registry import declared_files
    (tmp_path / "sets").mkdir()
    cfg = load_config(_config(tmp_path, {"folder": "sets", "train": ["X.npz", "Y.npz"], "split": {}}))
    with pytest.raises(PoxmInputError, match=rf"^{tmp_path}/nope/sets: folder not found \(datasets\.0\.folder"):
        declared_files(cfg.datasets[0], tmp_path / "nope")
    with pytest.raises(PoxmInputError, match=rf"^{tmp_path}/sets/X\.npz: file not found \(datasets\.0\.train\)$"):
        declared_files(cfg.datasets[0], tmp_path)
    (tmp_path / "sets" / "X.npz").write_bytes(b"")
    with pytest.raises(PoxmInputError, match=rf"^{tmp_path}/sets/Y\.npz: file not found"):
        declared_files(cfg.datasets[0], tmp_path)


@pytest.mark.slow
def test_missing_folder_or_file_fails_at_plan_time(tmp_path):
    from orchestration.stages.sweep import plan_sweep
    (tmp_path / "sets").mkdir()
    cfg = load_config(_config(tmp_path, {"folder": "nope", "train": ["X.npz", "Y.npz"], "split": {}}),
                      [f"data_root={tmp_path}"])
    with pytest.raises(PoxmInputError, match=r"nope: folder not found \(datasets\.0\.folder"):
        plan_sweep(cfg, tmp_path / "runs")
    cfg = load_config(_config(tmp_path, {"folder": "sets", "train": ["X.npz", "Y.npz"], "split": {}}),
                      [f"data_root={tmp_path}"])
    with pytest.raises(PoxmInputError, match=rf"^{tmp_path}/sets/X\.npz: file not found \(datasets\.0\.train\)$"):
        plan_sweep(cfg, tmp_path / "runs")


def test_cli_exit_2_one_line_for_labels_that_are_not_binary(tmp_path, capsys):
    x, y = _bad(tmp_path, "not-binary")
    path = _config(tmp_path, {"train": ["X.npz", "Y.npz"], "split": {"test_fraction": 0.5}})
    out = poxm_in_process(capsys, "prepare", path, f"runs_dir={tmp_path / 'runs'}")
    assert out.returncode == 2, out.stderr
    lines = [l for l in out.stderr.splitlines() if l.strip()]
    assert lines[-1].endswith(f"{y}: labels must be 0 or 1, found 2 in row 1, column 1 (0-based; 1 such entries)")
    assert "Traceback" not in out.stderr


# --------------------------------------------------------------------------------------------
# the shipped files (skipped where the data root does not hold them)

REAL = {  # N, D, L, nnz(X), nnz(Y), rows without a label, N_train, N_test (75/25, seed 0)
    "stackex-cooking": ("stackex_cooking", 10491, 577, 400, 167973, 23340, 134, 7868, 2623),
    "corel5k": ("corel5k", 5000, 499, 374, 41351, 17610, 0, 3750, 1250),
}


@pytest.mark.skipif(not MLDR.is_dir(), reason=f"no {MLDR}")
@pytest.mark.parametrize("name", sorted(REAL))
def test_real_pair_and_its_config(name):
    stem, n, d, n_labels, nnz_x, nnz_y, empty, n_train, n_test = REAL[name]
    info = json.loads((MLDR / f"{stem}_info.json").read_text())
    assert (info["n"], info["d"], info["L"], info["zero_label_rows"]) == (n, d, n_labels, empty)
    X, Y = read_npz_pair(MLDR / f"{stem}_X.npz", MLDR / f"{stem}_Y.npz")
    assert X.shape == (n, d) and Y.shape == (n, n_labels) and (X.nnz, Y.nnz) == (nnz_x, nnz_y)
    assert X.dtype == np.float32 and isinstance(X, sp.csr_matrix) and np.all(Y.data == 1.0)
    assert int((np.diff(Y.indptr) == 0).sum()) == empty
    ref = sp.load_npz(MLDR / f"{stem}_X.npz")                 # scipy's own reader, same values
    assert abs(X - ref.astype(np.float32)).max() == 0
    cfg = load_config(REPO / "configs" / f"{name}.yaml")
    data = load_dataset(cfg.datasets[0], DATA)
    assert (data.train.n, data.test.n) == (n_train, n_test)
    assert data.train.Y.nnz + data.test.Y.nnz == nnz_y
    assert (data.n_features, data.n_labels) == (d, n_labels)
