"""Loopback stays loopback: the tests' socket check, and which `--address` values poxm pins to 127.0.0.1."""
import subprocess

import pytest

import ray_cluster
from orchestration.cluster.ray_setup import is_loopback_address

SS = """\
LISTEN 0 128 127.0.0.1:6379 0.0.0.0:* users:(("gcs_server",pid=101,fd=7))
LISTEN 0 128 0.0.0.0:40001 0.0.0.0:* users:(("raylet",pid=102,fd=9))
ESTAB 0 0 127.0.0.1:5000 127.0.0.1:6379 users:(("python",pid=103,fd=3))
ESTAB 0 0 192.0.2.2:5001 192.0.2.2:6379 users:(("python",pid=103,fd=4))
LISTEN 0 128 [::ffff:127.0.0.1]:7000 [::]:* users:(("python",pid=104,fd=5))
ESTAB 0 0 10.0.0.9:22 10.0.0.1:5555 users:(("sshd",pid=999,fd=3))
"""


def test_non_loopback_sockets_names_listeners_and_connections_off_127_0_0_1(monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, SS, ""))
    bad = ray_cluster.non_loopback_sockets({101, 102, 103, 104})
    # a listener on every interface and a connection over the interface address; not the other
    # process's socket (pid 999), not the loopback ones
    assert [b.split()[3] for b in bad] == ["0.0.0.0:40001", "192.0.2.2:5001"]


@pytest.mark.parametrize("address, pinned", [
    ("127.0.0.1:6379", True), ("localhost:6379", True), ("10.1.2.3:6379", False),
    ("ray://127.0.0.1:10001", False), ("auto", False), ("head.cluster.local:6379", False)])
def test_loopback_addresses_are_pinned_others_are_not(address, pinned):
    assert is_loopback_address(address) is pinned
