"""The one configuration schema: a sweep config is also what `poxm prepare` and `poxm train` read.

Frozen pydantic models (poxm_core/config/sweep_schema.py and data_schema.py; every class is importable
from here), loaded strictly: an unknown or misspelt key is a `PoxmInputError` naming the key path and
the nearest valid key. Layers: defaults < YAML file < `key=value` overrides. `resolved_yaml(cfg)` prints
the fully resolved config; `config_hash(obj)` identifies artifacts.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from poxm_core.common.errors import PoxmInputError, nearest
from poxm_core.config.data_schema import (DATA_FORMATS, DatasetConfig, LoggedColumnsConfig, LoggedConfig,  # noqa: F401  (part of the schema)
                                          SplitConfig, SyntheticConfig, VariantConfig)
from poxm_core.config.sweep_schema import (PAPER_PROTOCOL, PUBLISHED_METHOD_KEYS, MethodConfig, MlflowConfig,  # noqa: F401  (part of the schema)
                                           ModelConfig, ResourcesConfig, SelectionConfig, SweepConfig, TrainingConfig,
                                           import_plugins, protocol_name)


def _resolve_relative(data: dict, base: Path) -> dict:
    """Relative data files (datasets[].train/test) and plugin_path against the config file's folder;
    plugin_path defaults to that folder when plugins are named. A dataset with `folder` keeps its file
    names as written (they are resolved against that folder, under the data root, when read)."""
    def res(p):
        if isinstance(p, list):
            return [res(x) for x in p]
        return p if not isinstance(p, str) or Path(p).expanduser().is_absolute() else str((base / p).resolve())
    out = dict(data)
    if isinstance(out.get("datasets"), list):
        out["datasets"] = [({**d, **{k: res(d[k]) for k in ("train", "test") if d.get(k) is not None}}
                            if isinstance(d, dict) and d.get("folder") is None else d) for d in out["datasets"]]
    if out.get("plugins") and "plugin_path" not in out:
        out["plugin_path"] = [str(base.resolve())]
    elif isinstance(out.get("plugin_path"), list):
        out["plugin_path"] = res(out["plugin_path"])
    return out


# --------------------------------------------------------------------------------------------
# strict loading

def _check_keys(model: type[BaseModel], data: Any, loc: tuple, where) -> None:
    """Walk `data` against `model` and raise on the first unknown key, naming the nearest one, at the
    key's YAML line or the override that gave it (`where`: a checks.Locator)."""
    from poxm_core.config.checks import dotted
    if not isinstance(data, dict):
        return
    fields = {f.alias or k: f for k, f in model.model_fields.items()}   # a key spelt as its alias (split.from)
    for key, val in data.items():
        kloc = loc + (key,)
        if key not in fields and model.model_config.get("extra") != "allow":   # MethodConfig: a method's own options
            prefix = f"{dotted(loc)}." if loc else ""
            raise PoxmInputError(f"{where(kloc, given=True)}: unknown config key '{dotted(kloc)}'"
                                 + nearest(str(key), fields).replace("'", f"'{prefix}", 1))
        if key not in fields:
            continue
        ann = fields[key].annotation
        for sub in _submodels(ann):
            if isinstance(val, dict) and sub is not None:
                if _is_dict_of(ann):
                    for k2, v2 in val.items():
                        _check_keys(sub, v2, kloc + (k2,), where)
                else:
                    _check_keys(sub, val, kloc, where)
            elif isinstance(val, list):
                for i, item in enumerate(val):
                    _check_keys(sub, item, kloc + (i,), where)


def _submodels(ann: Any) -> list[type[BaseModel]]:
    import typing
    out: list[type[BaseModel]] = []
    stack = [ann]
    while stack:
        a = stack.pop()
        if isinstance(a, type) and issubclass(a, BaseModel):
            out.append(a)
        for arg in typing.get_args(a):
            stack.append(arg)
    return out


def _is_dict_of(ann: Any) -> bool:
    import typing
    return typing.get_origin(ann) is dict


def parse_override(text: str) -> tuple[list[str], Any]:
    """'training.lr=1e-4' -> (['training', 'lr'], 0.0001). Values are parsed as YAML."""
    if "=" not in text:
        raise PoxmInputError(f"override '{text}': expected key=value, e.g. training.epochs=3")
    key, _, raw = text.partition("=")
    if not key:
        raise PoxmInputError(f"override '{text}': empty key")
    try:
        val = yaml.safe_load(raw) if raw != "" else None
    except yaml.YAMLError as exc:
        raise PoxmInputError(f"override '{text}': value is not valid YAML ({exc.__class__.__name__})") from None
    return key.split("."), val


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Set nested keys; list items are addressed by index (datasets.0.variants.1.T=3)."""
    data = json.loads(json.dumps(data))  # deep copy of plain data
    for ov in overrides:
        path, val = parse_override(ov)
        cur: Any = data
        for part in path[:-1]:
            if isinstance(cur, list):
                try:
                    cur = cur[int(part)]
                except (ValueError, IndexError):
                    raise PoxmInputError(f"override '{ov}': '{part}' is not a valid index") from None
            else:
                cur = cur.setdefault(part, {})
        last = path[-1]
        if isinstance(cur, list):
            try:
                cur[int(last)] = val
            except (ValueError, IndexError):
                raise PoxmInputError(f"override '{ov}': '{last}' is not a valid index") from None
        else:
            cur[last] = val
    return data


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | None = None,
                data: dict | None = None) -> SweepConfig:
    """Load a SweepConfig from YAML (or a dict), apply overrides, validate strictly."""
    from poxm_core.config.checks import Locator, check_values, read_config_text, yaml_root
    source = str(path) if path is not None else "<config>"
    text = root = None
    if data is None:
        p = Path(path)  # type: ignore[arg-type]
        if not p.exists():
            raise PoxmInputError(f"{p}: config file not found")
        text = read_config_text(p)
        try:
            root = yaml_root(text, str(p))          # a duplicate key is an error naming its line
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f":{mark.line + 1}" if mark is not None else ""
            raise PoxmInputError(f"{p}{line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
        if not isinstance(data, dict):
            raise PoxmInputError(f"{p}: expected a mapping of config keys at the top level")
    data = apply_overrides(data, overrides or [])
    if path is not None and isinstance(data, dict):
        data = _resolve_relative(data, Path(path).parent)
    where = Locator(source, root, overrides)
    _check_keys(SweepConfig, data, (), where)
    check_values(SweepConfig, data, where)          # booleans as numbers, empty grids, names leaving runs_dir
    try:
        cfg = SweepConfig.model_validate(data)
    except ValidationError as exc:
        raise _located_error(exc, where) from None
    cfg._where = where
    return cfg


def _located_error(exc: ValidationError, where) -> PoxmInputError:
    """pydantic's first error as one line: where the key was given, the key, the message, the value as given."""
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    got = err.get("input")
    if not isinstance(got, (dict, list)):
        # One 'got', the value as given (a validator's ', got -5.0' of the coerced value becomes ', got -5');
        # none where the message already shows it (num_workers=2: ...).
        last = r"(,?) got ('[^']*'|\S+)$"
        if re.search(last, msg):
            msg = re.sub(last, lambda m: f"{m.group(1)} got {got!r}", msg)
        elif f"={got!r}" not in msg and f"={got}" not in msg:
            msg += f" (got {got!r})"
    key = f"config key '{loc}': " if loc else ""
    at = tuple(err["loc"])
    first = msg.split(" ", 1)[0].rstrip(":")
    if not at and first in SweepConfig.model_fields:   # a whole-config check naming its key ('seeds must ...')
        at = (first,)
    return PoxmInputError(f"{where(at)}: {key}{msg}")


def resolved_dict(cfg: BaseModel) -> dict:
    return cfg.model_dump(mode="json")


def resolved_yaml(cfg: BaseModel) -> str:
    """The fully resolved config as YAML (what `--print-config` prints and what runs log)."""
    return yaml.safe_dump(resolved_dict(cfg), sort_keys=False, default_flow_style=None)


def config_hash(obj: Any, n: int = 12) -> str:
    """Content hash of any JSON-able object or pydantic model (sorted keys)."""
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json")
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:n]


def default_data_root() -> Path:
    """$POXM_DATA_ROOT, else ../shared/data next to the repository (the layout of this workplace)."""
    env = os.environ.get("POXM_DATA_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parents[2]   # poxm_core/config/schema.py -> the repository
    return (here.parent / "shared" / "data").resolve()
