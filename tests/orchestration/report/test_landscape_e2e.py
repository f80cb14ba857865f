"""A shrunk logging-quality landscape end to end: the quickstart's generated (EUR-Lex-shaped) data, 2 α × 2 T
at β = 0, 2 seeds, tiny grids and two epochs, through the real sweep (local Ray); the report it builds
has the landscape's sentence, figure and table, α and T read from the config (the variant names say
nothing about them)."""
from __future__ import annotations

import pandas as pd
import pytest

pytestmark = pytest.mark.slow

# the variant names carry no α or T: the report must read them from the config
VARIANTS = [{"name": "v1", "alpha": 0.1, "beta": 0.0, "T": 0.5}, {"name": "v2", "alpha": 0.1, "beta": 0.0, "T": 2.0},
            {"name": "v3", "alpha": 0.4, "beta": 0.0, "T": 0.5}, {"name": "v4", "alpha": 0.4, "beta": 0.0, "T": 2.0}]
CONFIG = {
    "name": "landscape-e2e",
    "seeds": [0, 1],
    "device": "cpu",
    "datasets": [{"name": "synthetic",
                  "synthetic": {"preset": "eurlex", "scale": 0.05, "n_features": 400, "n_labels": 150},
                  "variants": VARIANTS}],
    "model": {"dim": 12, "epochs": 2, "n_candidates": 20},
    "training": {"epochs": 2, "mc_slates": 4, "batch_size": 128, "hidden": 16},
    "group_by": "seed",
    "resources": {"cpus_per_trial": 1, "max_failures": 2},
    "methods": {"logging": {}, "dm": {"lr": 0.01}, "poxm": {"p": [5, 10], "lam": [0.9], "lr": 0.01}},
}


def test_a_shrunk_landscape_builds_the_report_with_its_figure(ray_session, tmp_path):
    import yaml

    from orchestration.stages.sweep import run_sweep
    from poxm_core.config.schema import load_config
    path = tmp_path / "landscape.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    out = run_sweep(load_config(path), runs_dir=tmp_path / "runs", progress=False)
    assert out.ok, out
    report = out.run_dir / "report"
    index = (report / "index.md").read_text()
    assert "## Logging-quality landscape" in index and "figures/landscape.png" in index
    assert (report / "figures" / "landscape.png").stat().st_size > 10_000
    table = pd.read_csv(report / "tables" / "landscape_synthetic.csv")
    cells = table.drop_duplicates("variant").set_index("variant")
    assert cells.loc["v2", "alpha"] == 0.1 and cells.loc["v2", "T"] == 2.0 and cells.loc["v3", "alpha"] == 0.4
    assert set(table["method"]) == {"logging", "dm", "poxm"} and set(table["n"]) == {2}
    # the bar is the logging trial's greedy P@5, the same seed's value as prepare.csv's logging model
    prep = pd.read_csv(out.run_dir / "results" / "prepare.csv")
    lm = prep[prep["metric"] == "logging_model/P@5"].groupby("variant")["value"].mean()
    assert table.drop_duplicates("variant").set_index("variant")["bar"].to_dict() == pytest.approx(
        (100 * lm).to_dict(), abs=1e-3)
    # the sentence says where a method beats the bar, or that none does, in words a reader can check
    para = index.split("## Logging-quality landscape", 1)[1].split("\n\n")[1]
    assert "logging model" in para and "(dataset, α, T) cells" in para
