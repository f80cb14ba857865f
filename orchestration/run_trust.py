"""A run directory is data (docs/orchestration.md, "What poxm trusts"): what it names decides nothing
outside it. Its plugins are imported, its tracking URI, storage path and prepare cache are used, only
when the user gives the same on the command line (or in their environment); a link inside it is
refused, so nothing poxm reads, writes or deletes there lands elsewhere. Each refusal is one line
(PoxmInputError, exit 2)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from poxm_core.common.errors import PoxmInputError

_user = {"plugins": None, "plugin_path": None, "storage_path": None, "cache_dir": None}


def set_user_settings(plugins: str | list[str] | None = None, plugin_path: list[str] | None = None,
                      storage_path: str | None = None, cache_dir: str | None = None) -> None:
    """What the user said on the command line (`--plugins`, `--plugin-path`, `--storage-path`,
    `--cache-dir`); the first three left None fall back on $POXM_PLUGINS, $POXM_PLUGIN_PATH,
    $POXM_STORAGE_PATH."""
    if isinstance(plugins, str):
        plugins = [m.strip() for m in plugins.split(",") if m.strip()]
    _user.update(plugins=plugins, plugin_path=plugin_path, storage_path=storage_path, cache_dir=cache_dir)


def user_plugins() -> tuple[list[str], list[str]]:
    """(modules, folders) the user supplies: --plugins/--plugin-path, else $POXM_PLUGINS (comma-separated)
    and $POXM_PLUGIN_PATH (os.pathsep-separated). Folders are absolute."""
    mods = _user["plugins"]
    if mods is None:
        mods = [m.strip() for m in os.environ.get("POXM_PLUGINS", "").split(",") if m.strip()]
    paths = _user["plugin_path"]
    if paths is None:
        paths = [p for p in os.environ.get("POXM_PLUGIN_PATH", "").split(os.pathsep) if p]
    return list(mods), [str(Path(p).expanduser().resolve()) for p in paths]


def user_storage_path() -> str | None:
    return _user["storage_path"] or os.environ.get("POXM_STORAGE_PATH") or None


def same_storage(a: str | None, b: str | None) -> bool:
    """Whether two storage paths name the same place (local paths resolved, trailing '/' ignored)."""
    def norm(x):
        x = str(x).strip()
        return x.rstrip("/") if "://" in x else str(Path(x).expanduser().resolve())
    return bool(a) and bool(b) and norm(a) == norm(b)


def recorded_settings(path: Path) -> dict:
    """plugins, plugin_path, resources.storage_path and mlflow.tracking_uri as a config file names them
    (plain YAML; {} when the file is not a mapping: load_config reports that)."""
    import yaml
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8", errors="replace"))
    except yaml.YAMLError:
        return {}
    if not isinstance(data, dict):
        return {}
    res = data.get("resources") if isinstance(data.get("resources"), dict) else {}
    ml = data.get("mlflow") if isinstance(data.get("mlflow"), dict) else {}

    def strs(v):
        return [str(x) for x in v] if isinstance(v, list) else ([str(v)] if v else [])
    uri = ml.get("tracking_uri") if ml.get("enabled", True) is not False else None
    return {"plugins": strs(data.get("plugins")), "plugin_path": strs(data.get("plugin_path")),
            "storage_path": res.get("storage_path"), "tracking_uri": str(uri) if uri else None}


def check_recorded_uri(src: Path, run_root: Path, uri: str | None) -> None:
    """The `mlflow.tracking_uri` a run's config records is used only when the user gives the same one
    (--mlflow-uri or $MLFLOW_TRACKING_URI): MLflow sends the user's credentials to whatever it names."""
    from orchestration.tracking.store import safe_uri, user_uri
    if uri and not same_uri(run_root, uri, user_uri()):
        raise PoxmInputError(
            f"{src}: records mlflow.tracking_uri {safe_uri(uri)}, which poxm uses only when you give the same "
            f"one (--mlflow-uri {safe_uri(uri)} or $MLFLOW_TRACKING_URI), so that your MLflow credentials go "
            "only where you say")


def same_uri(run_root: Path, a: str | None, b: str | None) -> bool:
    """Whether two tracking URIs name the same store (resolved as poxm resolves them, user-info and a
    trailing '/' ignored); an invalid one names nothing."""
    from orchestration.tracking.store import resolve_uri, safe_uri

    def norm(x):
        try:
            return resolve_uri(Path(run_root), safe_uri(x)).rstrip("/")   # user-info off first: it sets nothing
        except PoxmInputError:
            return None
    return bool(a) and bool(b) and norm(a) is not None and norm(a) == norm(b)


def load_run_config(rd, overrides: list[str] | None = None):
    """A run directory's config (`rd`: a RunDir), read as data:

    - its `plugins` are imported only when the user supplies every one of them (--plugins or
      $POXM_PLUGINS), and then from the user's own folders (--plugin-path, $POXM_PLUGIN_PATH, sys.path),
      never from the `plugin_path` the run recorded; otherwise one line naming them;
    - its `resources.storage_path` (where Ray's pickled state is loaded from) and its
      `mlflow.tracking_uri` (where MLflow sends requests and credentials) are used only when the user
      gives the same one; otherwise one line."""
    from poxm_core.config.schema import load_config
    src = rd.config_source
    rec = recorded_settings(src)
    mods, paths = user_plugins()
    named = rec.get("plugins") or []
    if named:
        missing = [m for m in named if m not in mods]
        if missing:
            raise PoxmInputError(
                f"{src}: names plugins {', '.join(named)}, which poxm does not import from a run directory "
                f"(a plugin runs as code); if they are yours, pass --plugins {','.join(named)} (found on your "
                "PYTHONPATH or in --plugin-path DIR)")
    storage = rec.get("storage_path")
    if storage and not same_storage(storage, user_storage_path()):
        raise PoxmInputError(
            f"{src}: records resources.storage_path {storage}, where Ray's saved state (pickles) would be "
            f"loaded from; poxm uses it only when you give the same: --storage-path {storage}")
    check_recorded_uri(src, rd.root, rec.get("tracking_uri"))
    # the folders on sys.path are the user's alone, even when the run names no plugin
    pin = [f"plugin_path={json.dumps(paths if named else [])}"]
    return load_config(src, list(overrides or []) + pin)


def trusted_cache_dir(run_root: Path, recorded: str | None) -> Path:
    """The prepare cache a run directory's sweep continues with: the user's --cache-dir when given, else
    the default beside the run directory (<runs_dir>/cache, where `poxm run` puts it). A different
    cache_dir recorded in sweep.json is used only when the user gives the same: one line otherwise."""
    default = Path(run_root).resolve().parent / "cache"
    given = _user["cache_dir"]
    if given:
        return Path(given).expanduser().resolve()
    if recorded and Path(str(recorded)).expanduser().resolve() != default:
        raise PoxmInputError(
            f"{Path(run_root) / 'sweep.json'}: records the prepare cache {recorded}, which poxm fills and reads "
            f"only when you give the same: --cache-dir {recorded} (or --cache-dir DIR for another; default "
            f"{default})")
    return default


def refuse_links(run_root: Path) -> None:
    """A symbolic link anywhere inside the run directory is refused in one line naming it: poxm writes
    trials' rows, state and checkpoints there and deletes temporary files, and a link would carry each
    of those to its target. The run directory itself may be reached through a link the user gave."""
    todo = [str(run_root)]
    while todo:                 # os.scandir: each entry's type from the directory listing, no stat per file
        with os.scandir(todo.pop()) as it:
            for e in it:
                if e.is_symlink():
                    raise PoxmInputError(
                        f"{e.path}: a symbolic link inside the run directory (to {os.readlink(e.path)}); poxm reads "
                        "and writes only inside the run directory: replace the link with the folder or file itself, "
                        "or remove it")
                if e.is_dir(follow_symlinks=False):
                    todo.append(e.path)
