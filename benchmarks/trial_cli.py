"""What the trial profilers share: the arguments that pick one trial of a config (config, overrides,
--cache-dir, --dataset, --variant, --seed) and loading that trial's prepared inputs (prepared if missing)."""
from __future__ import annotations

from pathlib import Path


def add_trial_args(ap) -> None:
    ap.add_argument("config")
    ap.add_argument("overrides", nargs="*", help="config overrides key=value")
    ap.add_argument("--cache-dir", required=True, type=Path, help="prepare cache (prepared if missing)")
    ap.add_argument("--dataset")
    ap.add_argument("--variant")
    ap.add_argument("--seed", type=int)


def load_trial(a):
    """(config, trial spec, Prepared) of the trial the arguments pick (`pick_trial`'s defaults otherwise)."""
    from poxm_core.config.schema import load_config
    from poxm_core.prepare.pipeline import load_prepared
    from poxm_core.training.command import pick_trial

    cfg = load_config(a.config, a.overrides)
    spec = pick_trial(cfg, a.dataset, a.variant, seed=a.seed)
    return cfg, spec, load_prepared(cfg, spec.dataset, spec.variant, spec.seed, a.cache_dir)
