"""Readers for extreme multi-label data (docs/data.md). CSR end to end: X float32 (N, D), Y float32 (N, L)
with 1.0 entries.

Formats:
- Extreme Classification Repository BoW file: header ``N D L``, then N rows ``l1,l2,... f:v f:v ...``
  (0-based ids; the label list may be empty: the row then starts with a space or holds features only).
- Split sparse files: ``trn_X_Xf.txt`` (header ``N D``) + ``trn_X_Y.txt`` (header ``N L``), rows
  ``idx:val ...``, and the ``tst_`` twins.
(Raw text + label lines: `text_reader.py`; multilabel svmlight and .npz: `svmlight_npz.py`.)

Parsing is chunked: per row only a few string operations run in Python; the numbers of a whole chunk
are parsed by NumPy in C. When a chunk fails any vectorised check, a slow per-token pass over that
chunk finds the first bad row and raises one ``PoxmInputError`` naming ``file:line``.
"""
from __future__ import annotations

import re
from itertools import islice
from pathlib import Path
from typing import IO, Iterator

import numpy as np
import scipy.sparse as sp

from poxm_core.common.errors import PoxmInputError

_CHUNK_ROWS = 20000
_F32_MAX = float(np.finfo(np.float32).max)
# A feature list is `idx:val` tokens separated by whitespace; the value is checked by the number parser.
_PAIRS_RE = re.compile(r"\d+:[^\s:]+(?:\s+\d+:[^\s:]+)*")
_LABELS_RE = re.compile(r"\d+(?:,\d+)*")
SPLIT_FILES = {"train": ("trn_X_Xf.txt", "trn_X_Y.txt"), "test": ("tst_X_Xf.txt", "tst_X_Y.txt")}


# --------------------------------------------------------------------------------------------
# low level: files, headers, chunks

def open_text(path: Path) -> IO[str]:
    if not path.exists():
        raise PoxmInputError(f"{path}: file not found")
    if not path.is_file():
        raise PoxmInputError(f"{path}: expected a file, found a directory or special file")
    return _Utf8Text(path)


def _utf8_error(path: Path) -> PoxmInputError:
    """The one-line error for a file that is not UTF-8: its first bad line and byte (a second, binary pass)."""
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                return PoxmInputError(f"{path}:{lineno}: not UTF-8 text (byte 0x{line[exc.start]:02x} at column "
                                      f"{exc.start + 1}); convert the file, e.g. iconv -f latin1 -t utf-8")
    return PoxmInputError(f"{path}: not UTF-8 text")


class _Utf8Text:
    """A UTF-8 text file whose decoding errors are `PoxmInputError`s naming the file and line."""

    def __init__(self, path: Path):
        self.path, self._f = path, open(path, encoding="utf-8", newline=None)

    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except UnicodeDecodeError:
            self._f.close()
            raise _utf8_error(self.path) from None

    def readline(self, *args) -> str:
        return self._guard(self._f.readline, *args)

    def read(self, *args) -> str:
        return self._guard(self._f.read, *args)

    def __iter__(self):
        return self

    def __next__(self) -> str:
        return self._guard(self._f.__next__)

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()


def _short(text: str, width: int = 60) -> str:
    text = text.strip("\n")
    return repr(text if len(text) <= width else text[:width] + "...")


def _read_header(f: IO[str], path: Path, names: tuple[str, ...]) -> tuple[int, ...]:
    line = f.readline()
    want = " ".join(names)
    if not line:
        raise PoxmInputError(f"{path}: empty file, expected a header '{want}'")
    toks = line.split()
    if len(toks) != len(names) or not all(t.isdigit() for t in toks):
        raise PoxmInputError(f"{path}:1: expected header '{want}' ({len(names)} non-negative integers), got {_short(line)}")
    return tuple(int(t) for t in toks)


def _chunks(f: IO[str], path: Path, n_rows: int) -> Iterator[tuple[int, list[str]]]:
    """Yield (line number of the first row, rows without newline); check the row count against the header.

    A blank line is a row with nothing in it; blank lines at the very end beyond the header's N are ignored.
    """
    lineno = 2
    seen = 0
    pending_blank: list[str] = []
    while True:
        raw = list(islice(f, _CHUNK_ROWS))
        if not raw:
            break
        rows = [r.rstrip("\r\n") for r in raw]
        # Hold back trailing blank rows until we know whether more content follows.
        k = len(rows)
        while k and not rows[k - 1].strip():
            k -= 1
        body = pending_blank + rows[:k]
        pending_blank = rows[k:]
        if not body:
            continue
        if seen + len(body) > n_rows:
            raise PoxmInputError(f"{path}:{lineno + n_rows - seen}: header says N={n_rows} rows, found more rows than that")
        yield lineno, body
        lineno += len(body)
        seen += len(body)
    if pending_blank and seen < n_rows:
        # Trailing blank lines are rows without labels/features as far as the header asks for them.
        body = pending_blank[:n_rows - seen]
        yield lineno, body
        seen += len(body)
    if seen != n_rows:
        raise PoxmInputError(f"{path}: header says N={n_rows} rows, found {seen} (truncated file?)")


# --------------------------------------------------------------------------------------------
# chunk parsers (fast path) and the per-token diagnosis (slow path, only on failure)

def _id_error(text: str, n: int, what: str, shown: str, not_int: str) -> str | None:
    """None if `text` is an id in [0, n); else the message (`not_int` when it is no integer)."""
    try:
        i = int(text)
    except ValueError:
        return not_int
    return f"{what} id {i} out of range [0, {n}) in {shown}" if i < 0 or i >= n else None


def _pair_error(part: str, ncols: int, what: str) -> str | None:
    for tok in part.split():
        idx, sep, val = tok.partition(":")
        if not sep or not idx or not val or ":" in val:
            return f"expected '{what}_id:value', got {_short(tok)}"
        msg = _id_error(idx, ncols, what, _short(tok), f"{what} id is not an integer in {_short(tok)}")
        if msg:
            return msg
        try:
            v = float(val)
        except ValueError:
            return f"value is not a number in {_short(tok)}"
        if not np.isfinite(v) or abs(v) > _F32_MAX:
            return f"value must be finite (float32), got {_short(tok)}"
    return None


def _label_error(part: str, n_labels: int) -> str | None:
    for tok in part.split(","):
        msg = _id_error(tok, n_labels, "label", _short(part), f"expected comma-separated label ids, got {_short(part)}")
        if msg:
            return msg
    return None


def _parse_pairs(parts: list[str], ncols: int, path: Path, first_line: int, what: str
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of ``idx:val`` tokens -> (counts (rows,), idx int64, val float32); raises naming file:line."""
    counts = np.fromiter((p.count(":") for p in parts), dtype=np.int64, count=len(parts))
    ok = all(_PAIRS_RE.fullmatch(p) is not None for p in parts if p)
    if ok:
        try:
            nums = np.fromstring(" ".join(parts).replace(":", " "), sep=" ")  # noqa: NPY201 (text mode)
        except ValueError:
            nums = None
        ok = nums is not None and nums.size == 2 * counts.sum()
    if ok:
        idx, val = nums[0::2], nums[1::2]
        with np.errstate(over="ignore"):  # overflow to inf is caught just below
            val32 = val.astype(np.float32)
        ok = bool((idx.size == 0 or idx.max() < ncols) and np.isfinite(val32).all())
    if not ok:
        for k, p in enumerate(parts):
            msg = _pair_error(p, ncols, what) if p else None
            if msg is None and p and _PAIRS_RE.fullmatch(p) is None:
                msg = f"expected whitespace-separated '{what}_id:value' tokens, got {_short(p)}"
            if msg:
                raise PoxmInputError(f"{path}:{first_line + k}: {msg}")
        raise PoxmInputError(f"{path}:{first_line}-{first_line + len(parts) - 1}: unparseable '{what}_id:value' rows")
    return counts, idx.astype(np.int64), val32


def _parse_labels(parts: list[str], n_labels: int, path: Path, first_line: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``l1,l2,...`` (possibly empty) -> (counts (rows,), ids int64)."""
    counts = np.fromiter((p.count(",") + 1 if p else 0 for p in parts), dtype=np.int64, count=len(parts))
    ok = all(_LABELS_RE.fullmatch(p) is not None for p in parts if p)
    ids = None
    if ok:
        try:
            ids = np.fromstring(",".join(p for p in parts if p), sep=",")  # noqa: NPY201
        except ValueError:
            ids = None
        ok = ids is not None and ids.size == counts.sum() and (ids.size == 0 or ids.max() < n_labels)
    if not ok:
        for k, p in enumerate(parts):
            msg = _label_error(p, n_labels) if p else None
            if msg is None and p and _LABELS_RE.fullmatch(p) is None:
                msg = f"expected comma-separated label ids, got {_short(p)}"
            if msg:
                raise PoxmInputError(f"{path}:{first_line + k}: {msg}")
        raise PoxmInputError(f"{path}:{first_line}-{first_line + len(parts) - 1}: unparseable label lists")
    return counts, ids.astype(np.int64)


def _csr(counts: list[np.ndarray], idx: list[np.ndarray], val: list[np.ndarray] | None, shape: tuple[int, int],
         binary: bool) -> sp.csr_matrix:
    c = np.concatenate(counts) if counts else np.zeros(0, np.int64)
    indptr = np.zeros(shape[0] + 1, dtype=np.int64)
    np.cumsum(c, out=indptr[1:])
    ind = np.concatenate(idx) if idx else np.zeros(0, np.int64)
    itype = np.int32 if max(shape[1], indptr[-1]) < np.iinfo(np.int32).max else np.int64
    data = np.ones(ind.size, np.float32) if val is None else (np.concatenate(val) if val else np.zeros(0, np.float32))
    m = sp.csr_matrix((data, ind.astype(itype), indptr.astype(itype)), shape=shape)
    m.sum_duplicates()  # sorts indices; a repeated id in one row is one entry
    if binary:
        m.eliminate_zeros()
        m.data[:] = 1.0
    else:
        m.eliminate_zeros()
    return m


# --------------------------------------------------------------------------------------------
# public readers

def read_xc_bow(path: str | Path) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Extreme Classification Repository BoW file -> (X csr float32 (N, D), Y csr float32 (N, L)).

    Header ``N D L``; row ``l1,l2,... f:v f:v ...`` with 0-based ids; an empty label list shows as a row
    starting with a space, or a row holding features only. Repeated ids within a row are merged
    (feature values summed; a label stays 1.0). Explicit zero values are dropped.
    """
    path = Path(path)
    with open_text(path) as f:
        n, d, n_labels = _read_header(f, path, ("N", "D", "L"))
        xc, xi, xv, yc, yi = [], [], [], [], []
        for first, rows in _chunks(f, path, n):
            labs, feats = [], []
            for r in rows:
                head, _, rest = r.partition(" ")
                if ":" in head or not head:
                    labs.append("")
                    feats.append(r.strip())
                else:
                    labs.append(head)
                    feats.append(rest.strip())
            c, ids = _parse_labels(labs, n_labels, path, first)
            yc.append(c); yi.append(ids)
            c, idx, val = _parse_pairs(feats, d, path, first, "feature")
            xc.append(c); xi.append(idx); xv.append(val)
    return _csr(xc, xi, xv, (n, d), binary=False), _csr(yc, yi, None, (n, n_labels), binary=True)


def _read_pairs_file(path: Path, what: str, col_name: str) -> sp.csr_matrix:
    with open_text(path) as f:
        n, ncols = _read_header(f, path, ("N", col_name))
        cs, ids, vals = [], [], []
        for first, rows in _chunks(f, path, n):
            c, idx, val = _parse_pairs([r.strip() for r in rows], ncols, path, first, what)
            cs.append(c); ids.append(idx); vals.append(val)
    return _csr(cs, ids, vals, (n, ncols), binary=False)


def read_split_sparse(x_path: str | Path, y_path: str | Path) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """``*_X_Xf.txt`` (header ``N D``) + ``*_X_Y.txt`` (header ``N L``), rows ``idx:val ...`` -> (X, Y).

    Y keeps every listed label whose value is non-zero, as 1.0.
    """
    x_path, y_path = Path(x_path), Path(y_path)
    X = _read_pairs_file(x_path, "feature", "D")
    Y = _read_pairs_file(y_path, "label", "L")
    Y.data[:] = 1.0
    if X.shape[0] != Y.shape[0]:
        raise PoxmInputError(f"{y_path}:1: has N={Y.shape[0]} rows but {x_path.name} has N={X.shape[0]}")
    return X, Y


def find_split_sparse(folder: str | Path) -> dict[str, tuple[Path, Path]] | None:
    """{'train': (trn_X_Xf, trn_X_Y), 'test': (tst_X_Xf, tst_X_Y)} in `folder`, or None if none of them is there.

    Raises when only some of the four files exist (names the missing ones).
    """
    folder = Path(folder)
    paths = {s: tuple(folder / n for n in names) for s, names in SPLIT_FILES.items()}
    present = [p for pair in paths.values() for p in pair if p.is_file()]
    if not present:
        return None
    missing = [p.name for pair in paths.values() for p in pair if not p.is_file()]
    if missing:
        raise PoxmInputError(f"{folder}: split sparse layout is incomplete, missing {', '.join(missing)}")
    return paths  # type: ignore[return-value]


def read_split_sparse_dir(folder: str | Path) -> tuple[sp.csr_matrix, sp.csr_matrix, sp.csr_matrix, sp.csr_matrix]:
    """(X_train, Y_train, X_test, Y_test) from the four trn_/tst_ files of `folder`."""
    found = find_split_sparse(folder)
    if found is None:
        raise PoxmInputError(f"{folder}: no split sparse files ({', '.join(n for p in SPLIT_FILES.values() for n in p)})")
    Xtr, Ytr = read_split_sparse(*found["train"])
    Xte, Yte = read_split_sparse(*found["test"])
    return Xtr, Ytr, Xte, Yte
