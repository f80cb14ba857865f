"""`ray start` pinned to 127.0.0.1, for the tests' multi-node clusters (run as `python -m` or by path).

Ray turns the loopback address into the machine's interface address wherever it meets it
(`services.resolve_ip_for_localhost`: `--node-ip-address 127.0.0.1`, `--address 127.0.0.1:P`), unless its
single-machine mode is on, and that mode refuses to start a second node. So this wrapper keeps the mode
off for `ray start`'s own check, leaves a loopback address as it is, and turns the mode on for every
process the node starts (GCS, raylet, agents, workers inherit the variable): each of them then resolves
"127.0.0.1" to itself, and Ray's C++ servers listen on 127.0.0.1 alone when that is the node's address.
"""
import os
import sys

import ray._private.services as services

_resolve = services.resolve_ip_for_localhost


def _keep_loopback(host: str) -> str:
    return host if host == "127.0.0.1" else _resolve(host)


services.resolve_ip_for_localhost = _keep_loopback
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"      # read by the processes this node starts

from ray.scripts.scripts import main  # noqa: E402 -- after the patch above

if __name__ == "__main__":
    sys.argv[0] = "ray"
    sys.exit(main())
