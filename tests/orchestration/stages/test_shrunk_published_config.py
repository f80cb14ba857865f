"""A published config, shrunk by overrides only, end to end on the CPU through `poxm run`: the baselines
trained on the same logs (supervised on the logs, POTEC) train, are reported, and enter the claims."""
from __future__ import annotations

import pandas as pd
import pytest
from poxm_process import REPO, poxm_in_process

from poxm_core.config.schema import default_data_root

MLDR = default_data_root() / "mldr_misc"

# Corel5k as published (its data, split, model, protocol and method options), cut to what a CPU test
# affords: one seed, the paper's variant A (P's T solve trains a supervised reference), 2 epochs, one grid
# point a method, and the methods the claims "POXM > supervised on the logs" and "POXM > POTEC" compare
SHRINK = ["seeds=[0]", "datasets.0.variants=[{name: A, alpha: 0.2, beta: 0.0, T: 2}]", "model.epochs=2",
          "training.epochs=2", "training.mc_slates=8",
          "methods={logging: {}, dm: {}, poxm: {p: [10], lam: [0.9]}, supervised_logs: {}, "
          "potec: {k: [10], lam: [0.9]}}",
          "mlflow.enabled=false"]


@pytest.mark.slow
@pytest.mark.skipif(not (MLDR / "corel5k_X.npz").is_file(), reason=f"no Corel5k under {MLDR}")
def test_shrunk_corel5k_config_runs_supervised_logs_and_potec(ray_session, tmp_path, capsys):
    r = poxm_in_process(capsys, "run", REPO / "configs" / "corel5k.yaml", *SHRINK, "--runs-dir", tmp_path,
                        "--cache-dir", tmp_path / "cache", "--quiet")
    assert r.returncode == 0, r.stderr[-3000:]
    run = next(p for p in tmp_path.iterdir() if p.name.startswith("corel5k-"))
    rows = pd.read_csv(run / "results" / "rows.csv")
    fin = rows[rows["final"].astype(bool)]
    for method, size in (("supervised_logs", -1), ("potec", 10)):
        mine = fin[fin["method"] == method]
        assert {"val", "test"} <= set(mine["split"]), method
        assert set(mine["p"]) == {size}, method                            # POTEC's k in the size column
        for metric in ("R@5", "P@5"):
            v = mine[(mine["split"] == "test") & (mine["metric"] == metric)]["value"]
            assert len(v) == 1 and 0 <= v.item() <= 1, (method, metric)
        assert mine[(mine["split"] == "val") & (mine["metric"] == "IS")]["value"].notna().all()
    sel = pd.read_csv(run / "results" / "selection.csv")
    assert {"supervised_logs", "potec"} <= set(sel["method"])
    claims = pd.read_csv(run / "report" / "tables" / "claims.csv")
    named = claims[claims["claim"].isin(["poxm_vs_supervised_logs", "poxm_vs_potec"])]
    assert set(named["claim"]) == {"poxm_vs_supervised_logs", "poxm_vs_potec"}, sorted(set(claims["claim"]))
    assert named["diff"].notna().all() and set(named["verdict"]) == {"too few seeds"}
    index = (run / "report" / "index.md").read_text()
    assert "Supervised on the logs" in index and "POTEC" in index
