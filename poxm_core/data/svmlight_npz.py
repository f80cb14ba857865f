"""Multilabel svmlight / libsvm files (scikit-learn's parser), the project's .npz layout (X and Y in one
file) and a pair of scipy.sparse.save_npz files (X.npz + Y.npz) -> CSR X float32 (N, D), Y float32 (N, L)
with 1.0 entries."""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from poxm_core.data.readers import open_text
from poxm_core.common.errors import PoxmInputError


def read_svmlight(*paths: str | Path) -> list[tuple[sp.csr_matrix, sp.csr_matrix]]:
    """Multilabel svmlight / libsvm files (``l1,l2 f:v f:v ...``, label ids 0-based integers) -> one
    (X, Y) per file, with a shared D (the largest feature id + 1 over all files) and L (likewise)."""
    from sklearn.datasets import load_svmlight_files

    paths = [Path(p) for p in paths]
    for p in paths:
        open_text(p).close()
    try:
        loaded = load_svmlight_files([str(p) for p in paths], multilabel=True, zero_based=True, dtype=np.float32)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PoxmInputError(f"{paths[0]}: not a multilabel svmlight file ({str(exc).splitlines()[0]})") from None
    Xs, Ys = loaded[0::2], loaded[1::2]
    ids = [np.asarray([l for row in Y for l in row], dtype=np.float64) for Y in Ys]
    for p, i in zip(paths, ids):
        if i.size and (np.any(i < 0) or np.any(i != np.round(i))):
            raise PoxmInputError(f"{p}: label ids must be non-negative integers (0-based)")
    n_labels = int(max((i.max() for i in ids if i.size), default=-1)) + 1
    out = []
    for X, Y in zip(Xs, Ys):
        indptr = np.zeros(len(Y) + 1, np.int64)
        np.cumsum([len(row) for row in Y], out=indptr[1:])
        ind = np.asarray([int(l) for row in Y for l in row], np.int64)
        Ym = sp.csr_matrix((np.ones(ind.size, np.float32), ind, indptr), shape=(len(Y), max(n_labels, 1)))
        Ym.sum_duplicates()
        Ym.data[:] = 1.0
        X = sp.csr_matrix(X, dtype=np.float32)
        X.sum_duplicates()
        X.eliminate_zeros()
        out.append((X, Ym))
    return out


NPZ_KEYS = ("data", "indices", "indptr", "shape")


def save_xy_npz(path: str | Path, X, Y) -> None:
    """Write the .npz layout `read_xy_npz` reads: X and Y as CSR parts ``X_data, X_indices, X_indptr,
    X_shape`` and ``Y_...`` (scipy.sparse.save_npz's fields, prefixed) in one compressed file."""
    parts = {}
    for name, m in (("X", X), ("Y", Y)):
        m = sp.csr_matrix(m)
        parts.update({f"{name}_data": m.data, f"{name}_indices": m.indices, f"{name}_indptr": m.indptr,
                      f"{name}_shape": np.asarray(m.shape)})
    np.savez_compressed(path, **parts)


def read_xy_npz(path: str | Path) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """One .npz holding features X (N, D) and labels Y (N, L): either CSR parts ``X_data, X_indices,
    X_indptr, X_shape`` (+ ``Y_...``; see `save_xy_npz`) or dense 2-d arrays ``X`` and ``Y``. Y's non-zero
    entries are the relevant labels (1.0)."""
    path = Path(path)
    open_text(path).close()
    try:
        z = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise PoxmInputError(f"{path}: not a readable .npz file ({str(exc).splitlines()[0]})") from None
    with z:
        out = []
        for name in ("X", "Y"):
            if all(f"{name}_{k}" in z.files for k in NPZ_KEYS):
                try:
                    m = sp.csr_matrix(tuple(z[f"{name}_{k}"] for k in NPZ_KEYS[:3]),
                                      shape=tuple(int(v) for v in z[f"{name}_shape"]))
                except (ValueError, TypeError) as exc:
                    raise PoxmInputError(f"{path}: {name}_* do not form a CSR matrix ({exc})") from None
            elif name in z.files and z[name].ndim == 2:
                m = sp.csr_matrix(z[name])
            else:
                raise PoxmInputError(f"{path}: expected arrays {', '.join(f'{name}_{k}' for k in NPZ_KEYS)} "
                                     f"(or a dense 2-d '{name}'), found {', '.join(z.files) or 'none'}")
            out.append(m)
    X = out[0].astype(np.float32)
    if X.nnz and not np.all(np.isfinite(X.data)):
        raise PoxmInputError(f"{path}: X holds NaN or inf values")
    Y = out[1].astype(np.float32)
    Y.eliminate_zeros()
    Y.data[:] = 1.0
    if X.shape[0] != Y.shape[0]:
        raise PoxmInputError(f"{path}: X has {X.shape[0]} rows but Y has {Y.shape[0]}")
    return X.tocsr(), Y.tocsr()


SAVE_NPZ_KEYS = ("format", "shape", "data", "indices", "indptr")


def load_csr_npz(path: str | Path) -> sp.csr_matrix:
    """One CSR matrix written by ``scipy.sparse.save_npz`` (as scipy's ``load_npz`` reads it, without
    pickles); a missing file, another kind of file or a non-CSR matrix is one `PoxmInputError` line."""
    path = Path(path)
    if not path.is_file():
        raise PoxmInputError(f"{path}: file not found" if not path.exists() else
                             f"{path}: expected a file, found a directory or special file")
    try:
        z = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise PoxmInputError(f"{path}: not a .npz file written by scipy.sparse.save_npz "
                             f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise PoxmInputError(f"{path}: a single .npy array, expected a .npz file written by scipy.sparse.save_npz")
    with z:
        try:
            if "format" in z.files:
                fmt = z["format"].item()
                fmt = fmt.decode("ascii") if isinstance(fmt, bytes) else str(fmt)
                if fmt != "csr":
                    raise PoxmInputError(f"{path}: holds a {fmt.upper()} matrix, expected CSR "
                                         "(write it with scipy.sparse.save_npz(path, m.tocsr()))")
            missing = [k for k in SAVE_NPZ_KEYS if k not in z.files]
            if missing:
                hint = ("; it holds X and Y in one file: declare it as one file, not a pair"
                        if all(f"X_{k}" in z.files for k in NPZ_KEYS) else "")
                raise PoxmInputError(f"{path}: not a scipy.sparse.save_npz file (missing {', '.join(missing)}; "
                                     f"found {', '.join(z.files) or 'no arrays'}){hint}")
            data = z["data"]
            if data.dtype.kind not in "biuf":
                raise PoxmInputError(f"{path}: values of type {data.dtype}, expected real numbers")
            m = sp.csr_matrix((data, z["indices"], z["indptr"]), shape=tuple(int(v) for v in z["shape"]))
            m.check_format(full_check=True)
        except PoxmInputError:
            raise
        except (ValueError, TypeError, IndexError, UnicodeDecodeError) as exc:
            raise PoxmInputError(f"{path}: its arrays do not form a valid CSR matrix "
                                 f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    return m


def read_npz_pair(x_path: str | Path, y_path: str | Path) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Features X (N, D) and labels Y (N, L) from two ``scipy.sparse.save_npz`` CSR files -> (X float32,
    Y float32 with 1.0 entries). Y must be binary (explicit zeros are dropped); X's values must be finite
    in float32; duplicate entries are summed (X) or merged (Y); the row counts must agree. A row of Y
    with no label is kept (its reward is 0 for every action)."""
    x_path, y_path = Path(x_path), Path(y_path)
    X = load_csr_npz(x_path)
    Y = load_csr_npz(y_path)
    if X.shape[0] != Y.shape[0]:
        raise PoxmInputError(f"{y_path}: has {Y.shape[0]} rows but the features file {x_path.name} has {X.shape[0]}")
    bad = np.flatnonzero((Y.data != 0) & (Y.data != 1))
    if bad.size:
        k = int(bad[0])
        row = int(np.searchsorted(Y.indptr, k, side="right") - 1)
        raise PoxmInputError(f"{y_path}: labels must be 0 or 1, found {Y.data[k].item()!r} in row {row}, "
                             f"column {int(Y.indices[k])} (0-based; {bad.size} such entries)")
    with np.errstate(over="ignore"):
        X = X.astype(np.float32)
    if X.nnz and not np.all(np.isfinite(X.data)):
        k = int(np.flatnonzero(~np.isfinite(X.data))[0])
        row = int(np.searchsorted(X.indptr, k, side="right") - 1)
        raise PoxmInputError(f"{x_path}: value in row {row} (0-based) is NaN, inf or overflows float32")
    X.sum_duplicates()
    X.eliminate_zeros()
    Y = Y.astype(np.float32)
    Y.eliminate_zeros()
    Y.sum_duplicates()
    Y.data[:] = 1.0
    return X.tocsr(), Y.tocsr()
