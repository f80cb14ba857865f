"""Raw text + label-name lines (AttentionXML layout) -> TF-IDF features and a label matrix (docs/data.md).
CSR end to end: X float32 (N, D), Y float32 (N, L) with 1.0 entries."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from poxm_core.data.readers import open_text
from poxm_core.common.errors import PoxmInputError

log = logging.getLogger(__name__)


TEXT_FILES = {"train": ("train_texts.txt", "train_labels.txt"), "test": ("test_texts.txt", "test_labels.txt")}


@dataclass(frozen=True)
class TextTfidf:
    """Result of `read_text_tfidf`: TF-IDF features fit on train only, labels mapped by sorted train names."""
    X_train: sp.csr_matrix
    Y_train: sp.csr_matrix
    X_test: sp.csr_matrix
    Y_test: sp.csr_matrix
    label_names: tuple[str, ...]
    n_unknown_test_labels: int  # test label occurrences whose name never occurs in train (dropped)


def _read_lines(path: Path) -> list[str]:
    with open_text(path) as f:
        lines = f.read().split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise PoxmInputError(f"{path}: empty file, expected one line per document")
    return lines


def _label_matrix(lines: list[str], index: dict[str, int]) -> tuple[sp.csr_matrix, int]:
    indptr, ids, unknown = [0], [], 0
    for line in lines:
        names = line.split()
        known = [index[n] for n in names if n in index]
        unknown += len(names) - len(known)
        ids.extend(known)
        indptr.append(len(ids))
    Y = sp.csr_matrix((np.ones(len(ids), np.float32), np.asarray(ids, np.int64), np.asarray(indptr, np.int64)),
                      shape=(len(lines), len(index)))
    Y.sum_duplicates()
    Y.data[:] = 1.0
    return Y, unknown


def read_text_tfidf(train_texts_path: str | Path, train_labels_path: str | Path, test_texts_path: str | Path,
                    test_labels_path: str | Path, max_features: int | None = None, **vectorizer_kwargs) -> TextTfidf:
    """AttentionXML layout -> TF-IDF (scikit-learn ``TfidfVectorizer`` fit on the training texts only).

    ``*_texts.txt``: one document per line; ``*_labels.txt``: the document's label NAMES, space-separated.
    Label ids = positions in the sorted set of training label names; test labels unknown to train are
    dropped and counted (``n_unknown_test_labels``, also logged). ``vectorizer_kwargs`` go to the vectorizer.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer

    if max_features is not None and (not isinstance(max_features, int) or max_features <= 0):
        raise PoxmInputError(f"max_features: expected a positive int or None, got {max_features!r}")
    paths = [Path(p) for p in (train_texts_path, train_labels_path, test_texts_path, test_labels_path)]
    tr_txt, tr_lab, te_txt, te_lab = (_read_lines(p) for p in paths)
    for txt, lab, ptxt, plab in ((tr_txt, tr_lab, paths[0], paths[1]), (te_txt, te_lab, paths[2], paths[3])):
        if len(txt) != len(lab):
            raise PoxmInputError(f"{plab}: has {len(lab)} label lines but {ptxt.name} has {len(txt)} documents")
    names = sorted({n for line in tr_lab for n in line.split()})
    if not names:
        raise PoxmInputError(f"{paths[1]}: no label names at all")
    index = {n: i for i, n in enumerate(names)}
    Ytr, _ = _label_matrix(tr_lab, index)
    Yte, unknown = _label_matrix(te_lab, index)
    if unknown:
        log.warning("%s: dropped %d test label occurrences whose names never occur in %s",
                    paths[3], unknown, paths[1].name)
    vec = TfidfVectorizer(max_features=max_features, dtype=np.float32, **vectorizer_kwargs)
    Xtr = vec.fit_transform(tr_txt).tocsr()
    Xte = vec.transform(te_txt).tocsr()
    return TextTfidf(Xtr, Ytr, Xte, Yte, tuple(names), unknown)
