"""Where a sweep's MLflow store is: the tracking URI a sweep resolves (CLI > env > config > the run
directory's own sqlite store), how mlflow_runs.json records it (the run directory's own store
relatively, so a copied run directory is self-contained) and the relocation of a copied store's
artifact paths. `orchestration.tracking.runs` re-exports these as the MLflow interface of the sweep."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from poxm_core.common.errors import PoxmInputError

HTTP_SCHEMES = ("http://", "https://")


def split_userinfo(uri: str) -> tuple[str, str | None, str | None]:
    """(the URI without 'user:password@', user, password); the URI unchanged when it holds none."""
    from urllib.parse import unquote, urlsplit, urlunsplit
    try:
        parts = urlsplit(uri)
    except ValueError:
        return uri, None, None
    if "@" not in parts.netloc:
        return uri, None, None
    info, _, hostport = parts.netloc.rpartition("@")
    user, sep, password = info.partition(":")
    return urlunsplit(parts._replace(netloc=hostport)), unquote(user) or None, unquote(password) if sep else None


def safe_uri(uri: str) -> str:
    """The URI as poxm records and prints it: never with credentials in it."""
    return split_userinfo(str(uri))[0]


def take_credentials(uri: str, environ=None) -> str:
    """An http(s) URI without its user-info; a user and password found there go to the variables MLflow
    reads (MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD) of this process, unless already set, so
    that they are sent to that server but never recorded or printed. Other URIs unchanged (a database
    URL needs its login: poxm records and prints it without, see safe_uri)."""
    environ = os.environ if environ is None else environ
    if not str(uri).startswith(HTTP_SCHEMES):
        return uri
    clean, user, password = split_userinfo(uri)
    if user is not None and "MLFLOW_TRACKING_USERNAME" not in environ and "MLFLOW_TRACKING_TOKEN" not in environ:
        environ["MLFLOW_TRACKING_USERNAME"] = user
        if password is not None:
            environ["MLFLOW_TRACKING_PASSWORD"] = password
    return clean


def resolve_uri(run_root: Path, cli_uri: str | None = None, config_uri: str | None = None) -> str:
    """The absolute tracking URI: --mlflow-uri > $MLFLOW_TRACKING_URI > config mlflow.tracking_uri >
    sqlite store inside the run directory. Relative sqlite paths are made absolute (Ray moves the
    worker's cwd); a plain path to a .db file means sqlite; the retired file store is refused."""
    uri = cli_uri or os.environ.get("MLFLOW_TRACKING_URI") or config_uri
    if not uri:
        return "sqlite:///" + str((Path(run_root) / "mlflow.db").resolve())
    if uri.startswith(HTTP_SCHEMES):
        return take_credentials(uri)
    if uri.startswith(("databricks", "postgresql", "mysql", "mssql")):
        return uri
    if uri.startswith("sqlite:///"):
        path = uri[len("sqlite:///"):]
        return "sqlite:///" + str(Path(path).expanduser().resolve()) if not path.startswith("/") else uri
    if uri.startswith("file:") or "://" not in uri:
        path = uri[len("file:"):] if uri.startswith("file:") else uri
        if path.endswith(".db"):
            return "sqlite:///" + str(Path(path).expanduser().resolve())
        raise PoxmInputError(f"--mlflow-uri/MLFLOW_TRACKING_URI: '{safe_uri(uri)}' is a file store, which MLflow >= 3.13 "
                             "refuses; expected sqlite:////abs/path/mlflow.db or http://host:port")
    return uri


RUN_DIR_STORE = "sqlite:///mlflow.db"   # how mlflow_runs.json names the store inside its own run directory


def record_uri(uri: str, run_root: Path) -> str:
    """The URI as mlflow_runs.json keeps it: the run directory's own store relatively (RUN_DIR_STORE),
    so a copied run directory opens its copy of the store, not the original's; any other as it is."""
    if uri == "sqlite:///" + str((Path(run_root) / "mlflow.db").resolve()):
        return RUN_DIR_STORE
    return safe_uri(uri)


_user = {"uri": None}


def set_user_uri(uri: str | None) -> None:
    """The tracking URI the user gave on the command line (`--mlflow-uri`), for stored_uri's check."""
    _user["uri"] = uri


def user_uri() -> str | None:
    return _user["uri"] or os.environ.get("MLFLOW_TRACKING_URI") or None


def _norm(run_root: Path, uri: str) -> str | None:
    try:
        return safe_uri(resolve_uri(run_root, uri)).rstrip("/")
    except PoxmInputError:
        return None


def is_run_dir_store(run_root: Path, uri: str) -> bool:
    return uri == RUN_DIR_STORE or uri == "sqlite:///" + str(Path(run_root).resolve() / "mlflow.db")


def checked_uri(run_root: Path, ml: Mapping | None) -> str | None:
    """The tracking URI a run directory's mlflow_runs.json records, if poxm may use it: the run
    directory's own store always; any other only when it is the one the user gives (--mlflow-uri or
    $MLFLOW_TRACKING_URI), and then in the user's spelling (credentials and all), so that MLflow's
    credentials go only to a server the user named. Otherwise one line (PoxmInputError). None: no URI."""
    uri = (ml or {}).get("tracking_uri") if isinstance(ml, Mapping) else None
    if not uri:
        return None
    root = Path(run_root).resolve()
    if is_run_dir_store(root, str(uri)):
        return "sqlite:///" + str(root / "mlflow.db")
    given = user_uri()
    if given and _norm(root, given) is not None and _norm(root, given) == _norm(root, str(uri)):
        return resolve_uri(root, given)
    raise PoxmInputError(f"{root / 'mlflow_runs.json'}: records the MLflow store {safe_uri(str(uri))}, which poxm "
                         "uses only when you give the same one (--mlflow-uri URI or $MLFLOW_TRACKING_URI), so that "
                         "your MLflow credentials go only where you say")


def stored_uri(run_root: Path, ml: Mapping | None) -> str | None:
    """The absolute tracking URI of a run directory's mlflow_runs.json (None if it has none), checked
    (checked_uri: another store than the run's own only when the user gives the same). For the run
    directory's own store, artifact locations recorded under another folder (the run directory was
    copied or moved) are rewritten to this one's mlartifacts/ first."""
    uri = checked_uri(run_root, ml)
    if uri is not None and is_run_dir_store(run_root, uri):
        relocate_store(Path(run_root).resolve())
    return uri


def _old_locations(db: Path, new: str) -> list[str]:
    """The artifact locations in `db` that name the mlartifacts/ of another folder than `new`. Read only;
    a damaged or foreign file is one line naming it."""
    import sqlite3

    def read(mode: str) -> list[str]:
        con = sqlite3.connect(f"{Path(db).resolve().as_uri()}?mode={mode}", uri=True)
        try:
            return [r[0] for r in con.execute("SELECT artifact_location FROM experiments") if r[0]
                    and r[0].rstrip("/").endswith("/mlartifacts") and r[0].startswith("file:") and r[0] != new]
        finally:
            con.close()
    try:
        try:
            return read("ro")
        except sqlite3.OperationalError as exc:
            # a writer killed mid-transaction (a sweep killed, its trial processes ended by Ray) leaves a
            # journal or WAL that only a writable connection recovers: what the resumed sweep's store does next
            if "readonly" not in str(exc):
                raise
            return read("rw")
    except sqlite3.DatabaseError as exc:
        raise PoxmInputError(f"{db}: not a readable MLflow store ({exc})") from None


def relocate_store(run_root: Path, db: Path | None = None) -> bool:
    """Point the artifact locations in run_root/mlflow.db (or `db`, a copy of it) at run_root/mlartifacts
    when they name the mlartifacts/ of another folder (the directory this one was copied from). True if
    it rewrote. A damaged store, or one that cannot be written, is one line naming the file."""
    import sqlite3
    db = Path(run_root) / "mlflow.db" if db is None else Path(db)
    if not db.is_file():
        return False
    new = (Path(run_root).resolve() / "mlartifacts").as_uri()
    olds = _old_locations(db, new)
    if not olds:
        return False
    try:
        con = sqlite3.connect(str(db))
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            with con:
                for old in olds:
                    con.execute("UPDATE experiments SET artifact_location = ? WHERE artifact_location = ?", (new, old))
                    con.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) WHERE artifact_uri LIKE ?",
                                (new, len(old) + 1, old + "/%"))
                    if "logged_models" in tables:
                        con.execute("UPDATE logged_models SET artifact_location = ? || substr(artifact_location, ?) "
                                    "WHERE artifact_location LIKE ?", (new, len(old) + 1, old + "/%"))
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise PoxmInputError(f"{db}: cannot update the MLflow store ({exc})") from None
    return True


def writable(path: Path) -> bool:
    """Whether this process can write `path` and create files beside it (sqlite's journal)."""
    path = Path(path)
    try:
        if os.statvfs(path.parent).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        return False
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def browse_copy(run_root: Path, tmp: Path) -> str:
    """The sqlite URI `poxm ui` serves for a run directory's own store, without writing the run directory:
    the store itself when it is writable and needs no relocation, else a copy in `tmp` whose artifact
    locations point at the run's mlartifacts/ (a read-only archive, a copied run). A damaged store: one
    line naming the file."""
    import shutil
    import sqlite3
    root = Path(run_root).resolve()
    db = root / "mlflow.db"
    olds = _old_locations(db, (root / "mlartifacts").as_uri())
    if not olds and writable(db):
        return "sqlite:///" + str(db)
    copy = Path(tmp) / "mlflow.db"
    try:       # sqlite's backup: a consistent copy even while a sweep writes (WAL included)
        src = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
        dst = sqlite3.connect(str(copy))
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()
    except sqlite3.DatabaseError:
        shutil.copyfile(db, copy)
    relocate_store(root, copy)
    return "sqlite:///" + str(copy)


def is_local_store(uri: str) -> bool:
    return uri.startswith("sqlite:")


def client(uri: str):
    """An MlflowClient of the store at `uri` (mlflow imported only here, when a client is needed)."""
    from mlflow import MlflowClient
    return MlflowClient(tracking_uri=uri)
