"""Bad input, table by table: every case gives one line `poxm: error: ...` naming the file and line,
the config key, or the argument; a non-zero exit; and leaves nothing behind (issue 10, items 4-5).

The CLI runs in-process (`orchestration.cli.main([...])`); nothing here starts Ray or an MLflow server
unless marked slow.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import yaml

from orchestration.cli import main

GOOD = {
    "name": "bad",
    "datasets": [{"name": "synthetic", "synthetic": {"n_train": 100, "n_test": 50, "n_features": 50, "n_labels": 20,
                                                     "mean_labels": 2},
                  "variants": [{"name": "A", "alpha": 0.5}]}],
    "model": {"epochs": 1, "dim": 8, "n_candidates": 10},
    "training": {"epochs": 1},
    "methods": {"logging": {}, "poxm": {"p": [5], "lam": [0.9]}},
}


def cli(capsys, *args) -> tuple[int, str, str]:
    """Run `poxm ARGS` in-process: (exit code, stdout, stderr)."""
    try:
        rc = main([str(a) for a in args])
    except SystemExit as exc:          # argparse --help/--version
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out = capsys.readouterr()
    return rc, out.out, out.err


def assert_one_line(rc: int, err: str, *needles: str) -> str:
    assert rc == 2, (rc, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("poxm: error: "), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def write(tmp_path: Path, data, name="c.yaml") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return p


# ------------------------------------------------------------------------------------- security

def test_crafted_checkpoint_is_refused_and_runs_no_code(tmp_path, capsys):
    import torch

    marker = tmp_path / "PWNED"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    out = tmp_path / "out"
    (out / "checkpoints" / "epoch_0001").mkdir(parents=True)
    torch.save({"epoch": 1, "heads": Payload()}, out / "checkpoints" / "epoch_0001" / "state.pt")
    cfg = write(tmp_path, GOOD)
    rc, _, err = cli(capsys, "train", cfg, f"runs_dir={tmp_path}/runs", "--out", out)
    assert_one_line(rc, err, "state.pt", "refused", "posix.system")
    assert not marker.exists()


def test_checkpoints_load_with_weights_only(tmp_path):
    import numpy as np
    import torch

    from poxm_core.training.checkpoint import load_checkpoint, save_checkpoint
    state = {"epoch": 1, "rows": [{"value": np.float64(0.5), "final": np.bool_(True)}],
             "heads": {"h": {"W": torch.ones(2), "m": np.zeros(3, np.float32)}}}
    path = save_checkpoint(tmp_path, 1, state, {})
    back = torch.load(path / "state.pt", weights_only=True)
    assert back["rows"][0] == {"value": 0.5, "final": True}
    assert isinstance(back["heads"]["h"]["m"], torch.Tensor)
    assert load_checkpoint(path, torch.device("cpu"))["epoch"] == 1
