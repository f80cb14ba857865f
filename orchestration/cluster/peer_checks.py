"""Each network peer `poxm run`/`resume` will use, asked in the protocol it must speak before anything
is written (orchestration.cluster.preflight): a TCP connection that opens proves nothing (a listener
that accepts and never answers hung `run` for minutes, an MLflow server answering HTTP 500 ended it in a
traceback). Silence, another protocol or an error answer is one line (PoxmInputError) within the time
given, per step.

- A Ray cluster's GCS: its cluster id, asked by Ray's own GCS client (the first call a Ray driver
  makes), in a child process ended at the time limit. A refusal of Ray's token authentication is an
  answer too (Ray itself then reports it).
- An MLflow server: `GET <uri>/api/2.0/mlflow/experiments/get-by-name` with the user's MLflow
  credentials (the URI is one the user gave); a JSON answer with an experiment or MLflow's
  RESOURCE_DOES_NOT_EXIST is a server that works. Redirects are not followed: credentials go only to
  the address given."""
from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request

from poxm_core.common.errors import PoxmInputError

# Ray's own GCS client asks for the cluster id (as `ray.init` does), in a process of its own: Ray's client
# retries for tens of seconds and logs while it does, so the process is ended at the time limit instead.
_GCS_PROBE = """
import sys
from ray._raylet import GcsClient
try:
    print(GcsClient(address=sys.argv[1]).cluster_id.hex(), flush=True)
except Exception as exc:
    print("ERROR " + type(exc).__name__ + ": " + str(exc).splitlines()[0][:200] if str(exc) else "", flush=True)
    sys.exit(3)
"""


def gcs_handshake(host: str, port: int, where: str, timeout_s: float) -> None:
    """Ask the GCS at host:port for its cluster id, with Ray's own client (its token and all); anything
    but a cluster id within timeout_s is one line. A refusal of Ray's token authentication is an answer
    from a GCS too: it passes here, and Ray reports it when the sweep connects."""
    import subprocess
    import sys
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    try:
        res = subprocess.run([sys.executable, "-c", _GCS_PROBE, target], capture_output=True, text=True,
                             timeout=timeout_s + IMPORT_S, env=env)
    except subprocess.TimeoutExpired:
        raise PoxmInputError(f"{where}: no Ray GCS answers there within {timeout_s:g} s; give the head node's "
                             "GCS address (`ray start --head` prints it)") from None
    line = (res.stdout.strip().splitlines() or [""])[-1]
    if res.returncode == 0 and line:
        return
    if "auth" in line.lower() or "unauthenticated" in line.lower():
        return
    raise PoxmInputError(f"{where}: no Ray GCS answers there ({line.removeprefix('ERROR ') or 'no answer'}); "
                         "give the head node's GCS address (`ray start --head` prints it)")


IMPORT_S = 5.0      # the probe's start and `import ray` on a loaded machine, on top of the handshake's time


def _auth_headers(uri: str, environ=None) -> dict[str, str]:
    """The credentials MLflow would send: $MLFLOW_TRACKING_TOKEN, else $MLFLOW_TRACKING_USERNAME/PASSWORD,
    else the user-info of the URI the user gave."""
    from orchestration.tracking.store import split_userinfo
    environ = os.environ if environ is None else environ
    if environ.get("MLFLOW_TRACKING_TOKEN"):
        return {"Authorization": f"Bearer {environ['MLFLOW_TRACKING_TOKEN']}"}
    _, user, password = split_userinfo(uri)
    user = environ.get("MLFLOW_TRACKING_USERNAME", user)
    password = environ.get("MLFLOW_TRACKING_PASSWORD", password)
    if user is None:
        return {}
    token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):    # noqa: D401 -- urllib's hook
        return None


def _insecure_tls() -> bool:
    return os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() in ("1", "true")


def mlflow_handshake(uri: str, where: str, timeout_s: float) -> None:
    """One MLflow REST call to the server `uri` names; anything but MLflow's answer is one line."""
    import ssl

    from orchestration.tracking.store import safe_uri
    url = safe_uri(uri).rstrip("/") + "/api/2.0/mlflow/experiments/get-by-name?experiment_name=Default"
    handlers = [_NoRedirect()]
    if url.startswith("https://") and _insecure_tls():
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        handlers.append(urllib.request.HTTPSHandler(context=ctx))
    opener = urllib.request.build_opener(*handlers)
    req = urllib.request.Request(url, headers={"Accept": "application/json", **_auth_headers(uri)})
    try:
        with opener.open(req, timeout=timeout_s) as resp:
            status, body = resp.status, resp.read(1 << 16)
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read(1 << 16) if exc.fp is not None else b""
    except (TimeoutError, OSError) as exc:      # socket.timeout, a reset, an SSL error
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        text = f"no answer within {timeout_s:g} s" if "timed out" in str(reason) else str(reason)
        raise PoxmInputError(f"{where}: no MLflow answer ({text}); is an MLflow server running there?") from None
    _judge(status, body, where)


def _judge(status: int, body: bytes, where: str) -> None:
    try:
        data = json.loads(body.decode("utf-8", errors="replace")) if body else None
    except ValueError:
        data = None
    if status == 200 and isinstance(data, dict) and "experiment" in data:
        return
    if status == 404 and isinstance(data, dict) and data.get("error_code") == "RESOURCE_DOES_NOT_EXIST":
        return
    if status in (401, 403):
        raise PoxmInputError(f"{where}: the MLflow server refuses the credentials (HTTP {status}); set "
                             "MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN")
    what = (f"MLflow error {data['error_code']}" if isinstance(data, dict) and data.get("error_code")
            else f"HTTP {status}" + ("" if status >= 400 else ", not MLflow's API"))
    raise PoxmInputError(f"{where}: the server does not answer as an MLflow tracking server ({what}); "
                         "check the URI and the server")
