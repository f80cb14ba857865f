"""Where Ray Tune and Ray Train keep a local sweep's state: outside the run directory.

Ray's state is pickles (Tune's `tuner.pkl`, the trials in its experiment state, pickled errors), and
unpickling runs code. A run directory is something people copy and send, so a resumed run directory
must not make poxm unpickle anything it holds. For a sweep on local storage, Ray's state therefore
lives in this user's own state folder, `$POXM_STATE_DIR` (default `$XDG_STATE_HOME/poxm`, else
`~/.local/state/poxm`), under `ray/<run id>-<key>`, where the key is a random token stored in the
run directory's sweep.json when the sweep is first planned:

- resuming one's own sweep finds that folder and continues Ray's experiment (`Tuner.restore`);
- resuming a run directory that came from elsewhere finds no folder of its key (or only one this user
  wrote), starts a fresh Tune experiment and continues each unfinished trial from the checkpoints in
  its own folder (loaded with `torch.load(weights_only=True)`, which runs no code);
- a run directory that holds a `ray/` folder of its own (planted, or from an older poxm that kept
  Ray's state there) is refused before anything runs: poxm never loads it.

A sweep with `resources.storage_path` (a cluster) keeps Ray's state on that storage, which every node
reads and which the user configured: trusted as the user's own (docs/orchestration.md).
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

from orchestration.rundir import RunDir
from poxm_core.common.errors import PoxmInputError


def state_root() -> Path:
    """This user's poxm state folder: $POXM_STATE_DIR, else $XDG_STATE_HOME/poxm, else ~/.local/state/poxm."""
    if os.environ.get("POXM_STATE_DIR"):
        return Path(os.environ["POXM_STATE_DIR"]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base).expanduser() / "poxm"


def new_state_key() -> str:
    return secrets.token_hex(8)


def ray_state_dir(rd: RunDir) -> Path:
    """The folder of Ray's state for this run directory (its sweep.json names the key)."""
    key = (rd.read_sweep() or {}).get("state_key")
    if not key or not str(key).isalnum():
        raise PoxmInputError(f"{rd.sweep}: no valid 'state_key' (a run directory planned by an older poxm: "
                             "run its config again with `poxm run`)")
    return state_root() / "ray" / f"{rd.root.name}-{key}"


def refuse_ray_state_inside(rd: RunDir) -> None:
    """Refuse a run directory that holds Ray state of its own (ray/): poxm does not load it."""
    inside = rd.root / "ray"
    if inside.exists() and (not inside.is_dir() or any(inside.iterdir())):
        raise PoxmInputError(f"{inside}: this run directory holds Ray state (pickles), which poxm does not load "
                             "from a run directory; remove that folder to continue from the trials' own "
                             "checkpoints")
