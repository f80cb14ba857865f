"""Checks of a config file's text and values that pydantic's lax parsing would let through, and the
YAML line of any config key, so every config error is one line `file:line: config key 'k': ...`.

  read_config_text   the file as UTF-8 (a directory or a non-UTF-8 byte is an input error)
  yaml_root          the composed YAML node tree; a duplicate key is an error naming both lines
  Locator            'file:line' of a pydantic loc such as ('datasets', 0, 'variants', 1, 'alpha'),
                     found by walking the node tree (not by searching for the key's text), or the
                     `key=value` override that set it
  check_values       booleans where numbers are expected (`epochs: true`), empty `datasets`/`methods`,
                     names that would leave runs_dir when they become a folder (`name: ../x`), a variant's
                     `match` (both T and match, an unknown statistic, a target outside (0, 1])
"""
from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from poxm_core.common.errors import PoxmInputError
from poxm_core.config.data_schema import match_problem


def read_config_text(p: Path) -> str:
    if p.is_dir():
        raise PoxmInputError(f"{p}: is a directory, expected a config YAML file"
                             + (" (to continue a run directory: `poxm resume " + str(p) + "`)"
                                if (p / "sweep.json").is_file() else ""))
    data = p.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise PoxmInputError(f"{p}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


def yaml_root(text: str, source: str):
    """The YAML node tree of `text` (None for an empty file); raises on a key given twice in one mapping."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    stack, seen_nodes = [(root, "")], set()
    while stack:
        node, where = stack.pop()
        if node is None or id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for k, v in node.value:
                key = str(k.value)
                path = f"{where}.{key}" if where else key
                if key in first and key != "<<":
                    raise PoxmInputError(f"{source}:{k.start_mark.line + 1}: duplicate config key '{path}' "
                                         f"(first given at line {first[key]}; give each key once)")
                first[key] = k.start_mark.line + 1
                stack.append((v, path))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                stack.append((v, f"{where}.{i}" if where else str(i)))
    return root


class Locator:
    """'file:line' (or "override 'k=v'") of a config key path."""

    def __init__(self, source: str, root=None, overrides: list[str] | None = None):
        self.source, self.root = source, root
        self.overrides = []
        for ov in overrides or []:
            key = ov.partition("=")[0]
            if key:
                self.overrides.append((key.split("."), ov))

    # where keys came from does not make two configs different (SweepConfig keeps its Locator to place
    # later checks; pydantic compares private attributes too)
    def __eq__(self, other) -> bool:
        return isinstance(other, Locator)

    __hash__ = object.__hash__

    def line(self, loc: tuple) -> int | None:
        node, line = self.root, None
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                hit = next(((k, v) for k, v in node.value if str(k.value) == str(part)), None)
                if hit is None:
                    if isinstance(part, str) and not re.fullmatch(r"[\w-]+", part):
                        continue          # a pydantic union tag such as 'function-after[...]'
                    break
                line, node = hit[0].start_mark.line + 1, hit[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
                if part >= len(node.value):
                    break
                node = node.value[part]
                line = node.start_mark.line + 1
            elif isinstance(part, str) and not re.fullmatch(r"[\w-]+", part):
                continue
            else:
                break
        return line

    def __call__(self, loc: tuple, given: bool = False) -> str:
        """given=True: `loc` is a key as given (an unknown one), so an override under it (trainig.epochs=3
        for 'trainig') is what gave it."""
        parts = [str(x) for x in loc]
        for path, ov in reversed(self.overrides):
            if parts[:len(path)] == path or (given and parts and path[:len(parts)] == parts):
                return f"override '{ov}'"
        line = self.line(tuple(loc)) if self.root is not None else None
        return f"{self.source}:{line}" if line else self.source


def dotted(loc: tuple) -> str:
    return ".".join(str(x) for x in loc)


# --------------------------------------------------------------------------------------------
# values

NAME_MODELS = ("SweepConfig", "DatasetConfig", "VariantConfig")   # their `name` becomes a folder name


def check_name(val: Any, loc: tuple, where) -> None:
    """A name that becomes a path component (run dir, trial dir, cache dir) must stay one component."""
    if not isinstance(val, str):
        return
    bad = (not val.strip() or val in (".", "..") or any(c in val for c in "/\\\x00") or val.startswith("~")
           or Path(val).is_absolute())
    if bad:
        good = re.sub(r"[^A-Za-z0-9._-]+", "-", val).strip(".-") or "sweep"
        raise PoxmInputError(f"{where(loc)}: config key '{dotted(loc)}': {val!r} is not a plain name (it becomes a "
                             f"folder under runs_dir): no '/', '\\', '..' or absolute paths; e.g. {good!r}")


def _numeric(ann) -> type | None:
    if ann is int or ann is float:
        return ann
    return None


def _check(ann: Any, val: Any, loc: tuple, where, default: Any = None) -> None:
    if val is None or ann is Any:
        return
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>") or \
            type(ann).__name__ == "UnionType":
        if isinstance(val, bool):
            if bool in args or Any in args or str in args:
                return
            num = next((a for a in args if _numeric(a)), None)
            if num is not None:
                _bool_error(num, val, loc, where, default)
        for a in args:
            if isinstance(a, type) and issubclass(a, BaseModel) and isinstance(val, dict):
                return _check(a, val, loc, where)
            o = typing.get_origin(a)
            if (o is list and isinstance(val, list)) or (o is dict and isinstance(val, dict)):
                return _check(a, val, loc, where)
        return
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        if not isinstance(val, dict):
            return
        fields = ann.model_fields
        for key, v in val.items():
            if key not in fields:
                continue                   # unknown keys are reported by config._check_keys
            if key == "name" and ann.__name__ in NAME_MODELS:
                check_name(v, loc + (key,), where)
            f = fields[key]
            _check(f.annotation, v, loc + (key,), where, f.default)
        return
    if origin is list and isinstance(val, list) and args:
        for i, item in enumerate(val):
            _check(args[0], item, loc + (i,), where)
        return
    if origin is dict and isinstance(val, dict) and len(args) == 2:
        for k, item in val.items():
            _check(args[1], item, loc + (k,), where)
        return
    num = _numeric(ann)
    if num is not None and isinstance(val, bool):
        _bool_error(num, val, loc, where, default)


def _bool_error(num: type, val: bool, loc: tuple, where, default: Any) -> None:
    eg = default if isinstance(default, (int, float)) and not isinstance(default, bool) else (1 if num is int else 1.0)
    what = "an integer" if num is int else "a number"
    raise PoxmInputError(f"{where(loc)}: config key '{dotted(loc)}': expected {what}, got the boolean {str(val).lower()} "
                         f"(e.g. {loc[-1]}: {eg})")


def check_values(model: type[BaseModel], data: dict, where) -> None:
    """Reject, before pydantic (which would coerce true -> 1), values that parse but cannot be meant."""
    if not isinstance(data, dict):
        return
    for key, example in (("datasets", "datasets: [{name: synthetic, variants: [{name: A, alpha: 0.5}]}]"),
                         ("methods", "methods: {poxm: {p: [10], lam: [0.9]}}")):
        if key in data and not data[key] and isinstance(data[key], (list, dict)):
            what = "dataset" if key == "datasets" else "method"
            raise PoxmInputError(f"{where((key,))}: config key '{key}': at least one {what} is needed "
                                 f"(e.g. {example})")
    _check(model, data, (), where)
    _check_matches(data, where)


def _check_matches(data: dict, where) -> None:
    """A variant's `match` entry, named by dataset, variant and key at its YAML line (or override)."""
    datasets = data.get("datasets")
    for i, d in enumerate(datasets if isinstance(datasets, list) else []):
        variants = d.get("variants") if isinstance(d, dict) else None
        for j, v in enumerate(variants if isinstance(variants, list) else []):
            if not isinstance(v, dict) or v.get("match") is None:
                continue
            bad = match_problem(v.get("T") is not None, v["match"])
            if bad is not None:
                loc = ("datasets", i, "variants", j, *bad[0].split(".", 1))
                raise PoxmInputError(f"{where(loc)}: config key '{dotted(loc)}': dataset '{d.get('name')}', "
                                     f"variant '{v.get('name')}': {bad[1]}")
