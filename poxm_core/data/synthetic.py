"""Seeded synthetic XMC data with the shape of the paper's Table 1 and a learnable signal.

Generative model (all vectorised in NumPy; features generated in row chunks so memory stays bounded):
- label frequencies follow a power law: the label of popularity rank r (ids randomly permuted) is drawn
  with probability ∝ (r + label_offset)^(-label_exponent) (Zipf-Mandelbrot; the offset flattens the head);
- instance i has k_i = 1 + Poisson(mean_labels - 1) distinct labels (k_i >= 1; Poisson(mean_labels) when
  mean_labels < 1), drawn from that law without repeats;
- every label owns `topic_size` "topic" feature ids; labels fall into random clusters of ~`cluster_size`
  and a share `shared_topic` of a label's topic words comes from its cluster's common pool, so sibling
  labels are confusable (a label is not identified by one word); instance i draws m_i = max(1, Poisson(mean_features))
  word tokens: with probability `signal` a topic word of one of its labels (uniform), else a background
  word from a power law over the D features (frequent "stop words");
- values are TF-IDF: (1 + ln tf) * (ln((1 + N_train) / (1 + df)) + 1) with df over the training rows
  (scikit-learn's smooth idf), rows L2-normalised; X float32 CSR, Y CSR with 1.0 entries.
The first n_train instances are the training split, the rest the test split (same distribution).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from poxm_core.data.types import XMCData, XMCSplit
from poxm_core.common.errors import PoxmInputError

_CHUNK_ROWS = 32768


@dataclass(frozen=True)
class SyntheticPreset:
    """A generated dataset imitating a real one: its sizes, then the generator's shape parameters.
    `mean_features` is the mean number of word tokens per instance and `signal` the share of them drawn
    from the instance's labels' topics; `label_exponent`/`label_offset` set the label frequency curve
    P(rank r) ∝ (r + label_offset)^-label_exponent; the rest as in `make_synthetic`."""
    n_train: int
    n_test: int
    n_features: int
    n_labels: int
    mean_labels: float
    mean_features: int
    signal: float
    label_exponent: float = 1.0
    label_offset: float = 0.0
    topic_size: int = 10
    cluster_size: int = 10
    shared_topic: float = 0.8

    def generator_kwargs(self) -> dict:
        """The shape parameters as `make_synthetic` keywords."""
        return {k: getattr(self, k) for k in _SHAPE_KEYS}


_SHAPE_KEYS = ("mean_features", "signal", "label_exponent", "label_offset", "topic_size", "cluster_size",
               "shared_topic")

# Paper Table 1 sizes. The shape parameters are calibrated against the real datasets' label statistics
# and against a supervised model vs the popularity ranking (docs/data.md, studies/synthetic_calibration.py).
PRESETS: dict[str, SyntheticPreset] = {
    "eurlex": SyntheticPreset(15449, 3865, 186104, 3956, 5.30, 236, 0.3, label_exponent=1.2, label_offset=20),
    "wiki10": SyntheticPreset(14146, 6616, 101938, 30938, 18.64, 673, 0.6, label_exponent=0.8, label_offset=20),
    "amazon670k": SyntheticPreset(490449, 153025, 135909, 670091, 5.45, 71, 0.9, label_exponent=0.7,
                                  label_offset=20),
}


def _power_law_sampler(n_items: int, exponent: float, rng: np.random.Generator, offset: float = 0.0):
    """Return draw(size) -> item ids with P(item of rank r) ∝ (r + offset)^-exponent (Zipf-Mandelbrot; a
    plain power law at offset 0); ranks randomly assigned to ids."""
    ranks = np.arange(1, n_items + 1, dtype=np.float64)
    if offset:
        ranks += offset
    cdf = np.cumsum(ranks ** -exponent)
    cdf /= cdf[-1]
    ids = rng.permutation(n_items).astype(np.int64)

    def draw(size: int, g: np.random.Generator) -> np.ndarray:
        r = np.searchsorted(cdf, g.random(size), side="right")
        return ids[np.minimum(r, n_items - 1)]
    return draw


def _label_sets(n: int, n_labels: int, mean_labels: float, exponent: float, rng: np.random.Generator,
                offset: float = 0.0) -> sp.csr_matrix:
    """(n, L) CSR of distinct labels per row; row sizes 1 + Poisson(mean - 1), drawn from the power law."""
    draw = _power_law_sampler(n_labels, exponent, rng, offset)
    k = 1 + rng.poisson(mean_labels - 1, n) if mean_labels >= 1 else rng.poisson(mean_labels, n)
    k = np.minimum(k, n_labels).astype(np.int64)
    rows = np.repeat(np.arange(n, dtype=np.int64), k)
    labs = draw(rows.size, rng)
    for attempt in range(30):
        key = np.unique(rows * n_labels + labs)  # drops repeats within a row, sorts by (row, label)
        rows, labs = key // n_labels, key % n_labels
        deficit = k - np.bincount(rows, minlength=n)
        if not deficit.any() or attempt == 29:
            break  # a row that keeps redrawing popular labels may end a few short: accepted
        extra = np.repeat(np.arange(n, dtype=np.int64), deficit)
        rows = np.concatenate([rows, extra])
        labs = np.concatenate([labs, draw(extra.size, rng)])
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    itype = np.int32 if max(n_labels, labs.size) < 2**31 - 1 else np.int64
    return sp.csr_matrix((np.ones(labs.size, np.float32), labs.astype(itype), indptr.astype(itype)),
                         shape=(n, n_labels))


def _topics(n_labels: int, n_features: int, topic_size: int, cluster_size: int, shared: float,
            rng: np.random.Generator) -> np.ndarray:
    """(L, topic_size) topic word ids. Labels fall into random clusters of ~cluster_size; the first
    round(shared * topic_size) words of a label come from its cluster's common pool (so sibling labels are
    confusable), the rest are the label's own."""
    n_clusters = max(1, n_labels // cluster_size)
    cluster = rng.integers(0, n_clusters, n_labels)
    pool = rng.integers(0, n_features, size=(n_clusters, topic_size))
    n_shared = int(round(shared * topic_size))
    topics = rng.integers(0, n_features, size=(n_labels, topic_size))
    if n_shared:
        pick = rng.integers(0, topic_size, size=(n_labels, n_shared))
        topics[:, :n_shared] = pool[cluster[:, None], pick]
    return topics


def _token_counts(Y: sp.csr_matrix, a: int, b: int, topics: np.ndarray, background, mean_features: float,
                  signal: float, n_features: int, g: np.random.Generator) -> sp.csr_matrix:
    """Term counts (b - a, D) of rows a..b-1: topic words of the row's labels plus background words."""
    m = np.maximum(1, g.poisson(mean_features, b - a))
    trow = np.repeat(np.arange(b - a, dtype=np.int64), m)
    start = Y.indptr[a:b].astype(np.int64)
    n_lab = (Y.indptr[a + 1:b + 1] - Y.indptr[a:b]).astype(np.int64)
    sig = (g.random(trow.size) < signal) & (n_lab[trow] > 0)
    tr = trow[sig]
    pick = (g.random(tr.size) * n_lab[tr]).astype(np.int64)
    lab = Y.indices[start[tr] + pick]
    words = np.empty(trow.size, np.int64)
    words[sig] = topics[lab, g.integers(0, topics.shape[1], tr.size)]
    words[~sig] = background(int((~sig).sum()), g)
    C = sp.csr_matrix((np.ones(trow.size, np.float32), (trow, words)), shape=(b - a, n_features))
    C.sum_duplicates()
    return C


def _tfidf_inplace(X: sp.csr_matrix, n_train: int) -> None:
    df = np.bincount(X.indices[:X.indptr[n_train]], minlength=X.shape[1])
    idf = (np.log((1.0 + n_train) / (1.0 + df)) + 1.0).astype(np.float32)
    X.data = (1.0 + np.log(X.data, dtype=np.float32)) * idf[X.indices]
    lengths = np.diff(X.indptr)
    sq = np.zeros(X.shape[0], np.float32)
    nz = lengths > 0
    sq[nz] = np.add.reduceat(X.data * X.data, X.indptr[:-1][nz])
    norms = np.sqrt(sq)
    norms[norms == 0] = 1.0
    X.data /= np.repeat(norms, lengths)


def _check_int(name: str, v, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(v).__name__}")
    if v < low:
        raise ValueError(f"{name}: expected an int >= {low}, got {v}")
    return int(v)


def make_synthetic(n_train: int, n_test: int, n_features: int, n_labels: int, mean_labels: float, seed: int, *,
                   mean_features: float = 64, label_exponent: float = 1.0, feature_exponent: float = 1.0,
                   topic_size: int = 10, signal: float = 0.3, cluster_size: int = 10, shared_topic: float = 0.8,
                   label_offset: float = 0.0, name: str = "synthetic") -> XMCData:
    """Generate an `XMCData` (train X (n_train, D), test X (n_test, D), Y with L columns); deterministic in `seed`.

    See the module docstring for the generative model. Memory: O(nnz) plus one chunk of tokens.
    """
    n_train = _check_int("n_train", n_train, 1)
    n_test = _check_int("n_test", n_test, 1)
    n_features = _check_int("n_features", n_features, 1)
    n_labels = _check_int("n_labels", n_labels, 2)
    topic_size = _check_int("topic_size", topic_size, 1)
    cluster_size = _check_int("cluster_size", cluster_size, 1)
    seed = _check_int("seed", seed, 0)
    for arg, v in (("mean_labels", mean_labels), ("mean_features", mean_features)):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"{arg}: expected a finite number > 0, got {v}")
    for arg, v in (("signal", signal), ("shared_topic", shared_topic)):
        if not (0.0 <= v <= 1.0):
            raise ValueError(f"{arg}: expected a share in [0, 1], got {v}")
    for arg, v in (("label_exponent", label_exponent), ("feature_exponent", feature_exponent),
                   ("label_offset", label_offset)):
        if not (np.isfinite(v) and v >= 0):
            raise ValueError(f"{arg}: expected a finite number >= 0, got {v}")

    n = n_train + n_test
    rng = np.random.default_rng([seed, 0])
    Y = _label_sets(n, n_labels, float(mean_labels), label_exponent, rng, float(label_offset))
    itype = np.int32 if n_features < 2**31 - 1 else np.int64
    topics = _topics(n_labels, n_features, topic_size, cluster_size, shared_topic, rng).astype(itype)
    background = _power_law_sampler(n_features, feature_exponent, rng)
    chunks = []
    for c, a in enumerate(range(0, n, _CHUNK_ROWS)):
        g = np.random.default_rng([seed, 1, c])  # one stream per chunk: same data whatever the memory
        chunks.append(_token_counts(Y, a, min(a + _CHUNK_ROWS, n), topics, background, mean_features, signal,
                                    n_features, g))
    X = sp.vstack(chunks, format="csr")
    del chunks
    X.sum_duplicates()
    _tfidf_inplace(X, n_train)
    X.data = X.data.astype(np.float32, copy=False)
    return XMCData(name, XMCSplit(_rows(X, 0, n_train), _rows(Y, 0, n_train)),
                   XMCSplit(_rows(X, n_train, n), _rows(Y, n_train, n)))


def _rows(M: sp.csr_matrix, a: int, b: int) -> sp.csr_matrix:
    """Rows a..b-1 of a canonical CSR sharing its data and indices (slicing would copy the whole split)."""
    lo, hi = M.indptr[a], M.indptr[b]
    out = sp.csr_matrix((M.data[lo:hi], M.indices[lo:hi], M.indptr[a:b + 1] - lo), shape=(b - a, M.shape[1]), copy=False)
    out.has_sorted_indices = True
    return out


def synthetic_from_config(scfg, seed: int) -> XMCData:
    """`SyntheticConfig` -> data: the preset's sizes and shape, then the explicit sizes, then `scale` (N only).
    Without a preset the generator's defaults give the shape."""
    base = PRESETS[scfg.preset] if scfg.preset is not None else None
    sizes = {k: (getattr(base, k) if base else None) for k in ("n_train", "n_test", "n_features", "n_labels",
                                                              "mean_labels")}
    for k in ("n_train", "n_test", "n_features", "n_labels", "mean_labels"):
        if getattr(scfg, k) is not None:
            sizes[k] = getattr(scfg, k)
    missing = [k for k in ("n_train", "n_test", "n_features", "n_labels") if sizes[k] is None]
    if missing:
        raise PoxmInputError(f"synthetic.{missing[0]}: required without a preset (missing: {', '.join(missing)}; "
                             f"or set synthetic.preset to one of {', '.join(sorted(PRESETS))})")
    mean_labels = 5.0 if sizes["mean_labels"] is None else float(sizes["mean_labels"])
    shape = base.generator_kwargs() if base else {}
    n_train = max(1, int(round(sizes["n_train"] * scfg.scale)))
    n_test = max(1, int(round(sizes["n_test"] * scfg.scale)))
    return make_synthetic(n_train, n_test, int(sizes["n_features"]), int(sizes["n_labels"]), mean_labels, seed,
                          **shape)
