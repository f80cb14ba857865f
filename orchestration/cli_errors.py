"""Errors of a `poxm` command that are the user's or their machine's (a path, a full disk, a file-size
limit, SQLite failing under MLflow): one line naming the file, never a traceback (orchestration.cli)."""
from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

# OS errors that come from what the user gave (paths, names) or from their machine (disk space, a file-size
# limit, a failing disk): one line naming the path (poxm_core.common.atomic names the file a write was for)
USER_OS_ERRORS = {errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.ENOSPC, errno.EACCES, errno.EROFS,
                   errno.EEXIST, errno.EFBIG, errno.EDQUOT, errno.EIO}
STORAGE_HINTS = {
    errno.ENOSPC: " (free some space, then `poxm resume RUN_DIR` continues)",
    errno.EDQUOT: " (free some space or raise the quota, then `poxm resume RUN_DIR` continues)",
    errno.EFBIG: " (a file-size limit, `ulimit -f`, stopped the write; raise it, then run the command again)",
    errno.EIO: " (the disk or file system failed a write; check it, then run the command again)",
}
# SQLite's storage errors (what it says when a write fails: a full disk, a file-size limit, a failing disk)
_SQLITE_STORAGE = ("disk i/o error", "database or disk is full")
_STORE = {"path": None}      # the SQLite file of the MLflow store this command uses, once known


def note_store(uri: str | None, run_root: Path | None = None) -> None:
    """Remember the SQLite file behind the tracking URI a command uses, to name it if SQLite fails."""
    if not uri:
        return
    uri = str(uri)
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
        _STORE["path"] = str(path if path.is_absolute() or run_root is None else Path(run_root) / path)


def storage_error_line(exc: BaseException) -> str | None:
    """One line for a storage failure found anywhere in `exc`'s chain (MLflow wraps SQLAlchemy, which wraps
    sqlite3): an OSError of STORAGE_HINTS with its file, or SQLite's own error with the store's file. None
    when the chain holds no storage failure."""
    import sqlite3
    seen, todo = set(), [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in STORAGE_HINTS:
            where = f"{e.filename}: " if e.filename else ""
            return f"{where}{e.strerror or e}{STORAGE_HINTS[e.errno]}"
        if isinstance(e, sqlite3.OperationalError) and str(e).lower().startswith(_SQLITE_STORAGE):
            where = _STORE["path"] or "the MLflow store"
            return (f"{where}: SQLite: {str(e).splitlines()[0]} (a write failed: a full or failing disk, or a "
                    "file-size limit, `ulimit -f`; fix it, then run the command again)")
        todo += [e.__cause__, e.__context__, getattr(e, "orig", None)]
    return None


def silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
