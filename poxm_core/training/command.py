"""`poxm train CONFIG [key=value ...] --out DIR [--dataset D --variant V --method M --seed S]`: one trial.

Defaults pick the config's first dataset, its first variant and the first seed; --method picks one
method with its whole (p, lam) grid as the heads of one trial (without --method: every method of the
config in one trial, as group_by=seed does). The prepared inputs come from `load_prepared` (built
and cached under cache_dir, default <runs_dir>/cache, when missing).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from poxm_core.config.schema import load_config, resolved_yaml
from poxm_core.common.errors import PoxmInputError, nearest
from poxm_core.methods import head_grid
from poxm_core.training.spec import TrialSpec

__all__ = ["train_command", "pick_trial", "final_table"]

TABLE_METRICS = ("SNIS", "R@5", "nDCR@5", "PSR@5", "P@5")


def pick_trial(cfg, dataset: str | None = None, variant: str | None = None, method: str | None = None,
               seed: int | None = None) -> TrialSpec:
    """The TrialSpec `poxm train` runs (see the module docstring for the defaults)."""
    dcfg = cfg.dataset(dataset) if dataset is not None else cfg.datasets[0]
    vnames = [v.name for v in dcfg.variants]
    if variant is not None and variant not in vnames:
        raise PoxmInputError(f"--variant: unknown variant '{variant}' of dataset '{dcfg.name}'" + nearest(variant, vnames))
    if seed is not None and seed not in cfg.seeds:
        raise PoxmInputError(f"--seed: {seed} is not one of the config's seeds {cfg.seeds}")
    if method is not None and method not in cfg.methods:
        raise PoxmInputError(f"--method: '{method}' is not configured under methods:" + nearest(method, cfg.methods))
    names = [method] if method is not None else list(cfg.methods)
    try:
        heads = tuple(h for m in names for h in head_grid(m, cfg.methods[m]))
    except PoxmInputError as exc:            # a method's own option: named at its file line (or override)
        raise cfg.located(exc) from None
    return TrialSpec(dcfg.name, variant if variant is not None else vnames[0],
                     seed if seed is not None else cfg.seeds[0], heads)


def final_table(df: pd.DataFrame, metrics=TABLE_METRICS) -> pd.DataFrame:
    """One line per head: the final validation SNIS and test metrics (x100 for the test metrics)."""
    fin = df[df["final"] & df["metric"].isin(metrics) & df["split"].isin(["val", "test"])].copy()
    fin["lam"] = fin["lam"].fillna(-1.0)
    fin.loc[fin["split"] == "test", "value"] *= 100
    t = fin.pivot_table(index=["method", "p", "lam"], columns="metric", values="value", sort=False)
    return t[[m for m in metrics if m in t.columns]]


def train_command(config_path, overrides=None, out_dir=None, print_config: bool = False, dataset=None,
                  variant=None, method=None, seed=None, cache_dir=None, progress: bool = True) -> pd.DataFrame | None:
    """Load the config, pick one trial, load its prepared inputs, run it into `out_dir`, print a table."""
    from poxm_core.prepare.pipeline import load_prepared
    from poxm_core.training.trainer import run_trial

    cfg = load_config(config_path, list(overrides or []))
    if print_config:
        print(resolved_yaml(cfg), end="")
        return None
    if out_dir is None:
        raise PoxmInputError("--out: an output directory is required")
    spec = pick_trial(cfg, dataset, variant, method, seed)
    cache = Path(cache_dir) if cache_dir is not None else Path(cfg.runs_dir) / "cache"
    prepared = load_prepared(cfg, spec.dataset, spec.variant, spec.seed, cache)
    df = run_trial(cfg, spec, prepared, Path(out_dir), progress=progress)
    with pd.option_context("display.width", 160, "display.max_columns", 20, "display.float_format", "{:.3f}".format):
        print(f"{spec.name}: {len(spec.heads)} head(s), {cfg.training.epochs} epoch(s) -> {out_dir}")
        print(final_table(df).to_string())
    return df
