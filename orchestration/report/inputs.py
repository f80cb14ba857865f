"""The report's inputs from a run directory: result rows, prepare statistics, the resolved config
(its variants, selection criterion and training protocol) and the expected grid (sweep.json). Each
file is read defensively (an old run's report must still build) and a malformed one is one line."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from orchestration.report.aggregate import EXPECT_KEYS
from orchestration.selection import DEFAULT_CRITERION, POINT, check_criterion, check_rows
from poxm_core.common.errors import PoxmInputError
from poxm_core.common.results import COLUMNS, PREPARE_COLUMNS


def read_rows(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise PoxmInputError(f"{path}: result rows not found (run the sweep, or check the run directory)")
    try:
        df = pd.read_csv(path, keep_default_na=True)
    except pd.errors.EmptyDataError:
        return check_rows(pd.DataFrame(columns=COLUMNS))
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise PoxmInputError(f"{path}:1: expected columns {COLUMNS}, missing {missing}")
    try:
        return check_rows(df, name=str(path))
    except (ValueError, TypeError) as exc:
        raise PoxmInputError(f"{path}: {exc}") from None


def read_prepare(path: Path) -> pd.DataFrame:
    if not path.exists():
        return pd.DataFrame({c: pd.Series(dtype="float64" if c == "value" else "object") for c in PREPARE_COLUMNS})
    df = pd.read_csv(path)
    missing = [c for c in PREPARE_COLUMNS if c not in df.columns]
    if missing:
        raise PoxmInputError(f"{path}:1: expected columns {PREPARE_COLUMNS}, missing {missing}")
    df = df[PREPARE_COLUMNS].copy()
    for c in ("dataset", "variant", "metric"):
        df[c] = df[c].astype(str)
    df["value"] = pd.to_numeric(df["value"], errors="coerce")
    return df


def read_config(path: Path) -> dict:
    """The resolved config as plain data (not re-validated: a report of an old run must still build)."""
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise PoxmInputError(f"{path}: not valid YAML ({exc.__class__.__name__})") from None
    return data if isinstance(data, dict) else {}


def read_grid(path: Path) -> list[dict] | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise PoxmInputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    grid = data.get("grid") if isinstance(data, dict) else data
    if not isinstance(grid, list):
        raise PoxmInputError(f"{path}: expected a list of grid points (or {{'grid': [...]}}), got {type(grid).__name__}")
    for i, g in enumerate(grid):
        if not isinstance(g, dict) or any(k not in g for k in EXPECT_KEYS):
            raise PoxmInputError(f"{path}: grid point {i} must be an object with keys {POINT}, got {g!r}")
    return grid


def variant_params(config: dict, prepare: pd.DataFrame | None = None) -> dict[tuple[str, str], dict]:
    """(dataset, variant) -> the variant's config entry; a matched variant's T (solved at prepare time,
    per seed) shown from results/prepare.csv as 'solved: mean [min–max], ratio r for target t'."""
    out = {}
    for d in config.get("datasets", []) or []:
        for v in d.get("variants", []) or []:
            if isinstance(d, dict) and isinstance(v, dict) and "name" in d and "name" in v:
                out[(str(d["name"]), str(v["name"]))] = dict(v)
    if prepare is not None and len(prepare) and "metric" in prepare:
        for (ds, vn), entry in out.items():
            if entry.get("T") is not None or not entry.get("match"):
                continue
            here = prepare[(prepare["dataset"].astype(str) == ds) & (prepare["variant"].astype(str) == vn)]
            T = here[here["metric"] == "variant/T"]["value"].astype(float)
            r = here[here["metric"] == "match/ratio"]["value"].astype(float)
            t = here[here["metric"] == "match/target"]["value"].astype(float)
            if len(T):
                span = f" [{T.min():.3g}–{T.max():.3g}]" if len(T) > 1 else ""
                entry["T"] = (f"{T.mean():.3g}{span} solved: ratio {r.mean():.3f} for target {t.mean():.2f}"
                              if len(r) and len(t) else f"{T.mean():.3g}{span} solved")
    return out


def selection_criterion(config: dict) -> str:
    """config['selection']['criterion'] when present (read defensively: an old run's config has no
    such key), else the default, 'IS'. A value that cannot be a criterion is an input error."""
    sel = config.get("selection") if isinstance(config, dict) else None
    crit = sel.get("criterion") if isinstance(sel, dict) else None
    if crit is None or (isinstance(crit, str) and not crit.strip()):
        return DEFAULT_CRITERION
    try:
        return check_criterion(crit)
    except ValueError as exc:
        raise PoxmInputError(f"config.yaml: selection.criterion: {exc}") from None


def run_protocol(config: dict) -> str | None:
    """The training protocol the run recorded (config['training']['protocol'], e.g. 'paper' or
    'paper+init=logging'; a top-level 'protocol' is accepted too), or None when the config has none."""
    if not isinstance(config, dict):
        return None
    tr = config.get("training")
    for v in ((tr.get("protocol") if isinstance(tr, dict) else None), config.get("protocol")):
        if v is not None and not isinstance(v, (dict, list)) and str(v).strip():
            return str(v).strip()
    if isinstance(tr, dict):   # a resolved config: the protocol follows from its training settings
        from poxm_core.config.schema import TrainingConfig, protocol_name
        try:
            return protocol_name(TrainingConfig(**{k: v for k, v in tr.items() if k in TrainingConfig.model_fields}))
        except Exception:   # an older run's config (e.g. training.lr): the protocol was not recorded
            return None
    return None
