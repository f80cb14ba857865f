"""A config's logged dataset (`LoggedConfig`, docs/data.md "Logged feedback"): the files it reads (what
its prepare cache key hashes) and its logs, read by the reader its source names (the Open Bandit
Dataset: poxm_core.data.obd; a CSV or Parquet table: poxm_core.data.logged) over one context feature
space."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from poxm_core.common.errors import PoxmInputError
from poxm_core.data.logged import LoggedColumns, LoggedFeedback, align_context, read_logged_table
from poxm_core.data.obd import find_obd_source, read_obd

__all__ = ["logged_files", "read_logged"]


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
