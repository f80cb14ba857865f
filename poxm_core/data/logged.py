"""Real logged feedback (docs/data.md, "Logged feedback"): a table of shown actions, one row each.

A row is one action shown to a user: its context x (user features), the action a, its 0-based
position k in the slate, the reward r and the logging propensity p = rho(a at k | x) of the policy
that logged it. The logging policy is the log itself: nothing is trained to stand for it.

Two readers, one container:

- `read_obd(path, policy, campaign)`: the Open Bandit Dataset layout (`<policy>/<campaign>/<campaign>.csv`
  and `item_context.csv`), read straight from obp's source archive (`.tar.gz`) or from a folder.
- `read_logged_table(path, columns)`: a CSV or Parquet table whose column names `LoggedColumns` maps.

Support checks (`check_table`), each a one-line `PoxmInputError` naming the file, the row and the
column: every required column present; every context value present; the action an integer in the
action set [0, n_actions); the position an integer within the slate; the propensity in (0, 1];
the reward finite. Rows count from 1 after the header; for a CSV the line is given too.

Context encoding: numeric columns are features as they are; categorical columns (hashed ids, strings)
are one-hot, one feature per (column, value) in sorted order. The result is CSR float32 like every
feature matrix of the project.
"""
from __future__ import annotations

import dataclasses
import io
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from poxm_core.common.errors import PoxmInputError

__all__ = ["LoggedColumns", "LoggedFeedback", "OBD_POLICIES", "OBD_CAMPAIGNS", "check_table", "encode_context",
           "read_obd", "read_logged_table", "find_obd_source", "align_context", "read_logged", "logged_files"]

OBD_POLICIES = ("random", "bts")
OBD_CAMPAIGNS = ("all", "men", "women")


@dataclass(frozen=True)
class LoggedColumns:
    """Which column of a logged table holds what (the config's mapping)."""
    action: str = "action"            # integer action id in [0, n_actions)
    position: str = "position"        # slot in the slate, counted from `position_base`
    reward: str = "reward"            # finite number (a click: 0/1)
    propensity: str = "propensity"    # the logging policy's probability of that action at that position, in (0, 1]
    context: tuple[str, ...] = ()     # numeric context columns (used as they are)
    categorical: tuple[str, ...] = ()  # categorical context columns (one-hot)
    position_base: int = 1            # the value of the first slot (OBD: 1)
    slate_size: int | None = None     # slots per slate; None: the largest position seen
    n_actions: int | None = None      # size of the action set; None: from the action features, else max id + 1

    def __post_init__(self) -> None:
        for name in ("action", "position", "reward", "propensity"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise PoxmInputError(f"columns.{name}: expected a column name, got {getattr(self, name)!r}")
        object.__setattr__(self, "context", tuple(self.context))
        object.__setattr__(self, "categorical", tuple(self.categorical))
        if not self.context and not self.categorical:
            raise PoxmInputError("columns.context: expected at least one context column (numeric or categorical)")
        for name in ("slate_size", "n_actions"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
                raise PoxmInputError(f"columns.{name}: expected a positive int, got {v!r}")
        if self.position_base not in (0, 1):
            raise PoxmInputError(f"columns.position_base: expected 0 or 1, got {self.position_base!r}")

    def required(self) -> tuple[str, ...]:
        return (self.action, self.position, self.reward, self.propensity) + self.context + self.categorical


@dataclass(frozen=True)
class LoggedFeedback:
    """A validated log of shown actions: n rows, each (x_i, a_i, k_i, r_i, p_i).

    context (n, D) CSR float32; action, position (n,) int64 with 0 <= a < n_actions, 0 <= k < slate_size;
    reward (n,) float64 finite; propensity (n,) float64 in (0, 1]; action_features (n_actions, F) or None.
    """
    source: str
    context: sp.csr_matrix
    action: np.ndarray
    position: np.ndarray
    reward: np.ndarray
    propensity: np.ndarray
    n_actions: int
    slate_size: int
    feature_names: tuple[str, ...] = ()
    action_features: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        n = self.context.shape[0]
        for name in ("action", "position", "reward", "propensity"):
            a = getattr(self, name)
            if not isinstance(a, np.ndarray) or a.shape != (n,):
                raise ValueError(f"{self.source}: {name}: expected an ({n},) array like the context, "
                                 f"got {getattr(a, 'shape', type(a).__name__)}")
        if n < 1:
            raise ValueError(f"{self.source}: expected at least one row, got 0")
        if self.action.min() < 0 or self.action.max() >= self.n_actions:
            raise ValueError(f"{self.source}: action: expected ids in [0, {self.n_actions}), "
                             f"got [{self.action.min()}, {self.action.max()}]")
        if self.position.min() < 0 or self.position.max() >= self.slate_size:
            raise ValueError(f"{self.source}: position: expected 0-based slots in [0, {self.slate_size}), "
                             f"got [{self.position.min()}, {self.position.max()}]")
        if not (np.all(self.propensity > 0) and np.all(self.propensity <= 1)):
            raise ValueError(f"{self.source}: propensity: expected values in (0, 1]")
        if not np.all(np.isfinite(self.reward)):
            raise ValueError(f"{self.source}: reward: expected finite values")
        if self.action_features is not None and self.action_features.shape[0] != self.n_actions:
            raise ValueError(f"{self.source}: action_features: expected {self.n_actions} rows, "
                             f"got {self.action_features.shape[0]}")

    @property
    def n(self) -> int:
        return int(self.context.shape[0])

    def on_policy_value(self) -> tuple[float, float]:
        """The logging policy's own value per shown action: (mean reward, its standard error)."""
        r = self.reward
        return float(r.mean()), float(r.std(ddof=1) / np.sqrt(r.size)) if r.size > 1 else float("nan")


# ---- checks ---------------------------------------------------------------------------------------

def _where(file: str, i: int, col: str, csv: bool) -> str:
    line = f" (line {i + 2})" if csv else ""
    return f"{file}: row {i + 1}{line}, column '{col}'"


def _shown(v) -> str:
    """A cell as the file showed it: 0.0, 'x' (not np.float64(0.0))."""
    return repr(v.item() if isinstance(v, np.generic) else v)


def _first(bad: np.ndarray) -> int | None:
    idx = np.flatnonzero(bad)
    return int(idx[0]) if idx.size else None


def _numeric(df: pd.DataFrame, col: str, file: str, csv: bool, what: str) -> np.ndarray:
    """The column as float64; a value that is not a number is an error at its row."""
    v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64)
    i = _first(~np.isfinite(v))
    if i is not None:
        raise PoxmInputError(f"{_where(file, i, col, csv)}: expected {what}, got {_shown(df[col].iloc[i])}")
    return v


def _integers(df: pd.DataFrame, col: str, file: str, csv: bool, what: str) -> np.ndarray:
    v = _numeric(df, col, file, csv, what)
    i = _first(v != np.round(v))
    if i is not None:
        raise PoxmInputError(f"{_where(file, i, col, csv)}: expected {what}, got {_shown(df[col].iloc[i])}")
    return v.astype(np.int64)


def check_table(df: pd.DataFrame, cols: LoggedColumns, file: str, *, n_actions: int | None = None,
                csv: bool = True) -> dict[str, np.ndarray | int]:
    """The support checks of a logged table; returns action, position (0-based), reward, propensity,
    n_actions, slate_size. The first violation raises one line naming the file, the row and the column."""
    missing = [c for c in cols.required() if c not in df.columns]
    if missing:
        have = ", ".join(map(str, df.columns[:8])) + (", ..." if len(df.columns) > 8 else "")
        raise PoxmInputError(f"{file}: header{' (line 1)' if csv else ''}, column '{missing[0]}': required column "
                             f"missing (columns: {have})")
    if len(df) == 0:
        raise PoxmInputError(f"{file}: expected at least one row, got none")
    for c in cols.context + cols.categorical:
        present = df[c].notna().to_numpy() & (df[c].astype(str).str.strip() != "").to_numpy()
        i = _first(~present)
        if i is not None:
            raise PoxmInputError(f"{_where(file, i, c, csv)}: expected a context value, got nothing")
    for c in cols.context:
        _numeric(df, c, file, csv, "a number (numeric context column; declare it categorical otherwise)")

    n_actions = n_actions or cols.n_actions
    action = _integers(df, cols.action, file, csv, "an integer action id")
    if n_actions is None:
        n_actions = int(action.max()) + 1 if action.size else 0
    i = _first((action < 0) | (action >= n_actions))
    if i is not None:
        raise PoxmInputError(f"{_where(file, i, cols.action, csv)}: expected an action of the action set "
                             f"[0, {n_actions}), got {action[i]}")

    base = cols.position_base
    position = _integers(df, cols.position, file, csv, "an integer position")
    slate = cols.slate_size or max(int(position.max()) - base + 1, 1)
    i = _first((position < base) | (position >= base + slate))
    if i is not None:
        raise PoxmInputError(f"{_where(file, i, cols.position, csv)}: expected a position within the slate "
                             f"[{base}, {base + slate - 1}], got {position[i]}")

    prop = _numeric(df, cols.propensity, file, csv, "a propensity in (0, 1]")
    i = _first((prop <= 0) | (prop > 1))
    if i is not None:
        raise PoxmInputError(f"{_where(file, i, cols.propensity, csv)}: expected a propensity in (0, 1], "
                             f"got {_shown(df[cols.propensity].iloc[i])}")
    reward = _numeric(df, cols.reward, file, csv, "a finite reward")
    return {"action": action, "position": position - base, "reward": reward, "propensity": prop,
            "n_actions": int(n_actions), "slate_size": int(slate)}


def encode_context(df: pd.DataFrame, numeric: tuple[str, ...], categorical: tuple[str, ...]
                   ) -> tuple[sp.csr_matrix, tuple[str, ...]]:
    """Numeric columns as they are, then one feature per (categorical column, value), values sorted:
    CSR float32 (n, D) and the D feature names ('col' or 'col=value')."""
    blocks, names = [], []
    if numeric:
        blocks.append(sp.csr_matrix(df[list(numeric)].to_numpy(dtype=np.float32)))
        names += list(numeric)
    n = len(df)
    for c in categorical:
        values = df[c].astype(str).to_numpy()
        vocab, code = np.unique(values, return_inverse=True)
        blocks.append(sp.csr_matrix((np.ones(n, np.float32), (np.arange(n), code)), shape=(n, vocab.size)))
        names += [f"{c}={v}" for v in vocab]
    X = sp.hstack(blocks, format="csr", dtype=np.float32) if blocks else sp.csr_matrix((n, 0), dtype=np.float32)
    X.eliminate_zeros()
    return X, tuple(names)


def _action_features(df: pd.DataFrame, id_col: str, file: str, csv: bool) -> np.ndarray:
    """(n_actions, F) float32 from a table with one row per action id 0..n_actions-1: numeric columns as
    they are, the other columns one-hot."""
    if id_col not in df.columns:
        raise PoxmInputError(f"{file}: header, column '{id_col}': required column missing")
    ids = _integers(df, id_col, file, csv, "an integer action id")
    order = np.argsort(ids, kind="stable")
    i = _first(ids[order] != np.arange(ids.size))
    if i is not None:
        raise PoxmInputError(f"{_where(file, int(order[i]), id_col, csv)}: expected action ids 0..{ids.size - 1} "
                             f"each once, got {ids[order[i]]}")
    feats = [c for c in df.columns if c != id_col and not str(c).startswith("Unnamed")]
    numeric = tuple(c for c in feats if pd.api.types.is_numeric_dtype(df[c]))
    categorical = tuple(c for c in feats if c not in numeric)
    X, _ = encode_context(df.iloc[order], numeric, categorical)
    return X.toarray()


# ---- readers --------------------------------------------------------------------------------------

def _read_frame(data: bytes | Path, name: str) -> pd.DataFrame:
    src = io.BytesIO(data) if isinstance(data, bytes) else data
    if name.endswith(".parquet"):
        return pd.read_parquet(src)
    try:
        return pd.read_csv(src, low_memory=False)
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise PoxmInputError(f"{name}: not a readable CSV table ({str(e).splitlines()[0]})") from None


def read_logged_table(path, columns: LoggedColumns, *, action_features=None,
                      action_id_column: str = "action") -> LoggedFeedback:
    """A CSV or Parquet log whose columns `columns` maps; optional action features (CSV/Parquet, one row
    per action id, column `action_id_column`), which also fix the size of the action set."""
    path = Path(path)
    if not path.is_file():
        raise PoxmInputError(f"{path}: logged table not found")
    csv = path.suffix != ".parquet"
    df = _read_frame(path, str(path))
    feats, n_actions = None, columns.n_actions
    if action_features is not None:
        fpath = Path(action_features)
        if not fpath.is_file():
            raise PoxmInputError(f"{fpath}: action features table not found")
        feats = _action_features(_read_frame(fpath, str(fpath)), action_id_column, str(fpath), fpath.suffix != ".parquet")
        if n_actions is not None and n_actions != feats.shape[0]:
            raise PoxmInputError(f"{fpath}: expected {n_actions} actions (columns.n_actions), got {feats.shape[0]}")
        n_actions = feats.shape[0]
    return _build(df, columns, str(path), csv, n_actions, feats)


def _build(df, columns, file, csv, n_actions, feats) -> LoggedFeedback:
    c = check_table(df, columns, file, n_actions=n_actions, csv=csv)
    X, names = encode_context(df, columns.context, columns.categorical)
    return LoggedFeedback(source=file, context=X, action=c["action"], position=c["position"], reward=c["reward"],
                          propensity=c["propensity"], n_actions=c["n_actions"], slate_size=c["slate_size"],
                          feature_names=names, action_features=feats)


def find_obd_source(path) -> Path:
    """The OBD source under `path`: the path itself if it is an archive or holds `random/` and `bts/`;
    else the newest `original/obp-*.tar.gz` below it (the data root's `obd/` folder)."""
    path = Path(path)
    if path.is_file() or (path / "random").is_dir():
        return path
    found = sorted(path.glob("original/obp-*.tar.gz")) + sorted(path.glob("obp-*.tar.gz"))
    if not found:
        raise PoxmInputError(f"{path}: no Open Bandit Dataset here (expected random/ and bts/ folders "
                             f"or original/obp-*.tar.gz)")
    return found[-1]


def _obd_member(tar: tarfile.TarFile, archive: Path, rel: str) -> tuple[bytes, str]:
    for m in tar.getmembers():
        if m.isfile() and m.name.endswith("/obd/" + rel):
            return tar.extractfile(m).read(), f"{archive.name}:{m.name}"
    raise PoxmInputError(f"{archive}: no member */obd/{rel} in the archive")


def obd_columns(df: pd.DataFrame, n_actions: int) -> LoggedColumns:
    """OBD's mapping: item_id, position (1-3), click, propensity_score; user_feature_* categorical,
    user-item_affinity_* numeric."""
    return LoggedColumns(action="item_id", position="position", reward="click", propensity="propensity_score",
                         context=tuple(c for c in df.columns if str(c).startswith("user-item_affinity_")),
                         categorical=tuple(c for c in df.columns if str(c).startswith("user_feature_")),
                         position_base=1, slate_size=3, n_actions=n_actions)


def read_obd(path, policy: str, campaign: str) -> LoggedFeedback:
    """The log of `policy` ('random' or 'bts') in `campaign` ('all', 'men', 'women') of the Open Bandit
    Dataset at `path` (obp's source archive, a folder holding it, or a folder with the
    `<policy>/<campaign>/` layout). Rows in file order; the action set is item_context.csv's items."""
    if policy not in OBD_POLICIES:
        raise PoxmInputError(f"policy: expected one of {', '.join(OBD_POLICIES)}, got {policy!r}")
    if campaign not in OBD_CAMPAIGNS:
        raise PoxmInputError(f"campaign: expected one of {', '.join(OBD_CAMPAIGNS)}, got {campaign!r}")
    src = find_obd_source(path)
    rel_log, rel_items = f"{policy}/{campaign}/{campaign}.csv", f"{policy}/{campaign}/item_context.csv"
    if src.is_file():
        try:
            with tarfile.open(src, "r:*") as tar:
                (log_bytes, log_name), (item_bytes, item_name) = (_obd_member(tar, src, rel_log),
                                                                  _obd_member(tar, src, rel_items))
        except tarfile.TarError as e:
            raise PoxmInputError(f"{src}: not a readable tar archive ({e})") from None
        df, items = _read_frame(log_bytes, log_name), _read_frame(item_bytes, item_name)
    else:
        log_name, item_name = str(src / rel_log), str(src / rel_items)
        for f in (log_name, item_name):
            if not Path(f).is_file():
                raise PoxmInputError(f"{f}: file not found")
        df, items = _read_frame(Path(log_name), log_name), _read_frame(Path(item_name), item_name)
    feats = _action_features(items, "item_id", item_name, True)
    return _build(df, obd_columns(df, feats.shape[0]), log_name, True, feats.shape[0], feats)


# ---- a config's logged dataset ---------------------------------------------------------------------

def align_context(a: LoggedFeedback, b: LoggedFeedback) -> tuple[LoggedFeedback, LoggedFeedback]:
    """Both logs' contexts over one feature space: a's features in a's order, then b's features a lacks
    (a categorical value one log never shows, e.g. OBD's TS log holds hashed user ids the random one does
    not). A learned policy reads the same column for the same feature in either log."""
    if a.feature_names == b.feature_names:
        return a, b
    index = {n: i for i, n in enumerate(a.feature_names)}
    names = list(a.feature_names) + [n for n in b.feature_names if n not in index]
    index = {n: i for i, n in enumerate(names)}

    def widen(log: LoggedFeedback) -> LoggedFeedback:
        X = log.context.tocoo()
        cols = np.array([index[n] for n in log.feature_names], dtype=np.int64)[X.col]
        W = sp.csr_matrix((X.data, (X.row, cols)), shape=(log.n, len(names)), dtype=np.float32)
        return dataclasses.replace(log, context=W, feature_names=tuple(names))
    return widen(a), widen(b)


def logged_files(lcfg, data_root: Path) -> list[Path]:
    """The files a config's logged dataset (`LoggedConfig`) reads: what its cache key hashes."""
    def where(p: str | None, default: Path) -> Path:
        if p is None:
            return default
        q = Path(p).expanduser()
        return q if q.is_absolute() else Path(data_root) / q
    if lcfg.source == "obd":
        src = find_obd_source(where(lcfg.path, Path(data_root) / "obd"))
        return [src] if src.is_file() else sorted(f for f in src.rglob("*.csv"))
    files = [where(lcfg.path, Path(data_root))]
    files += [where(x, Path(data_root)) for x in (lcfg.action_features, lcfg.target) if x is not None]
    for f in files:
        if not f.is_file():
            raise PoxmInputError(f"{f}: logged table not found (datasets.<i>.logged; relative paths are under the data "
                                 f"root {data_root})")
    return files


def read_logged(lcfg, data_root: Path) -> tuple[LoggedFeedback, LoggedFeedback | None]:
    """(the log to learn from, the target log or None) of a config's logged dataset (`LoggedConfig`), both
    over one context feature space (`align_context`). OBD: `policy` and its `target` (by default the other
    policy) in one campaign; a table: `path` and, when given, `target`, read with the same column map."""
    root = Path(data_root)
    if lcfg.source == "obd":
        src = Path(lcfg.path).expanduser() if lcfg.path else root / "obd"
        src = src if src.is_absolute() else root / src
        campaign = lcfg.campaign or "all"
        log = read_obd(src, lcfg.obd_policy, campaign)
        target = read_obd(src, lcfg.obd_target, campaign) if lcfg.obd_target is not None else None
    else:
        files = logged_files(lcfg, root)
        c = lcfg.columns
        cols = LoggedColumns(action=c.action, position=c.position, reward=c.reward, propensity=c.propensity,
                             context=tuple(c.context), categorical=tuple(c.categorical), position_base=c.position_base,
                             slate_size=c.slate_size, n_actions=c.n_actions)
        feats = files[1] if lcfg.action_features is not None else None
        log = read_logged_table(files[0], cols, action_features=feats)
        target = None
        if lcfg.target is not None:
            target = read_logged_table(files[-1], dataclasses.replace(cols, n_actions=log.n_actions,
                                                                      slate_size=log.slate_size),
                                       action_features=feats)
    if target is not None:
        if (target.n_actions, target.slate_size) != (log.n_actions, log.slate_size):
            raise PoxmInputError(f"{target.source}: expected the action set and slate of {log.source} "
                                 f"({log.n_actions} actions, {log.slate_size} slots), got {target.n_actions}, "
                                 f"{target.slate_size}")
        log, target = align_context(log, target)
    return log, target
