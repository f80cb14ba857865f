"""A throw-away multi-node Ray cluster on this machine for tests: `ray start --head` and more nodes with
`ray start --address`, each in its own process group and temp dir, stopped by killing those groups (never
`ray stop`, which would stop every Ray of this user on the machine)."""
from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# `ray start` through a wrapper that pins every node to 127.0.0.1 (tests/ray_loopback_start.py says why)
RAY_START = [sys.executable, str(Path(__file__).with_name("ray_loopback_start.py")), "start"]
LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_env(**extra) -> dict:
    """Ray >= 2.59 turns token authentication on for `ray start --head`; every process of the cluster
    (and the driver) must then agree on it: token mode, and one token, in a file of this test process's
    own (a fresh machine has no ~/.ray/auth_token, and `ray start` does not create one)."""
    return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": _token_file(), **extra}


def _token_file() -> str:
    global _TOKEN
    if _TOKEN is None:
        folder = tempfile.mkdtemp(prefix="pxr-token-")
        _TOKEN = os.path.join(folder, "auth_token")
        with open(os.open(_TOKEN, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(secrets.token_hex(32))
    return _TOKEN


_TOKEN: str | None = None


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (children, their children, ...), from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


class Cluster:
    def __init__(self, root: Path):
        # Ray's socket paths (<temp-dir>/session_.../sockets/plasma_store) must fit 107 bytes: a short root
        self.root = Path(tempfile.mkdtemp(prefix="pxr-", dir="/tmp"))
        self.logs = Path(root)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.procs: list[subprocess.Popen] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, args: list[str], log: Path, env: dict, shell_prefix: str | None = None) -> subprocess.Popen:
        cmd = [*RAY_START, "--node-ip-address", LOOPBACK, *args, "--block"]
        if shell_prefix is not None:     # a private mount namespace: what the prefix mounts only this node sees
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", f"{shell_prefix} {shlex.join(cmd)}"]
        with open(log, "w") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.procs.append(p)
        deadline = time.time() + 60
        while time.time() < deadline:
            if "block forever" in log.read_text():
                return p
            if p.poll() is not None:
                raise RuntimeError(f"ray start exited ({p.returncode}):\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        raise RuntimeError(f"ray start did not come up in 60 s:\n{log.read_text()[-3000:]}")

    def start_head(self, *args: str, env: dict | None = None) -> None:
        (self.root / "head").mkdir(parents=True, exist_ok=True)
        self._start(["--head", "--port", str(self.port), "--include-dashboard=false",
                     "--temp-dir", str(self.root / "head"), *args], self.logs / "head.log", env or cluster_env())

    def add_node(self, name: str, *args: str, env: dict | None = None, shell_prefix: str | None = None) -> None:
        """A node joining the head; `shell_prefix` (a shell command ending in `exec`) runs first in the
        same shell, e.g. to mount a tmpfs over a folder inside an `unshare -m` namespace."""
        (self.root / name).mkdir(parents=True, exist_ok=True)
        args = ["--address", self.address, "--temp-dir", str(self.root / name), *args]
        self._start(args, self.logs / f"{name}.log", env or cluster_env(), shell_prefix)

    def pids(self) -> set[int]:
        """Every live process of the cluster: each node's `ray start` and everything under it."""
        return {q for p in self.procs if p.poll() is None for q in [p.pid, *descendants(p.pid)]}

    def run_watched(self, cmd: list[str], timeout: float, **kw) -> tuple[subprocess.CompletedProcess, list[str]]:
        """Run `cmd` (a driver of this cluster) to its end, sampling twice a second the TCP sockets of
        the driver's and the cluster's processes: returns the result and every socket seen off 127.0.0.1."""
        return run_sampled(cmd, timeout, lambda pids: non_loopback_sockets(pids | self.pids()), **kw)

    def kill_node(self, proc: subprocess.Popen) -> None:
        """SIGKILL one node's every process at once, as when its machine dies: its `ray start`, and the
        whole tree under it (raylet, agents, and the raylet's workers, with the trials they run). Killing
        `ray start`'s process group alone leaves the workers to notice their raylet's death, which took
        longer than a tiny trial's remaining epochs: it finished instead of dying."""
        tree = descendants(proc.pid)            # before the kill: orphans are handed to init
        for pid in [proc.pid, *tree]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        for p in reversed(self.procs):          # nodes first, the head last
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in reversed(self.procs):
            try:
                p.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
            try:                                # the head drains for up to 30 s: no need to wait for it
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)



def run_sampled(cmd: list[str], timeout: float, sample, **kw) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run `cmd` to its end (killed after `timeout` s), calling `sample(pids)` twice a second with the pids
    of the process and everything under it: returns the result and every distinct line `sample` gave."""
    seen: list[str] = []
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, **kw)
        deadline = time.time() + timeout
        while p.poll() is None and time.time() < deadline:
            seen += [b for b in sample({p.pid, *descendants(p.pid)}) if b not in seen]
            time.sleep(0.5)
        if p.poll() is None:
            p.kill()
        p.wait()
        out.seek(0); err.seek(0)
        return subprocess.CompletedProcess(cmd, p.returncode, out.read(), err.read()), seen


_PID = re.compile(r"pid=(\d+)")


def listening_sockets(pids: set[int]) -> list[str]:
    """The listening TCP sockets of these processes, one `ss -ltnpH` line each (iproute2)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return [ln.strip() for ln in out.splitlines() if {int(p) for p in _PID.findall(ln)} & pids]


def non_loopback_sockets(pids: set[int]) -> list[str]:
    """The TCP sockets of these processes that are not on 127.0.0.1: a listener on any other address
    (every interface included) or a connection with either end elsewhere; from `ss` (iproute2). The
    tests' clusters must keep all their traffic on the loopback address."""
    out = subprocess.run(["ss", "-tanpH"], capture_output=True, text=True, check=True).stdout
    bad = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 5 or not {int(p) for p in _PID.findall(line)} & pids:
            continue
        state, local, peer = fields[0], fields[3], fields[4]
        ends = [local] if state == "LISTEN" else [local, peer]
        if not all(_host(a) == LOOPBACK for a in ends):
            bad.append(line.strip())
    return bad


def _host(addr: str) -> str:
    host = addr.rsplit(":", 1)[0].strip("[]")
    return host.removeprefix("::ffff:")
