"""The claims' test-set term from a few sums per head instead of every head's per-instance values.

A claim cell's crossed variance (inference.py) needs, of the (n seeds × m instances) differences
D_si = c·(x_si − y_si) between two chains of selected heads (x_s: the head selected at seed s), only
  each seed's mean          r_s = c·(Σ_i x_si − Σ_i y_si) / m,
  each instance's mean      D̄_i = c·(Σ_s x_si − Σ_s y_si) / n,
  the sum of squares        Σ_si D_si² = c²·Σ_s (x_s·x_s − 2 x_s·y_s + y_s·y_s).
So a source of per-instance values answers three questions: a head's total Σ_i x_i, the inner product
x·y of two heads of one seed, and a chain's seed sum Σ_s x_s (a vector over the m instances). A run
answers them from its arrays (results/test_instances.npz: `ArrayMoments`, each answer computed once and
kept); a published folder keeps only the answers its report asked for (moments/<dataset>_<variant>.npz.xz:
`StoredMoments`) — a twentieth of the arrays' room for 20 seeds, and the same tables, because the report
published with the folder was computed from exactly those numbers (float64, stored exactly).
"""
from __future__ import annotations

import io
import lzma
from pathlib import Path

import numpy as np

from orchestration.report.inference import CrossedMoments

MOMENTS_DIR = "moments"


def _cell_of(key: str) -> tuple[str, str]:
    d, v = key.split("|", 2)[:2]
    return d, v


class ArrayMoments:
    """The answers from per-instance arrays (a mapping key -> (m,) values), each computed once and kept
    (`export` returns what was asked, per (dataset, variant), for a published folder)."""

    def __init__(self, arrays, kept: "StoredMoments | None" = None):
        """`kept`: answers a published folder already holds (a folder joined with stages that bring
        arrays): they are answered from there and exported again."""
        self.arrays = arrays
        self._len: dict[str, int] = dict(kept._len) if kept is not None else {}
        self._tot: dict[str, float] = dict(kept._tot) if kept is not None else {}
        self._gram: dict[tuple[str, str], float] = dict(kept._gram) if kept is not None else {}
        self._chain: dict[tuple[str, ...], np.ndarray] = dict(kept._chain) if kept is not None else {}

    def _x(self, key: str) -> np.ndarray:
        return np.asarray(self.arrays[key], dtype=np.float64)

    def has(self, key: str) -> bool:
        if key in self._len:
            return True
        if key not in self.arrays:
            return False
        x = self._x(key)
        self._len[key], self._tot[key] = len(x), float(x.sum())
        return True

    def length(self, key: str) -> int:
        return self._len[key] if self.has(key) else -1

    def total(self, key: str) -> float:
        self.has(key)
        return self._tot[key]

    def gram(self, a: str, b: str) -> float:
        k = (a, b) if a <= b else (b, a)
        if k not in self._gram:
            self._gram[k] = float(self._x(k[0]) @ self._x(k[1]))
        return self._gram[k]

    def chain(self, keys: tuple[str, ...]) -> np.ndarray:
        if keys not in self._chain:
            self._chain[keys] = np.sum([self._x(k) for k in keys], axis=0)
        return self._chain[keys]

    def export(self) -> dict[tuple[str, str], dict[str, np.ndarray]]:
        """What was asked, per (dataset, variant), as the arrays of one moments file."""
        out: dict[tuple[str, str], dict] = {}
        for cell in sorted({_cell_of(k) for k in self._len}):
            keys = sorted(k for k in self._len if _cell_of(k) == cell)
            at = {k: i for i, k in enumerate(keys)}
            grams = sorted(k for k in self._gram if _cell_of(k[0]) == cell)
            chains = sorted(k for k in self._chain if _cell_of(k[0]) == cell)
            m = max((self._len[k] for k in keys), default=0)
            out[cell] = {
                "keys": np.array(keys), "length": np.array([self._len[k] for k in keys], dtype=np.int64),
                "total": np.array([self._tot[k] for k in keys], dtype=np.float64),
                "gram_a": np.array([at[a] for a, _ in grams], dtype=np.int64),
                "gram_b": np.array([at[b] for _, b in grams], dtype=np.int64),
                "gram": np.array([self._gram[g] for g in grams], dtype=np.float64),
                "chain_len": np.array([len(c) for c in chains], dtype=np.int64),
                "chain_keys": np.array([at[k] for c in chains for k in c], dtype=np.int64),
                "chain_sum": (np.stack([self._chain[c] for c in chains]) if chains
                              else np.zeros((0, m), dtype=np.float64)),
            }
        return out


class StoredMoments:
    """The answers a published folder keeps (moments/<dataset>_<variant>.npz.xz, written from
    ArrayMoments.export); a question it was never asked has no answer (the key reads as absent)."""

    def __init__(self, parts: dict[tuple[str, str], dict[str, np.ndarray]] | None = None):
        self._len: dict[str, int] = {}
        self._tot: dict[str, float] = {}
        self._gram: dict[tuple[str, str], float] = {}
        self._chain: dict[tuple[str, ...], np.ndarray] = {}
        for part in (parts or {}).values():
            self.add(part)

    def add(self, z) -> None:
        keys = [str(k) for k in z["keys"]]
        self._len.update(zip(keys, map(int, z["length"])))
        self._tot.update(zip(keys, map(float, z["total"])))
        self._gram.update({(keys[a], keys[b]): float(g) for a, b, g in zip(z["gram_a"], z["gram_b"], z["gram"])})
        start = 0
        for n, row in zip(z["chain_len"], z["chain_sum"]):
            self._chain[tuple(keys[i] for i in z["chain_keys"][start:start + n])] = np.asarray(row, dtype=np.float64)
            start += n

    def add_all(self, other: "StoredMoments") -> None:
        """Every answer `other` keeps (another folder's: the cells of different stages never overlap)."""
        self._len.update(other._len)
        self._tot.update(other._tot)
        self._gram.update(other._gram)
        self._chain.update(other._chain)

    def __bool__(self) -> bool:
        return bool(self._len)

    def has(self, key: str) -> bool:
        return key in self._len

    def length(self, key: str) -> int:
        return self._len.get(key, -1)

    def total(self, key: str) -> float:
        return self._tot[key]

    def gram(self, a: str, b: str) -> float:
        return self._gram[(a, b) if a <= b else (b, a)]

    def chain(self, keys: tuple[str, ...]) -> np.ndarray:
        return self._chain[keys]

    def export(self) -> dict[tuple[str, str], dict[str, np.ndarray]]:
        """Everything kept, per (dataset, variant), re-encoded as ArrayMoments.export does."""
        return ArrayMoments({}, kept=self).export()


def moment_source(instances):
    """A source of answers for `instances`: None, a source already, or a mapping key -> array."""
    if instances is None or isinstance(instances, (ArrayMoments, StoredMoments)):
        return instances
    return ArrayMoments(instances)


def pair_moments(src, xkeys, ykeys, scale: float) -> CrossedMoments | None:
    """The moments of D_si = scale·(x_si − y_si) for the seeds' heads `xkeys` and `ykeys` (one each per
    seed, same order), or None where any head's values are missing, their lengths differ or a published
    folder lacks an answer (the claim then has the seed term alone, as without per-instance values)."""
    if src is None or not xkeys or len(xkeys) != len(ykeys):
        return None
    xkeys, ykeys = tuple(xkeys), tuple(ykeys)
    if not all(src.has(k) for k in xkeys + ykeys) or len({src.length(k) for k in xkeys + ykeys}) != 1:
        return None
    n, m = len(xkeys), src.length(xkeys[0])
    try:
        row = np.array([src.total(x) - src.total(y) for x, y in zip(xkeys, ykeys)]) * (scale / m)
        col = (src.chain(xkeys) - src.chain(ykeys)) * (scale / n)
        sumsq = scale ** 2 * sum(src.gram(x, x) - 2.0 * src.gram(x, y) + src.gram(y, y) for x, y in zip(xkeys, ykeys))
    except KeyError:
        return None
    return CrossedMoments(n=n, m=m, row_means=row, col_means=col, sumsq=float(sumsq))


def write_moments(src, out_dir: Path, datasets: list[str] | None = None) -> int:
    """Write `src.export()` into `out_dir` as <dataset>_<variant>.npz.xz (each written, then renamed),
    only `datasets` where given; returns the number of heads written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    n = 0
    for (d, v), part in src.export().items():
        if datasets is not None and d not in datasets:
            continue
        buf = io.BytesIO()
        np.savez(buf, **part)
        tmp = out_dir / f".{d}_{v}.npz.xz.tmp"
        tmp.write_bytes(lzma.compress(buf.getvalue(), preset=9))
        tmp.replace(out_dir / f"{d}_{v}.npz.xz")
        n += len(part["keys"])
    return n


def read_moments(folder: Path) -> StoredMoments:
    """A published folder's moments/*.npz.xz as one source (empty when it has none)."""
    out = StoredMoments()
    for f in sorted((Path(folder) / MOMENTS_DIR).glob("*.npz.xz")):
        with np.load(io.BytesIO(lzma.decompress(f.read_bytes()))) as z:
            out.add({k: z[k] for k in z.files})
    return out
