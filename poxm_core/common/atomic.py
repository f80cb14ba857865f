"""Atomic writes: the one place where poxm publishes a file or a directory (os.replace).

A writer builds its output under a temporary name in the target's own directory (same file system, so the
rename is atomic), then `publish`es it: a reader sees the old content or the new, never a partial file, and
a writer killed half-way leaves only a temporary name behind (`.NAME.tmp-PID` for files; directory writers
choose their own, which their clean-up code recognises).

- `write_text(path, text)`: a whole text file (JSON, YAML, CSV, Markdown).
- `atomic_file(path)`: a context manager yielding the temporary path, for writers that need a file name
  (`df.to_csv(tmp)`, `torch.save(obj, tmp)`, `fig.savefig(tmp)`); published when the block succeeds,
  removed when it raises.
- `publish(tmp, final)`: rename a finished temporary file or directory onto its final name (directory
  writers assemble `tmp` themselves: checkpoints, the prepare cache).
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["publish", "atomic_file", "write_text", "tmp_name"]


def publish(tmp: str | os.PathLike, final: str | os.PathLike) -> None:
    """Rename `tmp` onto `final` in one step (POSIX rename: atomic within a file system; an existing file
    `final` is replaced, an existing non-empty directory is an OSError the caller handles)."""
    os.replace(tmp, final)


def tmp_name(path: str | os.PathLike) -> Path:
    """The temporary name beside `path` that this process writes: `.NAME.tmp-PID`."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield the temporary path beside `path` (its folder created); publish it as `path` when the block
    succeeds; remove it and leave `path` untouched when the block raises. An OSError that names no file
    (a write that hit a full disk or a file-size limit) is given `path` as its file, so that it can be
    reported in one line naming what was being written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(path)
    try:
        yield tmp
        publish(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(path)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` atomically (never a partial file)."""
    with atomic_file(path) as tmp:
        tmp.write_text(text)
