"""The support checks of a logged table (poxm_core.data.logged), with the bounds every value is read
within. Each violation is one `PoxmInputError` naming the file, the row (and, for a CSV, its line) and
the column:

- every required column present, at least one row and at most MAX_ROWS;
- every context value present, numeric context columns numbers;
- the action an integer in [0, n_actions); without a declared action set, in [0, MAX_ACTIONS);
- the position an integer within the slate (at most MAX_SLATE slots when the slate size is not given);
- the propensity in [PROPENSITY_MIN, 1]: a smaller one would weigh its row by more than 1/PROPENSITY_MIN
  in every importance-weighted estimate and gradient (a propensity of 5e-324 made a trial diverge);
- the reward finite.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from poxm_core.common.errors import PoxmInputError

PROPENSITY_MIN = 1e-6            # the smallest propensity of the Open Bandit Dataset's logs (bts, women) is 1e-6
PROPENSITY_RANGE = f"a propensity in [{PROPENSITY_MIN:g}, 1]"
MAX_ACTIONS = 10_000_000         # an action set larger than this is declared (columns.n_actions), not inferred
MAX_SLATE = 1_000                # slots of a slate when columns.slate_size does not say
MAX_ROWS = 200_000_000           # rows of one logged table


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
    return np.clip(v, -2.0**62, 2.0**62).astype(np.int64)    # beyond int64: out of every range checked below


def check_table(df: pd.DataFrame, cols, file: str, *, n_actions: int | None = None,
                csv: bool = True) -> dict[str, np.ndarray | int]:
    """The support checks of a logged table; returns action, position (0-based), reward, propensity,
    n_actions, slate_size. The first violation raises one line naming the file, the row and the column."""
    if len(df) > MAX_ROWS:
        raise PoxmInputError(f"{file}: more than {MAX_ROWS} rows (the most poxm reads from one logged table)")
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
        i = _first((action < 0) | (action >= MAX_ACTIONS))
        if i is not None:
            raise PoxmInputError(f"{_where(file, i, cols.action, csv)}: expected an action id in [0, {MAX_ACTIONS}) "
                                 f"(at most {MAX_ACTIONS} actions), got {_shown(df[cols.action].iloc[i])}")
        n_actions = int(action.max()) + 1 if action.size else 0
    i = _first((action < 0) | (action >= n_actions))
    if i is not None:
        raise PoxmInputError(f"{_where(file, i, cols.action, csv)}: expected an action of the action set "
                             f"[0, {n_actions}), got {action[i]}")

    base = cols.position_base
    position = _integers(df, cols.position, file, csv, "an integer position")
    i = _first((position < base) | (position >= base + MAX_SLATE))
    if cols.slate_size is None and i is not None:
        raise PoxmInputError(f"{_where(file, i, cols.position, csv)}: expected a position in [{base}, "
                             f"{base + MAX_SLATE - 1}] (at most {MAX_SLATE} slots), got {_shown(df[cols.position].iloc[i])}")
    slate = cols.slate_size or max(int(position.max()) - base + 1, 1)
    i = _first((position < base) | (position >= base + slate))
    if i is not None:
        raise PoxmInputError(f"{_where(file, i, cols.position, csv)}: expected a position within the slate "
                             f"[{base}, {base + slate - 1}], got {position[i]}")

    prop = _numeric(df, cols.propensity, file, csv, PROPENSITY_RANGE)
    i = _first((prop < PROPENSITY_MIN) | (prop > 1))
    if i is not None:
        raise PoxmInputError(f"{_where(file, i, cols.propensity, csv)}: expected {PROPENSITY_RANGE}, "
                             f"got {_shown(df[cols.propensity].iloc[i])}")
    reward = _numeric(df, cols.reward, file, csv, "a finite reward")
    return {"action": action, "position": position - base, "reward": reward, "propensity": prop,
            "n_actions": int(n_actions), "slate_size": int(slate)}
