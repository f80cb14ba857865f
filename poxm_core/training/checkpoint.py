"""Trial checkpoints: out_dir/checkpoints/epoch_XXXX/{state.pt, meta.json}, written atomically.

state.pt holds, for every trained head (key 'poxm/p=10/lam=0.9'), W, b and the RowAdam state
(step count, first and second moments), plus the epoch, the result rows written so far and the
trial identity (spec and the hash of the settings that determine the results). The random state is
not stored because there is none to store: every generator of epoch e is re-seeded from
(seed, e, head key) (docs/training.md), which is what makes a resumed trial identical to an
uninterrupted one. A checkpoint directory is assembled under a temporary name in the same folder
and renamed into place (poxm_core.common.atomic.publish), so a directory named epoch_XXXX is always complete; only the
`keep` most recent ones are kept.

Speed: state.pt is written without the zip records' CRC-32 (`torch.utils.serialization.config.save.
compute_crc32 = False` during the save, where this torch has the setting): computing it was most of
the time of writing a checkpoint, and a many-head trial writes tens of GB of weights and Adam moments
(docs/performance.md). torch.load reads such a file the same way; an incomplete
file still cannot appear under its final name (the atomic publish above).

Security: state.pt is read with `torch.load(weights_only=True)`, which unpickles only tensors, dicts,
lists, tuples, numbers, strings, booleans and None; nothing in a checkpoint can run code. `save_checkpoint`
converts NumPy arrays and scalars to tensors and Python numbers so what it writes loads that way; a file
that needs anything else (a crafted pickle with a `__reduce__` payload) is refused with one line.
"""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import shutil
from pathlib import Path

import torch

from poxm_core.common.atomic import publish
from poxm_core.common.errors import PoxmInputError

__all__ = ["save_checkpoint", "load_checkpoint", "latest_checkpoint", "on_host", "CKPT_RE"]

CKPT_RE = re.compile(r"^epoch_(\d{4,})$")


def save_checkpoint(out_dir: Path, epoch: int, state: dict, meta: dict, keep: int = 2) -> Path:
    """Write checkpoints/epoch_{epoch:04d} atomically; prune older ones beyond `keep`. Returns its path."""
    root = Path(out_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(root)
    final = root / f"epoch_{epoch:04d}"
    tmp = root / f".tmp-epoch_{epoch:04d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    with _no_crc():
        torch.save(plain_state(state), tmp / "state.pt")
    (tmp / "meta.json").write_text(json.dumps({**meta, "epoch": epoch}, indent=1, sort_keys=True))
    if final.exists():          # an earlier attempt reached this epoch: the new one replaces it
        shutil.rmtree(final)
    publish(tmp, final)
    done = sorted((p for p in root.iterdir() if CKPT_RE.match(p.name)), key=lambda p: int(CKPT_RE.match(p.name).group(1)))
    for old in done[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


@contextlib.contextmanager
def _no_crc():
    """torch.save without the zip CRC-32 (module doc), where the setting exists; restored afterwards."""
    try:
        from torch.utils.serialization import config
        save = config.save
        old = save.compute_crc32
    except (ImportError, AttributeError):
        yield
        return
    save.compute_crc32 = False
    try:
        yield
    finally:
        save.compute_crc32 = old


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def remove_stale_tmp(root: Path) -> None:
    """Remove `.tmp-epoch_XXXX-PID` folders of processes that are gone (a writer killed mid-checkpoint)."""
    for p in Path(root).glob(".tmp-epoch_*-*"):
        pid = p.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)


def _each_leaf(state, leaf):
    """`state` rebuilt with `leaf(x)` for every value that is not a dict, list or tuple."""
    if isinstance(state, dict):
        return {k: _each_leaf(v, leaf) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        out = [_each_leaf(v, leaf) for v in state]
        return out if isinstance(state, list) else tuple(out)
    return leaf(state)


def on_host(state):
    """`state` with every device tensor copied to the host (the rest as it is): a checkpoint that can be
    written on a thread while the device goes on (the trial's last one, beside the final evaluation)."""
    return _each_leaf(state, lambda x: x.cpu() if isinstance(x, torch.Tensor) and x.device.type != "cpu" else x)


def snapshot(state):
    """`state` with every tensor cloned where it lives and every NumPy array copied: this moment's values,
    kept while training goes on in place, for a checkpoint written an epoch later (training/overlap.py).
    A device tensor's clone is queued on its stream (no host synchronisation, unlike `on_host`)."""
    import numpy as np
    return _each_leaf(state, lambda x: x.clone() if isinstance(x, torch.Tensor)
                      else x.copy() if isinstance(x, np.ndarray) else x)


def plain_state(obj):
    """`obj` with NumPy arrays as tensors and NumPy scalars as Python numbers (recursively), so that
    `torch.load(weights_only=True)` reads it back; anything else that is not plain data is an error."""
    import numpy as np
    if isinstance(obj, np.generic):          # before float/int: np.float64 is a float subclass
        return obj.item()
    if isinstance(obj, torch.Tensor) or obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj))
    if isinstance(obj, dict):
        return {k: plain_state(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        out = [plain_state(v) for v in obj]
        return out if isinstance(obj, list) else tuple(out)
    raise TypeError(f"checkpoint state holds a {type(obj).__name__}: only tensors, dicts, lists, numbers "
                    "and strings can be saved (they must load with torch.load(weights_only=True))")


def latest_checkpoint(out_dir: Path) -> Path | None:
    """The complete checkpoint of the highest epoch under out_dir/checkpoints, or None."""
    root = Path(out_dir) / "checkpoints"
    if not root.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := CKPT_RE.match(p.name)) and (p / "state.pt").is_file()]
    return max(found)[1] if found else None


def load_checkpoint(path: Path, device: torch.device) -> dict:
    """The state dict of a checkpoint directory (tensors mapped to `device`)."""
    path = Path(path)
    f = path / "state.pt"
    if not f.is_file():
        raise PoxmInputError(f"{path}: not a trial checkpoint (expected {f.name} inside an epoch_XXXX folder)")
    try:
        return torch.load(f, map_location=device, weights_only=True)
    except pickle.UnpicklingError as exc:
        m = re.search(r"(?:unsupported GLOBAL|Unsupported global:)\s*(?:GLOBAL\s*)?([\w.]+)", str(exc), re.I)
        what = m.group(1) if m else ""
        raise PoxmInputError(f"{f}: refused: not a plain-tensor checkpoint"
                             + (f" (it asks to load {what})" if what else "")
                             + "; poxm loads only tensors and plain data, never code") from None
    except (RuntimeError, EOFError, ValueError, OSError) as exc:   # OSError: a truncated zip (Errno 22)
        raise PoxmInputError(f"{f}: not a readable checkpoint ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:200] if str(exc) else ''})") from None
