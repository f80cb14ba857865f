"""Checks of what `poxm run`/`resume` will connect to and ask for, before anything is written or Ray
starts (docs/orchestration.md, "Bad input and security"): a malformed `--address` / `--mlflow-uri` is
one line; each peer is asked in the protocol it must speak (a Ray GCS its cluster id over gRPC, an
MLflow server an API call over HTTP), and one that is silent, answers something else or answers with an
error is one line within CONNECT_TIMEOUT_S (per step); and a trial that
this machine's Ray could never run (more CPUs or GPUs than the machine has, names too long for a file
system) is refused before Ray starts. All raise PoxmInputError (exit 2)."""
from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

from poxm_core.common.errors import PoxmInputError

CONNECT_TIMEOUT_S = 5.0
NAME_MAX = 255                  # bytes of one file name on the usual file systems
NAME_SLACK = 40                 # what poxm and Ray add to a trial's name in a file name ('train-', '.epoch_0001', '.tmp-PID')
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)$")
DB_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}


def split_host_port(text: str, where: str, default_port: int | None = None) -> tuple[str, int]:
    """'host:port' (or '[v6]:port') -> (host, port); malformed: one line naming `where`."""
    host, sep, port_s = text.rpartition(":")
    if not sep or (host.count(":") and not host.startswith("[")):   # no port, or a bare IPv6
        host, port_s = text, ""
    if not port_s and default_port is not None:
        port_s = str(default_port)
    if not _HOST.match(host or "") or not port_s.isdigit() or not 1 <= int(port_s) <= 65535:
        raise PoxmInputError(f"{where} {text!r}: not HOST:PORT (a host name or IP address, a port in 1-65535)")
    return host.strip("[]"), int(port_s)


def reachable(host: str, port: int, where: str, what: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A TCP connection to host:port opens within timeout_s, else one line."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except socket.gaierror as exc:
        raise PoxmInputError(f"{where}: cannot resolve host {host!r} ({exc.strerror})") from None
    except OSError as exc:
        reason = "no answer within %g s" % timeout_s if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise PoxmInputError(f"{where}: nothing answers at {host}:{port} ({reason}); is {what} running there?") from None


def check_address(address: str | None) -> None:
    """--address (else $RAY_ADDRESS): HOST:PORT or ray://HOST:PORT of a Ray cluster that answers, or
    'auto' (a Ray started on this machine with `ray start`). None: a local Ray will be started."""
    where = "--address" if address else "$RAY_ADDRESS"
    addr = (address or os.environ.get("RAY_ADDRESS") or "").strip()
    if not addr or addr == "local":
        return
    if addr == "auto":
        from ray._private.services import find_bootstrap_address
        found = find_bootstrap_address(None)
        if not found:
            raise PoxmInputError(f"{where} auto: no Ray cluster was started on this machine (`ray start --head`)")
        addr = found
    text = addr[len("ray://"):] if addr.startswith("ray://") else addr
    if "://" in text or "/" in text:
        raise PoxmInputError(f"{where} {addr!r}: expected HOST:PORT or ray://HOST:PORT of a Ray cluster")
    host, port = split_host_port(text, where)
    reachable(host, port, f"{where} {addr}", "a Ray cluster")
    if not addr.startswith("ray://"):       # Ray Client speaks its own protocol: the TCP check is what is made
        from orchestration.cluster.peer_checks import gcs_handshake
        gcs_handshake(host, port, f"{where} {addr}", CONNECT_TIMEOUT_S)


def check_mlflow_uri(uri: str | None, where: str) -> None:
    """A tracking URI poxm can use: http(s)://HOST[:PORT] that answers, sqlite:///PATH whose folder exists,
    a database URL whose host answers, or a path to a .db file; anything else is one line."""
    if not uri:
        return
    from orchestration.tracking.store import safe_uri
    shown = safe_uri(uri)
    try:
        parts = urlsplit(uri)
        _ = parts.port          # raises on a port that is not a number
    except ValueError as exc:
        raise PoxmInputError(f"{where} {shown!r}: not a valid URI ({exc})") from None
    scheme = parts.scheme.lower()
    base = scheme.split("+")[0]
    if scheme in ("http", "https"):
        host = parts.hostname
        if not host or not _HOST.match(host if ":" not in host else f"[{host}]"):
            raise PoxmInputError(f"{where} {shown!r}: no valid host (expected http://HOST:PORT)")
        reachable(host, parts.port or (443 if scheme == "https" else 80), f"{where} {shown}", "an MLflow server")
        from orchestration.cluster.peer_checks import mlflow_handshake
        mlflow_handshake(uri, f"{where} {shown}", CONNECT_TIMEOUT_S)
    elif scheme == "sqlite":
        path = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else ""
        if not path:
            raise PoxmInputError(f"{where} {shown!r}: expected sqlite:////abs/path/mlflow.db")
        folder = Path(path).expanduser().resolve().parent
        if not folder.is_dir():
            raise PoxmInputError(f"{where} {shown}: folder {folder} not found")
    elif base in DB_PORTS:
        if parts.hostname:
            reachable(parts.hostname, parts.port or DB_PORTS[base], f"{where} {shown}", "the database")
    elif scheme == "databricks":
        return
    elif scheme in ("", "file"):
        return                  # a path: resolve_uri takes a .db file as sqlite and names a file store in one line
    else:
        raise PoxmInputError(f"{where} {shown!r}: unsupported scheme '{scheme}'; expected http(s)://HOST:PORT, "
                             "sqlite:////abs/path/mlflow.db or a database URL")


def check_logged_tables(cfg) -> None:
    """Every logged dataset's tables read and support-checked now (poxm_core.data.logged_checks: columns,
    action ids, positions, propensities in [1e-6, 1], rewards, row count), so a bad value is one line
    before Ray starts or anything is written, not a failed trial after."""
    from poxm_core.config.schema import default_data_root
    from poxm_core.data.logged_dataset import read_logged
    root = Path(cfg.data_root) if cfg.data_root else default_data_root()
    for d in cfg.datasets:
        if d.logged is not None:
            read_logged(d.logged, root)


def check_run_inputs(cfg, address: str | None, mlflow_uri: str | None) -> None:
    """`poxm run`: the Ray address and the tracking URI the sweep will use, what a local Ray can give,
    then the logged tables' support."""
    check_address(address)
    if cfg.mlflow.enabled:
        if mlflow_uri:
            check_mlflow_uri(mlflow_uri, "--mlflow-uri")
        elif os.environ.get("MLFLOW_TRACKING_URI"):
            check_mlflow_uri(os.environ["MLFLOW_TRACKING_URI"], "$MLFLOW_TRACKING_URI")
        elif cfg.mlflow.tracking_uri:
            check_mlflow_uri(cfg.mlflow.tracking_uri, "config key 'mlflow.tracking_uri'")
    check_local_resources(cfg, local=not (address or os.environ.get("RAY_ADDRESS")))
    check_logged_tables(cfg)


def local_cpus() -> float:
    """The CPUs a local Ray will report (Ray's own count: cgroup limits included)."""
    try:
        from ray._private.utils import get_num_cpus
        return float(get_num_cpus())
    except Exception:       # noqa: BLE001 -- a Ray without this private helper
        return float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def local_gpus() -> int:
    try:
        import torch
        return torch.cuda.device_count()
    except Exception:       # noqa: BLE001
        return 0


def check_local_resources(cfg, local: bool) -> None:
    """A trial a local Ray could never place (it would wait forever, or fail inside Ray) is refused now."""
    r = cfg.resources
    if local:
        need_cpu, have = r.num_workers * r.cpus_per_trial, local_cpus()
        if need_cpu > have + 1e-9:
            raise PoxmInputError(f"config key 'resources.cpus_per_trial': a trial needs {need_cpu:g} CPUs "
                                 f"(num_workers x cpus_per_trial) but this machine has {have:g}")
        need_gpu = r.num_workers * r.gpus_per_trial
        if need_gpu > 0 and need_gpu > local_gpus() + 1e-9:
            raise PoxmInputError(f"config key 'resources.gpus_per_trial': a trial needs {need_gpu:g} GPUs but this "
                                 f"machine has {local_gpus()} (set resources.gpus_per_trial=0 for CPU)")


def check_names(run_root: Path, names: list[str]) -> None:
    """Run-directory and trial names that a file system cannot hold are refused before anything is written."""
    for n in [run_root.name, *names]:
        if len(n.encode()) + NAME_SLACK > NAME_MAX:
            raise PoxmInputError(f"a run or trial name of {len(n.encode())} bytes ({n[:40]}...) is too long for a "
                                 f"file name (at most {NAME_MAX - NAME_SLACK}); shorten the sweep's or a dataset's, "
                                 "variant's or method's name")
