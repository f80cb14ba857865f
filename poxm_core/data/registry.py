"""The dataset registry: name -> `DatasetSpec` (where the files are, expected shapes, propensity A/B,
the paper's logging variants). Adding a dataset is one `register_dataset(DatasetSpec(...))` line; a
format the readers do not know comes with a `reader` callable.

`load_dataset(dcfg, data_root, seed)` finds the files under ``dcfg.path`` or ``<data_root>/<folder>``,
reads them, checks the shapes against the registry and returns an `XMCData` (re-split from its train and
test rows pooled when the config says `split: {from: union, ...}`; poxm_core/data/splits.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from poxm_core.data.readers import find_split_sparse, read_split_sparse, read_xc_bow
from poxm_core.data.splits import resplit, split_rows, split_seed
from poxm_core.data.svmlight_npz import read_npz_pair, read_svmlight, read_xy_npz
from poxm_core.data.text_reader import TEXT_FILES, read_text_tfidf
from poxm_core.data.types import XMCData, XMCSplit
from poxm_core.common.errors import PoxmInputError, nearest
from poxm_core.common.registration import add

if TYPE_CHECKING:
    from poxm_core.config.schema import DatasetConfig


@dataclass(frozen=True)
class PaperVariant:
    """A logging-policy variant (alpha, beta, T) of the paper's appendix table ``logging_param``."""
    name: str
    alpha: float
    beta: float
    T: float


@dataclass(frozen=True)
class KnownShape:
    """One published shape of a dataset; None where unknown. `layouts` limits where it applies."""
    source: str
    N_train: int | None
    N_test: int | None
    D: int | None
    L: int | None
    layouts: tuple[str, ...] = ("xc_bow", "split_sparse", "text")

    def mismatches(self, found: dict[str, int], layout: str) -> list[str]:
        keys = ("N_train", "N_test", "L") if layout == "text" else ("N_train", "N_test", "D", "L")
        # D of the text layout is the vocabulary of our TF-IDF vectoriser, not a property of the data.
        return [k for k in keys if getattr(self, k) is not None and getattr(self, k) != found[k]]


@dataclass(frozen=True)
class DatasetSpec:
    """A registered dataset.

    N_train/N_test/D/L are the paper's Table 1 shape (None where unknown); `other_shapes` are further
    published shapes that are accepted too (e.g. the XC BoW release of EUR-Lex). `train_files` /
    `test_files` are XC BoW file names tried in order inside `folder`; the split sparse layout
    (trn_X_Xf.txt ...) and the AttentionXML text layout (train_texts.txt ...) are always accepted too.
    `reader(dcfg, data_root, seed) -> XMCData`, when set, replaces the file search (synthetic data, or
    a format of your own).
    """
    name: str
    folder: str
    description: str
    A: float = 0.55
    B: float = 1.5
    N_train: int | None = None
    N_test: int | None = None
    D: int | None = None
    L: int | None = None
    other_shapes: tuple[KnownShape, ...] = ()
    train_files: tuple[str, ...] = ()
    test_files: tuple[str, ...] = ()
    variants: tuple[PaperVariant, ...] = ()
    reader: Callable[["DatasetConfig", Path, int], XMCData] | None = None

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"name: expected a non-empty string, got {self.name!r}")
        if len(self.train_files) != len(self.test_files):
            raise ValueError(f"{self.name}: train_files and test_files must pair up, got {self.train_files} / {self.test_files}")
        if not (self.A > 0 and self.B > 0):
            raise ValueError(f"{self.name}: propensity A and B must be > 0, got A={self.A}, B={self.B}")

    def known_shapes(self) -> tuple[KnownShape, ...]:
        paper = KnownShape("paper Table 1", self.N_train, self.N_test, self.D, self.L)
        return (paper,) + self.other_shapes


DATASETS: dict[str, DatasetSpec] = {}


def register_dataset(spec: DatasetSpec) -> DatasetSpec:
    """Add `spec` to `DATASETS` (a name may be registered once)."""
    if not isinstance(spec, DatasetSpec):
        raise TypeError(f"spec: expected a DatasetSpec, got {type(spec).__name__}")
    return add(DATASETS, "dataset", spec.name, spec)


def get_spec(name: str) -> DatasetSpec:
    try:
        return DATASETS[name]
    except KeyError:
        raise PoxmInputError(f"unknown dataset '{name}'{nearest(str(name), DATASETS)}; "
                             f"registered: {', '.join(sorted(DATASETS))}") from None


def spec_for(dcfg: "DatasetConfig") -> DatasetSpec:
    """The registered spec of `dcfg.name`, or for a dataset declared in the config (`format` set) a spec
    built from it (reader: `load_declared`). A declared dataset may not reuse a registered name."""
    if getattr(dcfg, "logged", None) is not None:   # real logged feedback: read by the prepare stage's logged branch
        return DatasetSpec(name=dcfg.name, folder="", description=f"logged feedback ({dcfg.logged.source})",
                           reader=_not_xmc)
    if getattr(dcfg, "format", None) is None:
        return get_spec(dcfg.name)
    if dcfg.name in DATASETS:
        raise PoxmInputError(f"{dcfg.key}: '{dcfg.name}' is a registered dataset; give the dataset "
                             "declared by 'format' another name, or drop 'format' to use the registered one")
    A = 0.55 if dcfg.propensity_A is None else float(dcfg.propensity_A)
    B = 1.5 if dcfg.propensity_B is None else float(dcfg.propensity_B)
    return DatasetSpec(name=dcfg.name, folder="", description=f"declared in the config (format {dcfg.format})",
                       A=A, B=B, reader=load_declared)


def _not_xmc(dcfg, data_root, seed):
    raise PoxmInputError(f"dataset '{dcfg.name}' is logged feedback ({dcfg.key}.logged): it has no labels to load "
                         "as XMC data; the prepare stage reads it (poxm_core.prepare.logged)")


_WARNED: set[str] = set()   # datasets whose `propensity: default` was logged in this process


def propensity_params(dcfg: "DatasetConfig") -> tuple[float, float]:
    """(A, B) of Jain et al.: the config's propensity_A / propensity_B where set, else the registry's
    (a dataset declared in the config with `propensity: default`: 0.55 / 1.5, with a warning)."""
    spec = spec_for(dcfg)
    if getattr(dcfg, "format", None) is not None and dcfg.propensity == "default" \
            and (dcfg.propensity_A is None or dcfg.propensity_B is None) and dcfg.name not in _WARNED:
        import logging
        _WARNED.add(dcfg.name)
        logging.getLogger(__name__).warning(
            "dataset '%s': propensity: default -> Jain et al. A=%g, B=%g; PSP/PSR and wPOXM depend on them "
            "(set propensity_A / propensity_B for your data)", dcfg.name, spec.A, spec.B)
    A = spec.A if dcfg.propensity_A is None else float(dcfg.propensity_A)
    B = spec.B if dcfg.propensity_B is None else float(dcfg.propensity_B)
    return A, B


# --------------------------------------------------------------------------------------------
# locating and loading files

@dataclass(frozen=True)
class DatasetFiles:
    layout: str  # "xc_bow" | "split_sparse" | "text"
    train: tuple[Path, ...]
    test: tuple[Path, ...]


def locate_files(spec: DatasetSpec, where: Path) -> DatasetFiles:
    """Find the dataset under `where`: a folder (XC BoW, then split sparse, then text layout) or an XC BoW
    training file whose name contains 'train' (its test file: the same name with 'test')."""
    where = Path(where)
    if where.is_file():
        if "train" not in where.name:
            raise PoxmInputError(f"{where}: a file path must be the XC BoW training file, its name containing 'train'")
        test = where.with_name(where.name.replace("train", "test"))
        if not test.is_file():
            raise PoxmInputError(f"{test}: file not found (the test twin of {where.name})")
        return DatasetFiles("xc_bow", (where,), (test,))
    if not where.is_dir():
        raise PoxmInputError(f"{where}: dataset '{spec.name}' not found (no such folder); set the dataset's "
                             f"'path' or the data root ($POXM_DATA_ROOT)")
    for tr, te in zip(spec.train_files, spec.test_files):
        if (where / tr).is_file() or (where / te).is_file():
            for p in (where / tr, where / te):
                if not p.is_file():
                    raise PoxmInputError(f"{p}: file not found (XC BoW layout of '{spec.name}')")
            return DatasetFiles("xc_bow", (where / tr,), (where / te,))
    split = find_split_sparse(where)
    if split is not None:
        return DatasetFiles("split_sparse", split["train"], split["test"])
    text = {s: tuple(where / n for n in names) for s, names in TEXT_FILES.items()}
    if any(p.is_file() for pair in text.values() for p in pair):
        missing = [p.name for pair in text.values() for p in pair if not p.is_file()]
        if missing:
            raise PoxmInputError(f"{where}: text layout is incomplete, missing {', '.join(missing)}")
        return DatasetFiles("text", text["train"], text["test"])
    wanted = [f"{a}/{b}" for a, b in zip(spec.train_files, spec.test_files)]
    wanted += ["trn_X_Xf.txt+trn_X_Y.txt+tst_X_Xf.txt+tst_X_Y.txt", "train_texts.txt+train_labels.txt+test_texts.txt+test_labels.txt"]
    raise PoxmInputError(f"{where}: no data files of '{spec.name}' found; expected one of: {'; '.join(wanted)}")


def check_shape(spec: DatasetSpec, files: DatasetFiles, found: dict[str, int]) -> None:
    """Raise unless `found` (N_train, N_test, D, L) matches one of the spec's known shapes."""
    shapes = [s for s in spec.known_shapes() if files.layout in s.layouts]
    if not shapes:
        return
    diffs = [(s, s.mismatches(found, files.layout)) for s in shapes]
    if any(not d for _, d in diffs):
        return
    best, bad = min(diffs, key=lambda sd: len(sd[1]))
    culprit = files.test[0] if all(k == "N_test" for k in bad) else files.train[0]
    expected = " or ".join(
        f"{', '.join(f'{k}={getattr(s, k)}' for k in ('N_train', 'N_test', 'D', 'L') if getattr(s, k) is not None)} ({s.source})"
        for s in shapes)
    got = ", ".join(f"{k}={found[k]}" for k in ("N_train", "N_test", "D", "L"))
    raise PoxmInputError(f"{culprit}: '{spec.name}' has unexpected shape, found {got}; expected {expected}")


def _load_files(spec: DatasetSpec, where: Path) -> XMCData:
    files = locate_files(spec, where)
    if files.layout == "xc_bow":
        Xtr, Ytr = read_xc_bow(files.train[0])
        Xte, Yte = read_xc_bow(files.test[0])
    elif files.layout == "split_sparse":
        Xtr, Ytr = read_split_sparse(*files.train)
        Xte, Yte = read_split_sparse(*files.test)
    else:
        t = read_text_tfidf(*files.train, *files.test)
        Xtr, Ytr, Xte, Yte = t.X_train, t.Y_train, t.X_test, t.Y_test
    for what, a, b in (("D", Xtr.shape[1], Xte.shape[1]), ("L", Ytr.shape[1], Yte.shape[1])):
        if a != b:
            raise PoxmInputError(f"{files.test[-1]}: {what}={b} but the training file {files.train[-1].name} has {what}={a}")
    found = {"N_train": Xtr.shape[0], "N_test": Xte.shape[0], "D": Xtr.shape[1], "L": Ytr.shape[1]}
    check_shape(spec, files, found)
    return XMCData(spec.name, XMCSplit(Xtr, Ytr), XMCSplit(Xte, Yte))


def declared_files(dcfg: "DatasetConfig", data_root: Path | str | None = None) -> list[Path]:
    """Every file of a dataset declared in the config (train then test); a missing one is a one-line
    error. With `folder`, the names are inside ``<data_root>/<folder>`` (or `folder` itself if absolute;
    `data_root` defaults to `default_data_root()`)."""
    base = None
    if getattr(dcfg, "folder", None) is not None:
        base = Path(dcfg.folder).expanduser()
        if not base.is_absolute():
            if data_root is None:
                from poxm_core.config.schema import default_data_root
                data_root = default_data_root()
            base = Path(data_root) / base
        if not base.is_dir():
            raise PoxmInputError(f"{base}: folder not found ({dcfg.key}.folder, under the data "
                                 "root: $POXM_DATA_ROOT or the config's data_root)")
    files = []
    for key in ("train", "test"):
        v = getattr(dcfg, key)
        for f in ([] if v is None else v if isinstance(v, list) else [v]):
            p = Path(f).expanduser() if base is None else base / f
            if not p.is_file():
                raise PoxmInputError(f"{p}: file not found ({dcfg.key}.{key})")
            files.append(p)
    return files


def _read_declared(fmt: str, files: list[Path], pairs: bool) -> list[tuple]:
    """[(X, Y)] per split from the declared files (train then test, if any); `pairs`: two files a split."""
    if fmt == "xc":
        return [read_xc_bow(f) for f in files]
    if fmt == "split":
        return [read_split_sparse(*files[i:i + 2]) for i in range(0, len(files), 2)]
    if fmt == "svmlight":
        return read_svmlight(*files)
    if fmt == "npz" and pairs:
        return [read_npz_pair(*files[i:i + 2]) for i in range(0, len(files), 2)]
    if fmt == "npz":
        return [read_xy_npz(f) for f in files]
    raise AssertionError(fmt)


def load_declared(dcfg: "DatasetConfig", data_root: Path, seed: int) -> XMCData:
    """A dataset declared in the config: `format` + `train` + (`test` | `split`), the files inside
    `folder` (under `data_root`) if set. D and L must agree between the files; with `split`, the test rows
    are a seeded random `test_fraction` of the file's rows (rows without a label included, as the readers
    keep them), or with `split.from: union` of the train and test files' rows pooled; `seed` (the run
    seed) enters the split only under `split.redraw_per_seed`."""
    files = declared_files(dcfg, data_root)
    fmt = dcfg.format
    if fmt == "text":
        if dcfg.split is not None:
            raise PoxmInputError(f"{dcfg.key}: format text needs a test file pair (split is not "
                                 "supported: the TF-IDF vocabulary is fit on the training texts)")
        t = read_text_tfidf(*files)
        parts = [(t.X_train, t.Y_train), (t.X_test, t.Y_test)]
    else:
        parts = _read_declared(fmt, files, isinstance(dcfg.train, list))
    if dcfg.split is None or dcfg.split.union:
        (Xtr, Ytr), (Xte, Yte) = parts
        n_tr = len(files) // 2
        for what, a, b in (("D", Xtr.shape[1], Xte.shape[1]), ("L", Ytr.shape[1], Yte.shape[1])):
            if a != b:
                raise PoxmInputError(f"{files[n_tr]}: {what}={b} but the training file {files[0].name} has {what}={a}")
    else:
        X, Y = parts[0]
        tr, te = split_rows(X.shape[0], dcfg.split.test_fraction, dcfg.split.seed, split_seed(dcfg.split, seed),
                            where=str(files[0]))
        Xtr, Ytr, Xte, Yte = X[tr], Y[tr], X[te], Y[te]
    data = XMCData(dcfg.name, XMCSplit(Xtr.tocsr(), Ytr.tocsr()), XMCSplit(Xte.tocsr(), Yte.tocsr()))
    if dcfg.split is not None and dcfg.split.union:
        data = resplit(data, dcfg.split, seed, where=f"{dcfg.key}.split")
    st = data.stats()
    import logging
    logging.getLogger(__name__).info("dataset '%s' (%s): N_train=%d, N_test=%d, D=%d, L=%d", dcfg.name, fmt,
                                     st["N_train"], st["N_test"], st["D"], st["L"])
    return data


def load_dataset(dcfg: "DatasetConfig", data_root: Path | str, seed: int = 0) -> XMCData:
    """Read the dataset `dcfg.name` from ``dcfg.path`` or ``<data_root>/<spec.folder>``, or the files a
    dataset declared in the config names; `seed` (the run seed) is used by generated datasets and by a
    split re-drawn per seed. Shapes are checked against the registry (one-line error naming the file)."""
    spec = spec_for(dcfg)
    if spec.reader is not None:
        if getattr(dcfg, "format", None) is None and getattr(dcfg, "split", None) is not None:
            raise PoxmInputError(f"{dcfg.key}.split: dataset '{dcfg.name}' is read by its own reader "
                                 f"({spec.reader.__module__}), which makes its test split; remove 'split'")
        return spec.reader(dcfg, Path(data_root), seed)
    where = Path(dcfg.path) if dcfg.path else Path(data_root) / spec.folder
    data = _load_files(spec, where)          # the shape is checked on the files as published
    if getattr(dcfg, "split", None) is not None:
        data = resplit(data, dcfg.split, seed, where=f"{dcfg.key}.split")
    return data


def _load_synthetic(dcfg: "DatasetConfig", data_root: Path, seed: int) -> XMCData:
    from poxm_core.data.synthetic import synthetic_from_config

    if dcfg.synthetic is None:
        raise PoxmInputError(f"{dcfg.key}.synthetic: required for the synthetic dataset "
                             "(e.g. synthetic: {preset: eurlex, scale: 0.1})")
    return synthetic_from_config(dcfg.synthetic, seed)


# --------------------------------------------------------------------------------------------
# the registry entries

_EURLEX_VARIANTS = (PaperVariant("A", 0.2, 0.0, 2.0), PaperVariant("B", 0.2, 1.5, 5.0), PaperVariant("C", 0.2, 4.0, 18.0))
# Bibtex, Delicious and synthetic data are not in the paper: they get EUR-Lex's variant A as a default.
_DEFAULT_VARIANTS = (PaperVariant("A", 0.2, 0.0, 2.0),)

register_dataset(DatasetSpec(
    name="bibtex", folder="bibtex", description="Bibtex (XC repository / Mulan), binary BoW; not in the paper",
    N_train=4880, N_test=2515, D=1836, L=159, train_files=("bibtex_train.txt",), test_files=("bibtex_test.txt",),
    variants=_DEFAULT_VARIANTS))
register_dataset(DatasetSpec(
    name="delicious", folder="delicious", description="Delicious (XC repository / Mulan), binary BoW; not in the paper",
    N_train=12920, N_test=3185, D=500, L=983, train_files=("delicious_train.txt",), test_files=("delicious_test.txt",),
    variants=_DEFAULT_VARIANTS))
register_dataset(DatasetSpec(
    name="eurlex-4k", folder="eurlex-4k",
    description="EUR-Lex 4K, user-supplied. Paper: AttentionXML raw text -> TF-IDF; the XC BoW release is accepted too",
    N_train=15449, N_test=3865, D=186104, L=3956,
    other_shapes=(KnownShape("XC BoW release", 15539, 3809, 5000, 3993, layouts=("xc_bow", "split_sparse")),),
    train_files=("eurlex_train.txt", "train.txt"), test_files=("eurlex_test.txt", "test.txt"),
    variants=_EURLEX_VARIANTS))
register_dataset(DatasetSpec(
    name="wiki10-31k", folder="wiki10-31k", description="Wiki10-31K, user-supplied", A=0.5, B=0.4,
    N_train=14146, N_test=6616, D=101938, L=30938,
    train_files=("wiki10_train.txt", "train.txt"), test_files=("wiki10_test.txt", "test.txt"),
    variants=(PaperVariant("A", 0.1, 0.0, 1.0),)))
register_dataset(DatasetSpec(
    name="amazon-670k", folder="amazon-670k", description="Amazon-670K, user-supplied", A=0.6, B=2.6,
    N_train=490449, N_test=153025, D=135909, L=670091,
    train_files=("amazon_train.txt", "amazon670k_train.txt", "train.txt"),
    test_files=("amazon_test.txt", "amazon670k_test.txt", "test.txt"),
    variants=(PaperVariant("A", 0.2, 0.0, 2.0),)))
register_dataset(DatasetSpec(
    name="synthetic", folder="synthetic",
    description="generated: power-law labels, topic features (poxm_core.data.synthetic); sizes from the config",
    variants=_DEFAULT_VARIANTS, reader=_load_synthetic))



def write_example_data(folder: str | Path, seed: int = 0) -> list[Path]:
    """The files configs/examples/own-data.yaml reads, generated: an XC BoW pair (my_train.txt,
    my_test.txt) and one .npz with X and Y (my_all.npz). Returns the paths written."""
    import scipy.sparse as sp

    from poxm_core.data.svmlight_npz import save_xy_npz
    from poxm_core.data.synthetic import make_synthetic

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    data = make_synthetic(2000, 600, 500, 100, 3.0, seed)
    out = []
    for split, name in ((data.train, "my_train.txt"), (data.test, "my_test.txt")):
        X, Y = split.X, split.Y
        lines = [f"{X.shape[0]} {X.shape[1]} {Y.shape[1]}"]
        for i in range(X.shape[0]):
            x = X.getrow(i)
            labs = ",".join(str(j) for j in Y.getrow(i).indices)
            lines.append(f"{labs} " + " ".join(f"{j}:{v:.6g}" for j, v in zip(x.indices, x.data)))
        (folder / name).write_text("\n".join(lines) + "\n")
        out.append(folder / name)
    save_xy_npz(folder / "my_all.npz", sp.vstack([data.train.X, data.test.X]).tocsr(),
                sp.vstack([data.train.Y, data.test.Y]).tocsr())
    out.append(folder / "my_all.npz")
    return out
