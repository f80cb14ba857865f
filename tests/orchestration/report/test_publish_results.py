"""scripts/publish_results.py: a published folder (final rows, logging statistics, config) rebuilt into a
report, completed with trials trained later by `poxm train`, or reduced to one dataset; refusals are
one line, exit 2, nothing written."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from orchestration.report.claims import claims_markdown, read_claims
from orchestration.report.instances import read_rows, row_files
from poxm_core.training.command import pick_trial
from poxm_core.training.trainer import run_trial
from tests.trial_fixtures import tiny_config, tiny_prepared

pytestmark = pytest.mark.slow        # trains four tiny trials and builds three reports: about 16 s

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("publish_results", ROOT / "scripts" / "publish_results.py")
pub = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pub)

METHODS = {"logging": {}, "dm": {"lr": 0.01}, "poxm": {"p": [4, 8], "lam": [0.5], "lr": 0.01}}


def _trial(tmp: Path, seed: int, **training) -> Path:
    cfg = tiny_config(METHODS, epochs=1, seed=seed, **training)
    cfg = cfg.model_copy(update={"seeds": [0, 1, 2]})
    out = tmp / f"trial-s{seed}"
    run_trial(cfg, pick_trial(cfg, seed=seed), tiny_prepared(seed=seed), out, progress=False)
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A published folder holding seed 0 of a 3-seed config, and trials of seeds 1 and 2 trained later."""
    tmp = tmp_path_factory.mktemp("pub")
    t0, t1, t2 = (_trial(tmp, s) for s in (0, 1, 2))
    src = tmp / "published"
    src.mkdir()
    saved = yaml.safe_load((t0 / "config.yaml").read_text())["config"]
    (src / "config.yaml").write_text(yaml.safe_dump(saved))
    rows = pd.read_csv(t0 / "rows.csv")
    rows[rows["final"]].to_csv(src / "rows.csv.gz", index=False)
    pd.DataFrame({"dataset": ["tiny"] * 3, "variant": ["A"] * 3, "seed": [0, 1, 2], "metric": ["covering@1"] * 3,
                  "value": [0.5, 0.5, 0.5]}).to_csv(src / "prepare.csv", index=False)
    return tmp, src, t1, t2


def test_added_trials_join_the_report(folder):
    tmp, src, t1, t2 = folder
    out = tmp / "done"
    assert pub.main([str(src), "--add", str(t1), str(t2), "--out", str(out)]) == 0
    rows = read_rows(out)
    assert [f.name for f in row_files(out)] == ["rows-tiny.csv.xz"]       # one file per dataset
    # the claims' test-set term as the sums the report read (instance_moments), not the trials' arrays
    assert [f.name for f in (out / "moments").iterdir()] == ["tiny_A.npz.xz"] and not (out / "instances").exists()
    assert sorted(rows["seed"].unique()) == [0, 1, 2] and rows["final"].all()
    # the report is the one `poxm report` builds: claims over the 3 seeds, the folder's config kept as it was
    claims = pd.read_csv(out / "tables" / "claims.csv")
    assert set(claims["n"]) == {3}
    assert (out / "config.yaml").read_text() == (src / "config.yaml").read_text()
    index = (out / "index.md").read_text()
    assert "Rebuilt from the published final rows" in index and not (out / "index.html").exists()
    assert "[selection.csv](selection.csv)" in index       # the run's one selection file, beside index.md
    # the selection read validation rows only: the chosen POXM head per seed is the best val/IS one
    sel = pd.read_csv(out / "selection.csv")
    val = rows[(rows["split"] == "val") & (rows["metric"] == "IS") & (rows["method"] == "poxm")]
    best = val.loc[val.groupby("seed")["value"].idxmax()].set_index("seed")["p"]
    chosen = sel[(sel["method"] == "poxm") & (sel["selection"] == "is")].set_index("seed")["p"]
    assert chosen.sort_index().tolist() == best.sort_index().tolist()


def test_refusals_write_nothing(folder, capsys):
    tmp, src, t1, _ = folder
    out = tmp / "refused"
    # a trial of a seed the folder holds
    t0 = tmp / "trial-s0"
    assert pub.main([str(src), "--add", str(t0), "--out", str(out)]) == 2
    assert "tiny/A/0 is already in the published rows" in capsys.readouterr().err
    # a trial of another config (fewer Monte-Carlo slates)
    other = _trial(tmp / "other", 1, mc_slates=4)
    assert pub.main([str(src), "--add", str(other), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training.mc_slates differs from the published config" in err[0]
    # an unknown dataset, and a folder that is not a published one
    assert pub.main([str(src), "--dataset", "bibtex", "--out", str(out)]) == 2
    assert "--dataset bibtex: not in the published config (datasets: tiny)" in capsys.readouterr().err
    assert pub.main([str(t1), "--out", str(out)]) == 2
    assert "not a published results folder (no rows-<dataset>.csv.xz or rows.csv.gz)" in capsys.readouterr().err
    assert not out.exists()


def test_one_dataset_keeps_its_rows_and_config(folder):
    tmp, src, t1, _ = folder
    out = tmp / "tiny-only"
    assert pub.main([str(src), "--add", str(t1), "--dataset", "tiny", "--out", str(out)]) == 0
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["name"] == "tiny" and [d["name"] for d in cfg["datasets"]] == ["tiny"]
    src_cfg = yaml.safe_load((src / "config.yaml").read_text())
    assert {k: v for k, v in cfg.items() if k != "name"} == {k: v for k, v in src_cfg.items() if k != "name"}
    summary = claims_markdown([read_claims(out)])
    assert summary.splitlines()[0] == ("| claim (IS; H holds, F fails, ? undecided, n too few seeds, e exploratory; Holm "
                                       "over each report's declared family) | dataset | A |")
    assert "| POXM > logging policy | tiny (2) |" in summary


def test_rebuilt_in_place(folder):
    tmp, src, t1, _ = folder
    here = tmp / "in-place"
    shutil.copytree(src, here)
    assert pub.main([str(here), "--add", str(t1), "--out", str(here)]) == 0
    assert sorted(read_rows(here)["seed"].unique()) == [0, 1] and not (here / "rows.csv.gz").exists()
    assert (here / "index.md").is_file() and not [p for p in tmp.iterdir() if p.name.startswith(".in-place")]
    # the source is now the completed folder: adding the same trial again is refused, nothing changes
    before = (here / "rows-tiny.csv.xz").read_bytes()
    assert pub.main([str(here), "--add", str(t1), "--out", str(here)]) == 2
    assert (here / "rows-tiny.csv.xz").read_bytes() == before


def _published(trial: Path, out: Path, variant: str | None = None) -> Path:
    """A published folder of one trial (its final rows, config, logging statistics), its variant renamed
    to `variant` where given (a stage of the same declared config that ran another variant)."""
    out.mkdir(parents=True)
    cfg = yaml.safe_load((trial / "config.yaml").read_text())["config"]
    rows = pd.read_csv(trial / "rows.csv")
    rows = rows[rows["final"]].copy()
    seed = int(rows["seed"].iloc[0])
    if variant is not None:
        cfg["datasets"][0]["variants"] = [dict(v, name=variant) for v in cfg["datasets"][0]["variants"]]
        rows["variant"] = variant
    (out / "config.yaml").write_text(yaml.safe_dump(cfg))
    rows.to_csv(out / "rows.csv.gz", index=False)
    pd.DataFrame({"dataset": ["tiny"], "variant": [variant or "A"], "seed": [seed], "metric": ["covering@1"],
                  "value": [0.5]}).to_csv(out / "prepare.csv", index=False)
    return out


def test_joined_stages_equal_the_trials_added(folder):
    """Stages of one config published apart (seeds 1 and 2 here) joined to the source give the report that
    adding their trials gives; a stage of another variant widens the config's variants."""
    tmp, src, t1, t2 = folder
    stages = [_published(t, tmp / "stages" / t.name) for t in (t1, t2)]
    joined, added = tmp / "joined", tmp / "added"
    assert pub.main([str(src), "--join", *map(str, stages), "--out", str(joined)]) == 0
    assert pub.main([str(src), "--add", str(t1), str(t2), "--out", str(added)]) == 0
    assert sorted(read_rows(joined)["seed"].unique()) == [0, 1, 2]
    for table in ("claims.csv", "headline_tiny.csv"):
        assert (joined / "tables" / table).read_text() == (added / "tables" / table).read_text()
    # the folder rebuilds from itself, and says so with the command that does it
    assert "publish_results.py " + str(joined) + " --out " + str(joined) in (joined / "index.md").read_text()
    assert pub.main([str(joined), "--out", str(joined), "--check"]) == 0

    other = _published(t1, tmp / "stages" / "variant-B", variant="B")
    both = tmp / "both-variants"
    assert pub.main([str(src), "--join", str(other), "--out", str(both)]) == 0
    cfg = yaml.safe_load((both / "config.yaml").read_text())
    assert [v["name"] for v in cfg["datasets"][0]["variants"]] == ["A", "B"]
    assert set(map(tuple, read_rows(both)[["variant", "seed"]].drop_duplicates().values)) == {("A", 0), ("B", 1)}


def test_join_refusals_write_nothing(folder, capsys):
    tmp, src, t1, _ = folder
    out = tmp / "join-refused"
    # the same (dataset, variant, seed) twice
    again = _published(tmp / "trial-s0", tmp / "again" / "s0")
    assert pub.main([str(src), "--join", str(again), "--out", str(out)]) == 2
    assert "tiny/A/0 is already in the source's rows (1 such cells)" in capsys.readouterr().err
    # a stage of another training setting
    other = _published(t1, tmp / "again" / "mc")
    cfg = yaml.safe_load((other / "config.yaml").read_text())
    cfg["training"]["mc_slates"] = 4
    (other / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert pub.main([str(src), "--join", str(other), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training.mc_slates differs from the source's (4 vs" in err[0]
    # a variant of the same name defined differently
    redefined = _published(t1, tmp / "again" / "alpha")
    cfg = yaml.safe_load((redefined / "config.yaml").read_text())
    cfg["datasets"][0]["variants"][0]["alpha"] = 0.25     # the source's is 0.5
    (redefined / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert pub.main([str(src), "--join", str(redefined), "--out", str(out)]) == 2
    assert "variant tiny/A is defined differently from the source's" in capsys.readouterr().err
    assert not out.exists()
