"""`poxm prepare`: every dataset x seed of a config prepared (poxm_core.prepare.pipeline), its statistics as
a table (logging model P@k, logging policy R/nDCR/PSR@k, covering) and the shapes found in the files.
A variant matched to a logging quality (`match`) shows the T solved, its target and the ratio reached,
the reference's P@5 and the held-out row count (docs/artifacts.md).
"""
from __future__ import annotations

import os
from pathlib import Path

from tqdm.auto import tqdm

from poxm_core.config.schema import SweepConfig, load_config, resolved_yaml
from poxm_core.prepare.pipeline import COVER_KS, prepare
from poxm_core.prepare.cache import cache_keys, level_dir, read_manifest


def summary_row(cache_dir: Path | str, dataset: str, seed: int, variant_dir: Path) -> dict:
    """Flat statistics of one prepared variant (fractions in [0, 1]) from the manifests."""
    cache_dir = Path(cache_dir)
    man = read_manifest(variant_dir)
    par = {k: read_manifest(cache_dir / p) for k, p in man["key"]["parents"].items()}
    v = man["key"]["variant"]
    if "logged" in man["key"]:    # a logged dataset: no logging model, no labels (logged_levels.prepare_logged)
        st = man["stats"]
        row = {"dataset": dataset, "seed": seed, "variant": v["name"], "selector": v["selector"], "K": st["K"],
               "n_fit": st["n_fit"], "n_val": st["n_val"]}
        row.update({f"click_rate_{k}": val for k, val in st["log_reward_rate"].items()})
        row.update({f"phi_share_target@{p}": val for p, val in st.get("phi_reward_share_target", {}).items()})
        row["seconds"] = round(sum(m["seconds"] for m in (man, *par.values())), 2)
        row["variant_hash"] = man["hash"]
        return row
    match = man["stats"].get("match")
    row = {"dataset": dataset, "seed": seed, "variant": v["name"], "alpha": par["model"]["key"]["alpha"],
           "beta": v["beta"], "T": man["stats"].get("T", v.get("T")), "K": man["stats"]["K"]}
    if match is not None:   # the solved T above; what it was solved for, on which rows
        row.update({"target": match["target"], "ratio": match["ratio"],
                    "ref_P@5": match["reference_P@5"], "n_heldout": match["n_heldout"]})
    row.update({k: val for k, val in par["candidates"]["stats"]["logging_model_test"].items()
                if k.startswith("P@")})
    sto = man["stats"]["logging_policy_test"]
    row.update({k: sto[k] for k in ("R@1", "R@3", "R@5", "nDCR@3", "nDCR@5", "PSR@3", "PSR@5")})
    cover = man["stats"]["covering_test"]
    row.update({f"cover@{k}": cover[str(k)] for k in COVER_KS if str(k) in cover})
    row["seconds"] = round(sum(m["seconds"] for m in (man, *par.values())), 2)
    row["variant_hash"] = man["hash"]
    return row


def prepare_all(cfg: SweepConfig, cache_dir: Path | str, progress: bool = True) -> list[dict]:
    """`prepare` every dataset x seed of the config; one summary row per (dataset, seed, variant)."""
    rows = []
    jobs = [(d.name, s) for d in cfg.datasets for s in cfg.seeds]
    for name, seed in tqdm(jobs, desc="prepare", disable=not progress or len(jobs) < 2):
        for vdir in prepare(cfg, name, seed, cache_dir, progress=progress).values():
            rows.append(summary_row(cache_dir, name, seed, vdir))
    return rows


def format_shapes(cfg: SweepConfig, cache_dir: Path | str) -> str:
    """One line per dataset: the shape found in its files (N_train, N_test, D, L) and its propensity A, B."""
    lines = ["datasets (shapes as read):"]
    for d in cfg.datasets:
        if d.logged is not None:
            from poxm_core.prepare.logged_levels import logged_keys
            st = read_manifest(level_dir(Path(cache_dir), "data", logged_keys(cfg, d.name, cfg.seeds[0])[0][1]))["stats"]
            lines.append(f"  {d.name}: logged feedback, N_train={st['N_train']}, N_test={st['N_test']}, D={st['D']}, "
                         f"actions={st['L']}, slots={st['slate_size']}"
                         + (f", target log N={st['N_target']}" if "N_target" in st else ""))
            continue
        keys = cache_keys(cfg, d.name, cfg.seeds[0])
        man = read_manifest(level_dir(Path(cache_dir), "data", keys.data[1]))
        st = man["stats"]
        lines.append(f"  {d.name}: N_train={st['N_train']}, N_test={st['N_test']}, D={st['D']}, L={st['L']}, "
                     f"labels/instance={st['labels_per_instance']:.2f}, propensity A={st['propensity_A']:g}, "
                     f"B={st['propensity_B']:g}")
    return "\n".join(lines)


def format_table(rows: list[dict]) -> str:
    """The statistics as a fixed-width table, metrics x 100 (as the paper reports them)."""
    import pandas as pd

    if not rows:
        return "(nothing prepared)"
    df = pd.DataFrame(rows).drop(columns=["variant_hash"])
    metric_cols = [c for c in df.columns if "@" in c or c in ("target", "ratio") or c.startswith("click_rate_")]
    df[metric_cols] = df[metric_cols] * 100
    if "selector" in df.columns:     # logged feedback: no logging model, no labels (summary_row)
        head = ("logged feedback: K actions in C(x) ordered by the selector, fit / validation rows, each log's click "
                "rate (click_rate_<log>) and the share of the target log's clicks inside Phi^p "
                "(phi_share_target@p), x100")
    else:
        head = "logging model P@k (greedy), logging policy R/nDCR/PSR@k (stochastic) and covering on test, x100"
    if "ratio" in df.columns:
        head += ("\nmatched variants: T solved so that rho's R@5 / the reference's P@5 (ref_P@5) on n_heldout "
                 "training rows reaches target; ratio = what it reached, x100")
        df["n_heldout"] = df["n_heldout"].map(lambda x: "" if pd.isna(x) else str(int(x)))
    fmt = {"T": lambda x: f"{x:.4g}"}
    return head + "\n" + df.to_string(index=False, float_format=lambda x: f"{x:.2f}", formatters=fmt, na_rep="")


def prepare_command(config_path: str | os.PathLike, overrides: list[str] | None = None, print_config: bool = False,
                    cache_dir: str | os.PathLike | None = None) -> int:
    """`poxm prepare CONFIG [key=value ...]`: prepare every dataset x seed, print the statistics; 0 on success."""
    cfg = load_config(config_path, overrides or [])
    if print_config:
        print(resolved_yaml(cfg))
    cache = Path(cache_dir) if cache_dir is not None else Path(cfg.runs_dir) / "cache"
    rows = prepare_all(cfg, cache, progress=True)
    print(format_shapes(cfg, cache))
    print(format_table(rows))
    print(f"cache: {cache.resolve()}")
    return 0
