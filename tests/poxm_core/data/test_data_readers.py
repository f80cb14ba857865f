"""Readers: hand-built files, a reference reader, bad input as a table, the real files when present."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from poxm_core.config.schema import default_data_root
from poxm_core.data import readers
from poxm_core.data.readers import find_split_sparse, read_split_sparse, read_split_sparse_dir, read_xc_bow
from poxm_core.data.text_reader import read_text_tfidf
from poxm_core.common.errors import PoxmInputError

DATA = default_data_root()


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def _reference_xc(path):
    """Independent reader (the one in shared/data/README.md, per token in Python)."""
    with open(path) as f:
        n, d, L = map(int, f.readline().split())
        xr, xc, xv, yr, yc = [], [], [], [], []
        for i, line in enumerate(f):
            toks = line.rstrip("\n").split(" ")
            if toks and toks[0] and ":" not in toks[0]:
                for lab in toks[0].split(","):
                    yr.append(i); yc.append(int(lab))
                toks = toks[1:]
            for t in toks:
                if t:
                    a, b = t.split(":"); xr.append(i); xc.append(int(a)); xv.append(float(b))
    X = sp.csr_matrix((np.array(xv, np.float32), (xr, xc)), shape=(n, d))
    Y = sp.csr_matrix((np.ones(len(yr), np.float32), (yr, yc)), shape=(n, L))
    return X, Y


def test_xc_bow_hand_built(tmp_path):
    text = ("5 4 3\n"
            "0,2 1:0.5 3:2\n"     # labels and features
            " 0:1.5\n"            # no labels: leading space
            "2:0.25 1:1\n"        # no labels: features only, unsorted ids
            "1\n"                 # labels only
            "1,1 2:1 2:2\n")      # repeated label and feature ids
    X, Y = read_xc_bow(_write(tmp_path, "t.txt", text))
    assert X.format == "csr" and Y.format == "csr" and X.dtype == np.float32 and Y.dtype == np.float32
    np.testing.assert_array_equal(X.toarray(), [[0, .5, 0, 2], [1.5, 0, 0, 0], [0, 1, .25, 0], [0, 0, 0, 0], [0, 0, 3, 0]])
    np.testing.assert_array_equal(Y.toarray(), [[1, 0, 1], [0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 1, 0]])
    assert X.has_sorted_indices


def test_xc_bow_trailing_blank_lines_and_crlf(tmp_path):
    X, Y = read_xc_bow(_write(tmp_path, "t.txt", "2 3 2\r\n1 0:1\r\n0 2:3\r\n\r\n\n"))
    np.testing.assert_array_equal(X.toarray(), [[1, 0, 0], [0, 0, 3]])
    np.testing.assert_array_equal(Y.toarray(), [[0, 1], [1, 0]])


def test_xc_bow_matches_reference_reader_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "_CHUNK_ROWS", 7)  # many chunk boundaries
    rng = np.random.default_rng(0)
    n, d, L = 53, 40, 12
    lines = [f"{n} {d} {L}"]
    for _ in range(n):
        labs = ",".join(map(str, sorted(rng.choice(L, rng.integers(0, 4), replace=False))))
        feats = " ".join(f"{j}:{rng.random():.5f}" for j in sorted(rng.choice(d, rng.integers(0, 6), replace=False)))
        lines.append(f"{labs} {feats}")
    p = _write(tmp_path, "r.txt", "\n".join(lines) + "\n")
    X, Y = read_xc_bow(p)
    Xr, Yr = _reference_xc(p)
    assert (X != Xr).nnz == 0 and (Y != Yr).nnz == 0


def test_error_line_number_in_a_later_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "_CHUNK_ROWS", 2)
    text = "5 4 3\n0 1:1\n0 1:1\n0 1:1\n0 1:1\n0 9:1\n"
    with pytest.raises(PoxmInputError, match=r"t\.txt:6: feature id 9 out of range \[0, 4\)"):
        read_xc_bow(_write(tmp_path, "t.txt", text))


XC_BAD = [  # (file text, expected message fragment)
    ("", "empty file, expected a header 'N D L'"),
    ("3 2\n0 1:1\n", "t.txt:1: expected header 'N D L'"),
    ("a b c\n", "t.txt:1: expected header 'N D L'"),
    ("1 -5 3\n0 1:1\n", "t.txt:1: expected header 'N D L'"),
    ("2 5 3\n0 1:1\n", "header says N=2 rows, found 1"),
    ("3 5 3\n", "header says N=3 rows, found 0"),
    ("1 5 3\n0 1:1\n1 2:1\n", "t.txt:3: header says N=1 rows, found more"),
    ("1 5 3\n0 7:1\n", "t.txt:2: feature id 7 out of range [0, 5)"),
    ("1 5 3\n0 5:1\n", "t.txt:2: feature id 5 out of range [0, 5)"),
    ("1 5 3\n0 -1:1\n", "t.txt:2: feature id -1 out of range"),
    ("1 5 3\n3 1:1\n", "t.txt:2: label id 3 out of range [0, 3)"),
    ("1 5 3\n-1 1:1\n", "t.txt:2: label id -1 out of range"),
    ("1 5 3\n0 1:abc\n", "t.txt:2: value is not a number in '1:abc'"),
    ("1 5 3\n0 1:nan\n", "t.txt:2: value must be finite"),
    ("1 5 3\n0 1:inf\n", "t.txt:2: value must be finite"),
    ("1 5 3\n0 1:-inf\n", "t.txt:2: value must be finite"),
    ("1 5 3\n0 1:1e39\n", "t.txt:2: value must be finite (float32)"),
    ("1 5 3\n0 x:1\n", "t.txt:2: feature id is not an integer in 'x:1'"),
    ("1 5 3\n0 1.5:1\n", "t.txt:2: feature id is not an integer"),
    ("1 5 3\n0 1:1 3\n", "t.txt:2: expected 'feature_id:value', got '3'"),
    ("1 5 3\n0 1:2:3\n", "t.txt:2: expected 'feature_id:value', got '1:2:3'"),
    ("1 5 3\n0,a 1:1\n", "t.txt:2: expected comma-separated label ids"),
    ("1 5 3\n0,,1 1:1\n", "t.txt:2: expected comma-separated label ids"),
    ("1 5 3\n0;1 1:1\n", "t.txt:2: expected comma-separated label ids"),
    ("2 5 3\n0 1:1\n1 2:x\n", "t.txt:3: value is not a number"),
    ("3 5 3\n0 1:1\n1 2:1\n2 4:nan\n", "t.txt:4: value must be finite"),
]


@pytest.mark.parametrize("text, fragment", XC_BAD, ids=[f"xc{i}" for i in range(len(XC_BAD))])
def test_xc_bow_bad_input(tmp_path, text, fragment):
    p = _write(tmp_path, "t.txt", text)
    with pytest.raises(PoxmInputError) as e:
        read_xc_bow(p)
    msg = str(e.value)
    assert fragment in msg and "\n" not in msg and str(p) in msg


SPLIT_BAD = [  # (X file text, Y file text, which file the message names, fragment)
    ("2 5\n1:1\n", "2 3\n0:1\n1:1\n", "x.txt", "header says N=2 rows, found 1"),
    ("1 5\n1:1\n", "1 3\n4:1\n", "y.txt", "y.txt:2: label id 4 out of range [0, 3)"),
    ("1 5\n1:1\n", "1 3\n-1:1\n", "y.txt", "y.txt:2: label id -1 out of range"),
    ("1 5\n1:nan\n", "1 3\n0:1\n", "x.txt", "x.txt:2: value must be finite"),
    ("1 5\n1:q\n", "1 3\n0:1\n", "x.txt", "x.txt:2: value is not a number"),
    ("1 5\n0,1 1:1\n", "1 3\n0:1\n", "x.txt", "x.txt:2: expected 'feature_id:value', got '0,1'"),
    ("1 5 3\n1:1\n", "1 3\n0:1\n", "x.txt", "x.txt:1: expected header 'N D'"),
    ("1 5\n1:1\n", "1\n0:1\n", "y.txt", "y.txt:1: expected header 'N L'"),
    ("2 5\n1:1\n2:1\n", "1 3\n0:1\n", "y.txt", "has N=1 rows but x.txt has N=2"),
    ("", "1 3\n0:1\n", "x.txt", "empty file"),
]


@pytest.mark.parametrize("xtext, ytext, culprit, fragment", SPLIT_BAD, ids=[f"split{i}" for i in range(len(SPLIT_BAD))])
def test_split_sparse_bad_input(tmp_path, xtext, ytext, culprit, fragment):
    x, y = _write(tmp_path, "x.txt", xtext), _write(tmp_path, "y.txt", ytext)
    with pytest.raises(PoxmInputError) as e:
        read_split_sparse(x, y)
    msg = str(e.value)
    assert fragment in msg and str(tmp_path / culprit) in msg and "\n" not in msg


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(PoxmInputError, match="nope.txt: file not found"):
        read_xc_bow(tmp_path / "nope.txt")
    with pytest.raises(PoxmInputError, match="expected a file"):
        read_xc_bow(tmp_path)
    with pytest.raises(PoxmInputError, match="y.txt: file not found"):
        read_split_sparse(_write(tmp_path, "x.txt", "1 2\n0:1\n"), tmp_path / "y.txt")


def test_split_sparse_values_and_directory_helper(tmp_path):
    _write(tmp_path, "trn_X_Xf.txt", "3 4\n0:0.5 3:1\n\n2:2\n")
    _write(tmp_path, "trn_X_Y.txt", "3 2\n1:1\n0:1 1:1\n1:0\n")  # explicit 0 = not a label
    _write(tmp_path, "tst_X_Xf.txt", "1 4\n1:1\n")
    _write(tmp_path, "tst_X_Y.txt", "1 2\n0:1\n")
    found = find_split_sparse(tmp_path)
    assert found["train"] == (tmp_path / "trn_X_Xf.txt", tmp_path / "trn_X_Y.txt")
    Xtr, Ytr, Xte, Yte = read_split_sparse_dir(tmp_path)
    np.testing.assert_array_equal(Xtr.toarray(), [[.5, 0, 0, 1], [0, 0, 0, 0], [0, 0, 2, 0]])
    np.testing.assert_array_equal(Ytr.toarray(), [[0, 1], [1, 1], [0, 0]])
    assert Xte.shape == (1, 4) and Yte.toarray().tolist() == [[1, 0]]
    assert Xtr.dtype == np.float32 and Ytr.dtype == np.float32


def test_split_sparse_directory_incomplete_or_absent(tmp_path):
    assert find_split_sparse(tmp_path) is None
    _write(tmp_path, "trn_X_Xf.txt", "1 4\n0:1\n")
    with pytest.raises(PoxmInputError, match="incomplete, missing trn_X_Y.txt, tst_X_Xf.txt, tst_X_Y.txt"):
        find_split_sparse(tmp_path)


def test_text_tfidf(tmp_path, caplog):
    from sklearn.feature_extraction.text import TfidfVectorizer

    tr_texts = ["the cat sat on the mat", "dogs and cats", "a bird sang", "the dog barked at the cat"]
    tr_labels = ["pets cat", "pets dog cat", "bird", "dog pets"]
    te_texts = ["a cat and a bird", "zebra crossing"]
    te_labels = ["cat bird", "zebra horse cat"]
    paths = []
    for name, lines in (("train_texts.txt", tr_texts), ("train_labels.txt", tr_labels),
                        ("test_texts.txt", te_texts), ("test_labels.txt", te_labels)):
        paths.append(_write(tmp_path, name, "\n".join(lines) + "\n"))
    with caplog.at_level("WARNING"):
        t = read_text_tfidf(*paths)
    assert t.label_names == ("bird", "cat", "dog", "pets")
    np.testing.assert_array_equal(t.Y_train.toarray(), [[0, 1, 0, 1], [0, 1, 1, 1], [1, 0, 0, 0], [0, 0, 1, 1]])
    np.testing.assert_array_equal(t.Y_test.toarray(), [[1, 1, 0, 0], [0, 1, 0, 0]])
    assert t.n_unknown_test_labels == 2 and "dropped 2 test label" in caplog.text
    ref = TfidfVectorizer().fit(tr_texts)
    np.testing.assert_allclose(t.X_train.toarray(), ref.transform(tr_texts).toarray(), rtol=1e-6)
    np.testing.assert_allclose(t.X_test.toarray(), ref.transform(te_texts).toarray(), rtol=1e-6)
    assert t.X_train.dtype == np.float32 and t.X_train.format == "csr"
    assert read_text_tfidf(*paths, max_features=3).X_train.shape == (4, 3)


def test_text_tfidf_line_count_mismatch(tmp_path):
    p = [_write(tmp_path, "a.txt", "x y\nz\n"), _write(tmp_path, "b.txt", "l1\n"),
         _write(tmp_path, "c.txt", "x\n"), _write(tmp_path, "d.txt", "l1\n")]
    with pytest.raises(PoxmInputError, match=r"b.txt: has 1 label lines but a.txt has 2 documents"):
        read_text_tfidf(*p)


@pytest.mark.parametrize("name", ["bibtex", "delicious"])
def test_real_files_match_their_npz(name):
    folder = DATA / name
    if not (folder / f"{name}_train.txt").is_file() or not (folder / f"{name}.npz").is_file():
        pytest.skip(f"{folder} absent")
    z = np.load(folder / f"{name}.npz")
    for split in ("train", "test"):
        X, Y = read_xc_bow(folder / f"{name}_{split}.txt")
        np.testing.assert_array_equal(X.indptr, z[f"X_{split}_indptr"])
        np.testing.assert_array_equal(X.indices, z[f"X_{split}_indices"])
        np.testing.assert_array_equal(X.data, z[f"X_{split}_data"])
        np.testing.assert_array_equal(Y.indices, z[f"Y_{split}_indices"])
        np.testing.assert_array_equal(Y.indptr, z[f"Y_{split}_indptr"])


def test_real_eurlex_partial_tfidf_file():
    p = DATA / "eurlex4k_partial_dev" / "eurlex4k_dev1316_xcformat.txt"
    if not p.is_file():
        pytest.skip(f"{p} absent")
    X, Y = read_xc_bow(p)
    assert X.shape == (1316, 5000) and Y.shape == (1316, 3993)
    assert X.nnz == 303395 and int((Y.getnnz(axis=1) == 0).sum()) == 2
    Xr, Yr = _reference_xc(p)
    assert abs(X - Xr).max() == 0 and (Y != Yr).nnz == 0
