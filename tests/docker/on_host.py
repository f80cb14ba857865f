"""The image test's steps that run on the host (scripts/test-image.sh), with the standard library only.

  python3 tests/docker/on_host.py free-ports N              N free TCP ports on 127.0.0.1
  python3 tests/docker/on_host.py watch PREFIX OUT STOP     until the file STOP exists, twice a second:
                                                            every TCP socket of the processes of the
                                                            containers named PREFIX* that is not on
                                                            127.0.0.1 (a listener on another address
                                                            or every interface, a connection with an
                                                            end elsewhere), appended to OUT; the number
                                                            of samples and processes seen to OUT.done
  python3 tests/docker/on_host.py training-now RUNS EPOCHS  trials of the run directories in RUNS that
                                                            are mid-training now
  python3 tests/docker/on_host.py max-tries RUN_DIR         the most tries any trial of RUN_DIR took

The containers run on the host's network, so `ss` here sees their sockets (tests/ray_cluster.py's
non_loopback_sockets, as the tests' own clusters are checked).
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.ray_cluster import descendants, non_loopback_sockets  # noqa: E402


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def container_pids(prefix: str) -> set[int]:
    """The host pids of the running containers named prefix*: each one's init and everything under it
    (a container's orphans go to its own init)."""
    ids = subprocess.run(["docker", "ps", "-q", "--filter", f"name=^{prefix}"], capture_output=True,
                         text=True).stdout.split()
    if not ids:
        return set()
    out = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", *ids], capture_output=True,
                         text=True).stdout.split()
    roots = {int(p) for p in out if p.isdigit() and int(p) > 0}
    return {q for r in roots for q in (r, *descendants(r))}


def watch(prefix: str, out: Path, stop: Path) -> None:
    seen: list[str] = []
    samples, most = 0, 0
    while not stop.exists():
        pids = container_pids(prefix)
        most = max(most, len(pids))
        for line in non_loopback_sockets(pids):
            if line not in seen:
                seen.append(line)
                with out.open("a") as f:
                    f.write(line + "\n")
        samples += 1
        time.sleep(0.5)
    out.with_name(out.name + ".done").write_text(f"{samples} samples, up to {most} processes\n")


def training_now(runs: Path, epochs: int) -> int:
    """Trials mid-training: state 'running' at an epoch from 1 to epochs - 1 and no done.json yet (as
    tests/orchestration/stages/test_node_loss.py counts them)."""
    n = 0
    for st in runs.glob("*/trials/*/state.json"):
        try:
            s = json.loads(st.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        n += (s.get("state") == "running" and 1 <= int(s.get("epoch", 0) or 0) < epochs
              and not (st.parent / "done.json").exists())
    return n


def max_tries(run_dir: Path) -> int:
    return max((json.loads(p.read_text()).get("tries", 1) for p in run_dir.glob("trials/*/done.json")), default=0)


def main(argv: list[str]) -> None:
    cmd, args = argv[0], argv[1:]
    if cmd == "free-ports":
        print(" ".join(map(str, free_ports(int(args[0])))))
    elif cmd == "watch":
        watch(args[0], Path(args[1]), Path(args[2]))
    elif cmd == "training-now":
        print(training_now(Path(args[0]), int(args[1])))
    elif cmd == "max-tries":
        print(max_tries(Path(args[0])))
    else:
        sys.exit(f"unknown step {cmd!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
