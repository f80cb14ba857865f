"""Real logged feedback (docs/data.md, "Logged feedback"): a table of shown actions, one row each.

A row is one action shown to a user: its context x (user features), the action a, its 0-based
position k in the slate, the reward r and the logging propensity p = rho(a at k | x) of the policy
that logged it. The logging policy is the log itself: nothing is trained to stand for it.

Two readers, one container:

- `read_obd(path, policy, campaign)` (poxm_core.data.obd, built on this module): the Open Bandit
  Dataset layout (`<policy>/<campaign>/<campaign>.csv` and `item_context.csv`), read straight from obp's
  source archive (`.tar.gz`, within bounds on member and total size) or from a folder.
- `read_logged_table(path, columns)`: a CSV or Parquet table whose column names `LoggedColumns` maps.

A config's logged dataset (which files it reads, its logs through the right reader) is
poxm_core.data.logged_dataset, above both readers.

Support checks (`check_table`, poxm_core.data.logged_checks), each a one-line `PoxmInputError` naming
the file, the row and the column: every required column present; every context value present; the
action an integer in the action set [0, n_actions); the position an integer within the slate; the
propensity in [1e-6, 1]; the reward finite; at most MAX_ROWS rows. Rows count from 1 after the header;
for a CSV the line is given too. A table that is not readable CSV or Parquet is one line naming it.

Context encoding: numeric columns are features as they are; categorical columns (hashed ids, strings)
are one-hot, one feature per (column, value) in sorted order. The result is CSR float32 like every
feature matrix of the project.
"""
from __future__ import annotations

import dataclasses
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from poxm_core.common.errors import PoxmInputError
from poxm_core.data.logged_checks import (  # noqa: F401 -- the support checks, importable from here as before
    MAX_ACTIONS, MAX_ROWS, MAX_SLATE, PROPENSITY_MIN, _first, _integers, _where, check_table)

__all__ = ["LoggedColumns", "LoggedFeedback", "check_table", "encode_context", "read_logged_table", "align_context"]

@dataclass(frozen=True)
class LoggedColumns:
    """Which column of a logged table holds what (the config's mapping)."""
    action: str = "action"            # integer action id in [0, n_actions)
    position: str = "position"        # slot in the slate, counted from `position_base`
    reward: str = "reward"            # finite number (a click: 0/1)
    propensity: str = "propensity"    # the logging policy's probability of that action at that position, in [1e-6, 1]
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


def action_features_matrix(df: pd.DataFrame, id_col: str, file: str, csv: bool) -> np.ndarray:
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

def read_frame(data: bytes | Path, name: str) -> pd.DataFrame:
    """A CSV or Parquet table, at most MAX_ROWS + 1 rows of it (check_table names a longer one); a file
    that is not a readable table is one line naming it."""
    src = io.BytesIO(data) if isinstance(data, bytes) else data
    if name.endswith(".parquet"):
        try:
            return pd.read_parquet(src)
        except Exception as e:      # noqa: BLE001 -- pyarrow's errors (ArrowInvalid, OSError, ...) have no common base
            first = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            raise PoxmInputError(f"{name}: not a readable Parquet table ({first})") from None
    try:
        return pd.read_csv(src, low_memory=False, nrows=MAX_ROWS + 1)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise PoxmInputError(f"{name}: not a readable CSV table ({str(e).splitlines()[0]})") from None


def read_logged_table(path, columns: LoggedColumns, *, action_features=None,
                      action_id_column: str = "action") -> LoggedFeedback:
    """A CSV or Parquet log whose columns `columns` maps; optional action features (CSV/Parquet, one row
    per action id, column `action_id_column`), which also fix the size of the action set."""
    path = Path(path)
    if not path.is_file():
        raise PoxmInputError(f"{path}: logged table not found")
    csv = path.suffix != ".parquet"
    df = read_frame(path, str(path))
    feats, n_actions = None, columns.n_actions
    if action_features is not None:
        fpath = Path(action_features)
        if not fpath.is_file():
            raise PoxmInputError(f"{fpath}: action features table not found")
        feats = action_features_matrix(read_frame(fpath, str(fpath)), action_id_column, str(fpath), fpath.suffix != ".parquet")
        if n_actions is not None and n_actions != feats.shape[0]:
            raise PoxmInputError(f"{fpath}: expected {n_actions} actions (columns.n_actions), got {feats.shape[0]}")
        n_actions = feats.shape[0]
    return build_feedback(df, columns, str(path), csv, n_actions, feats)


def build_feedback(df, columns, file, csv, n_actions, feats) -> LoggedFeedback:
    c = check_table(df, columns, file, n_actions=n_actions, csv=csv)
    X, names = encode_context(df, columns.context, columns.categorical)
    return LoggedFeedback(source=file, context=X, action=c["action"], position=c["position"], reward=c["reward"],
                          propensity=c["propensity"], n_actions=c["n_actions"], slate_size=c["slate_size"],
                          feature_names=names, action_features=feats)


# ---- two logs over one feature space ---------------------------------------------------------------

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
