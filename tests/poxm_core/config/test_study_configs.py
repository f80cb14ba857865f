"""The study configs (configs/*.yaml): every one loads and plans (schema, methods, trials) on a CPU; the
confirmatory run's protocol (fresh splits, wide grids, 20 seeds, the declared family), the landscape's
variants (alpha and T as their names say), the DM ablations' arms (each command of its header), the wide
grids of the real-data configs; and, slow, the confirmatory config shrunk onto generated data end to end."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from poxm_core.config.schema import load_config, protocol_name
from poxm_core.methods import get_method
from poxm_core.training.spec import trial_specs

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "configs").glob("*.yaml"))
WIDE_P = [2, 5, 10, 20, 50, 100]
WIDE_LAM = [0.5, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5]
PAPER_P, PAPER_LAM = [10, 20, 50, 100], [0.7, 0.8, 0.9, 1.0]
LEARNED = ("dm", "banditnet", "pm_banditnet", "poxm", "wpoxm", "dr_poxm", "supervised_logs", "potec")


def _plan(cfg):
    """Every method's options validated (as the sweep plan does) and the trials; (trials, heads a trial)."""
    for name, mc in cfg.methods.items():
        get_method(name).validate(mc)
    specs = trial_specs(cfg)
    return len(specs), len(specs[0].heads)


def _grids(cfg) -> dict[str, dict[str, list]]:
    out = {}
    for name, mc in cfg.methods.items():
        m = get_method(name)
        opts = m.validate(mc)
        g = {}
        if m.uses_p:
            g[m.size_key] = list(getattr(opts, m.size_key))
        if m.uses_lam:
            g["lam"] = list(opts.lam)
        out[name] = g
    return out


@pytest.mark.parametrize("path", CONFIGS)
def test_every_config_loads_and_plans(path):
    cfg = load_config(ROOT / path)
    n_trials, n_heads = _plan(cfg)
    assert n_trials >= 1 and n_heads >= 1


def test_confirmatory_protocol():
    cfg = load_config(ROOT / "configs/confirmatory.yaml")
    assert cfg.seeds == list(range(20)) and cfg.selection.criterion == "IS" and protocol_name(cfg.training) == "paper"
    by = {d.name: d for d in cfg.datasets}
    assert list(by) == ["bibtex", "delicious", "stackex-cooking", "corel5k", "corel5k-redraw"]
    assert all([v.name for v in d.variants] == ["P", "A"] for d in cfg.datasets)
    for name, share in (("bibtex", 2515 / 7395), ("delicious", 3185 / 16105)):       # the given split, re-drawn
        s = by[name].split
        assert s.union and s.seed != 0 and round(s.test_fraction * (7395 if name == "bibtex" else 16105)) == \
            round(share * (7395 if name == "bibtex" else 16105))
    for name in ("stackex-cooking", "corel5k", "corel5k-redraw"):                   # a split seed never used
        assert by[name].split.seed != 0 and not by[name].split.union
    assert [d.name for d in cfg.datasets if d.split.redraw_per_seed] == ["corel5k-redraw"]
    grids = _grids(cfg)
    assert set(LEARNED) | {"logging", "skyline", "skyline_e2e"} == set(grids)
    for name, g in grids.items():                                                   # one wide grid for all
        assert all(v == (WIDE_LAM if k == "lam" else WIDE_P) for k, v in g.items()), name
    assert _plan(cfg) == (200, 186)


def test_confirmatory_declares_its_family_from_the_claim_registry():
    from orchestration.report.claims_registry import ALL_CLAIMS, claim_of

    cfg = load_config(ROOT / "configs/confirmatory.yaml")
    fam = cfg.claims
    assert fam is not None and fam.criterion == "IS" and fam.alpha == 0.05
    keys = [e.claim for e in fam.family]
    assert len(keys) == len(set(keys)) and all(claim_of(k) is not None for k in keys)
    assert {f"ranking_{m}" for m in LEARNED} <= set(keys)                          # every learned method's ranking
    paper = {c.key for c in ALL_CLAIMS if c.source == "paper"} - {"p_grows"}        # needs A and C: not here
    assert paper <= set(keys) and "p_grows" not in keys
    assert all(e.test == "crossed_t" and e.datasets is None and e.variants is None for e in fam.family)


def test_landscape_variants_say_their_alpha_and_T():
    cfg = load_config(ROOT / "configs/landscape.yaml")
    assert [d.name for d in cfg.datasets] == ["bibtex", "corel5k"] and cfg.seeds == [0, 1, 2, 3, 4]
    for d in cfg.datasets:
        cells = set()
        for v in d.variants:
            m = re.fullmatch(r"a([\d.]+)-(?:T([\d.]+)|P)", v.name)
            assert m and float(m.group(1)) == v.alpha and v.beta == 0.0, v.name
            if m.group(2) is None:
                assert v.matched and v.match == {"logging_to_skyline_R@5": 0.51}
                cells.add((v.alpha, "P"))
            else:
                assert not v.matched and float(m.group(2)) == v.T
                cells.add((v.alpha, v.T))
        assert cells == {(a, t) for a in (0.05, 0.1, 0.2, 0.4) for t in (0.5, 1.0, 2.0, "P")}
    grids = _grids(cfg)
    assert set(LEARNED) <= set(grids)
    assert all(v == (PAPER_LAM if k == "lam" else PAPER_P) for g in grids.values() for k, v in g.items())
    assert _plan(cfg) == (160, 77)


def _arms() -> list[tuple[str, list[str]]]:
    """(name, overrides) of each `poxm run configs/ablations-dm.yaml ...` command in the config's header."""
    out = []
    for line in (ROOT / "configs/ablations-dm.yaml").read_text().splitlines():
        m = re.match(r"#\s+poxm run configs/ablations-dm\.yaml (.*)$", line)
        if m:
            ov = shlex.split(m.group(1))
            out.append((next(o.split("=", 1)[1] for o in ov if o.startswith("name=")), ov))
    return out


def test_dm_ablation_arms_each_change_one_thing():
    arms = dict(_arms())
    assert set(arms) == {"ablation-dm-baseline", "ablation-dm-warm", "ablation-dm-control", "ablation-dm-hidden256",
                         "ablation-dm-hidden64", "ablation-dm-hidden512", "ablation-dm-loss-candidates",
                         "ablation-dm-loss-all"}
    cfgs = {name: load_config(ROOT / "configs/ablations-dm.yaml", ov) for name, ov in arms.items()}
    base = cfgs["ablation-dm-baseline"]
    assert base.training.hidden == 128 and protocol_name(base.training) == "paper" and base.seeds == list(range(10))
    assert [v.name for d in base.datasets for v in d.variants] == ["P"] * 4
    assert protocol_name(cfgs["ablation-dm-warm"].training) == "paper+network_inputs=sparse+encoder,init=logging"
    assert protocol_name(cfgs["ablation-dm-control"].training) == "paper+network_inputs=sparse+encoder"
    assert cfgs["ablation-dm-warm"].training.hidden == cfgs["ablation-dm-control"].training.hidden == base.model.dim
    assert {cfgs[f"ablation-dm-hidden{h}"].training.hidden for h in (64, 256, 512)} == {64, 256, 512}
    for on in ("candidates", "all"):
        mc = get_method("dm").validate(cfgs[f"ablation-dm-loss-{on}"].methods["dm"])
        assert mc.loss_on == on and cfgs[f"ablation-dm-loss-{on}"].training == base.training
    for name, cfg in cfgs.items():
        assert cfg.name == name and _plan(cfg) == (40, 19)


@pytest.mark.parametrize("path", ["configs/real-data.yaml", "configs/bibtex.yaml", "configs/delicious.yaml",
                                  "configs/corel5k.yaml", "configs/stackex-cooking.yaml"])
def test_real_data_configs_search_the_wide_grids_the_papers_a_subset(path):
    cfg = load_config(ROOT / path)
    grids = _grids(cfg)
    assert set(LEARNED) <= set(grids)
    for name, g in grids.items():
        for k, v in g.items():
            assert v == (WIDE_LAM if k == "lam" else WIDE_P), (name, k)
            assert set(PAPER_LAM if k == "lam" else PAPER_P) <= set(v)
    assert "the paper's grid" in (ROOT / path).read_text()


def test_quickstart_keeps_its_small_grid():
    grids = _grids(load_config(ROOT / "configs/quickstart.yaml"))
    assert max(len(v) for g in grids.values() for v in g.values()) <= 3


# --------------------------------------------------------------------------------------------
# the confirmatory config, shrunk, end to end

def _shrunk_confirmatory(folder: Path) -> Path:
    """configs/confirmatory.yaml on generated XC files (400 / 150 rows, D 200, L 40): its matched variant P,
    claims, methods and split keys, one fixed union re-split and one re-drawn per seed, 2 seeds, 1 epoch,
    grids cut to their edges (p and k {2, 10}, lambda {0.5, 1.5})."""
    from poxm_core.data.synthetic import make_synthetic

    data = make_synthetic(400, 150, 200, 40, 3.0, 0)
    for part, name in ((data.train, "tiny_train.txt"), (data.test, "tiny_test.txt")):
        lines = [f"{part.X.shape[0]} {part.X.shape[1]} {part.Y.shape[1]}"]
        for i in range(part.X.shape[0]):
            x = part.X.getrow(i)
            lines.append(",".join(map(str, part.Y.getrow(i).indices)) + " "
                         + " ".join(f"{j}:{v:.6g}" for j, v in zip(x.indices, x.data)))
        (folder / name).write_text("\n".join(lines) + "\n")
    c = yaml.safe_load((ROOT / "configs/confirmatory.yaml").read_text())
    common = {"format": "xc", "folder": str(folder), "train": "tiny_train.txt", "test": "tiny_test.txt",
              "propensity_A": 0.55, "propensity_B": 1.5, "variants": c["datasets"][0]["variants"][:1]}   # P
    split = {"from": "union", "test_fraction": 0.25, "seed": 2026}
    c["datasets"] = [{"name": "tiny", **common, "split": split},
                     {"name": "tiny-redraw", **common, "split": {**split, "redraw_per_seed": True}}]
    c.update(seeds=[0, 1], mlflow={"enabled": False}, resources={"cpus_per_trial": 1, "max_failures": 0},
             model={"dim": 8, "epochs": 2, "n_candidates": 20, "slate_size": 5},
             training={"epochs": 1, "batch_size": 64, "hidden": 8, "mc_slates": 2})
    for m in c["methods"].values():
        for key, small in (("p", [2, 10]), ("k", [2, 10]), ("lam", [0.5, 1.5])):
            if key in m:
                m[key] = small
    path = folder / "confirmatory-tiny.yaml"
    path.write_text(yaml.safe_dump(c, sort_keys=False))
    return path


@pytest.mark.slow
def test_confirmatory_config_shrunk_end_to_end(tmp_path, capsys):
    import numpy as np
    import pandas as pd
    import scipy.sparse as sp
    from poxm_process import poxm_in_process

    from poxm_core.prepare.cache import cache_keys, level_dir

    path = _shrunk_confirmatory(tmp_path)
    runs = tmp_path / "runs"
    res = poxm_in_process(capsys, "run", path, "--runs-dir", runs, "--quiet")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    run_dir = next(runs.glob("confirmatory-*"))
    rows = pd.read_csv(run_dir / "results" / "rows.csv")
    assert set(rows.dataset) == {"tiny", "tiny-redraw"} and set(rows.variant) == {"P"}
    heads = rows[["method", "p", "lam"]].drop_duplicates()
    for m in ("pm_banditnet", "poxm", "wpoxm", "potec"):                              # the grids' edges trained
        got = heads[heads.method == m]
        assert {2, 10} == set(got.p.dropna().astype(int)) and {0.5, 1.5} == set(got.lam.dropna()), m
    # the declared family is in the run's saved config, as written
    saved = load_config(run_dir / "config.yaml")
    assert [e.claim for e in saved.claims.family] == [e.claim for e in load_config(ROOT / "configs/confirmatory.yaml").claims.family]
    claims = pd.read_csv(run_dir / "report" / "tables" / "claims.csv")
    assert {"ranking_poxm", "poxm_vs_potec", "poxm_vs_logging"} <= set(claims.claim)
    # the fixed union re-split: one data level for both seeds; the re-drawn one: one per seed, other test rows
    cache = runs / "cache"
    tiny = {s: level_dir(cache, "data", cache_keys(saved, "tiny", s).data[1]) for s in (0, 1)}
    red = {s: level_dir(cache, "data", cache_keys(saved, "tiny-redraw", s).data[1]) for s in (0, 1)}
    assert tiny[0] == tiny[1] and red[0] != red[1] and all(d.is_dir() for d in (*tiny.values(), *red.values()))
    Y = {k: sp.load_npz(d / "Y_test.npz") for k, d in (("t", tiny[0]), ("r0", red[0]), ("r1", red[1]))}
    assert all(y.shape == (138, 40) for y in Y.values())                             # round(0.25 x 550)
    assert (Y["r0"] != Y["r1"]).nnz > 0 and (Y["t"] != Y["r0"]).nnz > 0
    prep = pd.read_csv(run_dir / "results" / "prepare.csv")
    n_test = prep[prep.metric == "data/N_test"]
    assert np.all(n_test.value == 138) and set(n_test.dataset) == {"tiny", "tiny-redraw"}
