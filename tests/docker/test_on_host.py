"""The image test's host-side steps (tests/docker/on_host.py) on hand-made run directories and sockets."""
from __future__ import annotations

import json
import socket

from tests.docker import on_host


def _trial(runs, name, state, epoch, done=False, tries=1):
    d = runs / "quickstart-abc" / "trials" / name
    d.mkdir(parents=True)
    (d / "state.json").write_text(json.dumps({"state": state, "epoch": epoch, "tries": tries}))
    if done:
        (d / "done.json").write_text(json.dumps({"tries": tries}))


def test_training_now_counts_trials_between_their_first_and_last_epoch(tmp_path):
    _trial(tmp_path, "a", "running", 1)                 # mid-training: counts
    _trial(tmp_path, "b", "running", 0)                 # not trained an epoch yet
    _trial(tmp_path, "c", "running", 2)                 # at its last epoch (of 2): evaluating
    _trial(tmp_path, "d", "running", 1, done=True)      # finished: its state stays 'running'
    _trial(tmp_path, "e", "pending", 1)
    assert on_host.training_now(tmp_path, 2) == 1
    assert on_host.training_now(tmp_path, 3) == 2       # with 3 epochs, c is mid-training too


def test_max_tries_reads_the_finished_trials(tmp_path):
    assert on_host.max_tries(tmp_path / "quickstart-abc") == 0
    _trial(tmp_path, "a", "running", 2, done=True, tries=1)
    _trial(tmp_path, "b", "running", 2, done=True, tries=3)
    assert on_host.max_tries(tmp_path / "quickstart-abc") == 3


def test_free_ports_are_distinct_and_free():
    ports = on_host.free_ports(4)
    assert len(set(ports)) == 4
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))
