"""Where a sweep's MLflow store is: the tracking URI a sweep resolves (CLI > env > config > the run
directory's own sqlite store), how mlflow_runs.json records it (the run directory's own store
relatively, so a copied run directory is self-contained) and the relocation of a copied store's
artifact paths. `orchestration.tracking.runs` re-exports these as the MLflow interface of the sweep."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from poxm_core.common.errors import PoxmInputError



def resolve_uri(run_root: Path, cli_uri: str | None = None, config_uri: str | None = None) -> str:
    """The absolute tracking URI: --mlflow-uri > $MLFLOW_TRACKING_URI > config mlflow.tracking_uri >
    sqlite store inside the run directory. Relative sqlite paths are made absolute (Ray moves the
    worker's cwd); a plain path to a .db file means sqlite; the retired file store is refused."""
    uri = cli_uri or os.environ.get("MLFLOW_TRACKING_URI") or config_uri
    if not uri:
        return "sqlite:///" + str((Path(run_root) / "mlflow.db").resolve())
    if uri.startswith(("http://", "https://", "databricks", "postgresql", "mysql", "mssql")):
        return uri
    if uri.startswith("sqlite:///"):
        path = uri[len("sqlite:///"):]
        return "sqlite:///" + str(Path(path).expanduser().resolve()) if not path.startswith("/") else uri
    if uri.startswith("file:") or "://" not in uri:
        path = uri[len("file:"):] if uri.startswith("file:") else uri
        if path.endswith(".db"):
            return "sqlite:///" + str(Path(path).expanduser().resolve())
        raise PoxmInputError(f"--mlflow-uri/MLFLOW_TRACKING_URI: '{uri}' is a file store, which MLflow >= 3.13 "
                             "refuses; expected sqlite:////abs/path/mlflow.db or http://host:port")
    return uri


RUN_DIR_STORE = "sqlite:///mlflow.db"   # how mlflow_runs.json names the store inside its own run directory


def record_uri(uri: str, run_root: Path) -> str:
    """The URI as mlflow_runs.json keeps it: the run directory's own store relatively (RUN_DIR_STORE),
    so a copied run directory opens its copy of the store, not the original's; any other as it is."""
    if uri == "sqlite:///" + str((Path(run_root) / "mlflow.db").resolve()):
        return RUN_DIR_STORE
    return uri


def stored_uri(run_root: Path, ml: Mapping | None) -> str | None:
    """The absolute tracking URI of a run directory's mlflow_runs.json (None if it has none). For the
    run directory's own store, artifact locations recorded under another folder (the run directory was
    copied or moved) are rewritten to this one's mlartifacts/ first."""
    uri = (ml or {}).get("tracking_uri")
    if not uri:
        return None
    root = Path(run_root).resolve()
    if uri == RUN_DIR_STORE or uri == "sqlite:///" + str(root / "mlflow.db"):
        relocate_store(root)
        return "sqlite:///" + str(root / "mlflow.db")
    return uri


def relocate_store(run_root: Path) -> bool:
    """Point the artifact locations in run_root/mlflow.db at run_root/mlartifacts when they name the
    mlartifacts/ of another folder (the directory this one was copied from). True if it rewrote."""
    import sqlite3
    db = Path(run_root) / "mlflow.db"
    if not db.is_file():
        return False
    new = (Path(run_root).resolve() / "mlartifacts").as_uri()
    con = sqlite3.connect(str(db))
    try:
        olds = [r[0] for r in con.execute("SELECT artifact_location FROM experiments") if r[0]
                and r[0].rstrip("/").endswith("/mlartifacts") and r[0].startswith("file:") and r[0] != new]
        if not olds:
            return False
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        with con:
            for old in olds:
                con.execute("UPDATE experiments SET artifact_location = ? WHERE artifact_location = ?", (new, old))
                con.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) WHERE artifact_uri LIKE ?",
                            (new, len(old) + 1, old + "/%"))
                if "logged_models" in tables:
                    con.execute("UPDATE logged_models SET artifact_location = ? || substr(artifact_location, ?) "
                                "WHERE artifact_location LIKE ?", (new, len(old) + 1, old + "/%"))
        return True
    finally:
        con.close()


def is_local_store(uri: str) -> bool:
    return uri.startswith("sqlite:")
