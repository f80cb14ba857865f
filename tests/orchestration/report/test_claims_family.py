"""The declared family of claims (orchestration/report/claims_family.py) and the ranking claims: Holm
over the whole declared family at once, undeclared and SNIS rows exploratory, the `claims:` block
checked with one line naming the key and the nearest claim, the default family recorded in the run's
config when it starts, and old claims tables and configs without a family still read."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from orchestration.report import claims as C
from orchestration.report.claims_family import (DECLARED, DEFAULT, EXPLORATORY, default_block, family_of,
                                                parse_family)
from orchestration.report.claims_registry import CLAIM_ORDER, LEGACY_COLUMNS, RANKED
from orchestration.report.inference import holm
from orchestration.selection import select
from poxm_core.common.errors import PoxmInputError
from poxm_core.common.results import make_row, to_frame


def _row(method, seed, metric, value, dataset="d", variant="A", p=None, lam=None, val=None):
    kw = dict(dataset=dataset, variant=variant, method=method, p=p, lam=lam, seed=seed, epoch=2, final=True)
    out = [make_row(split="test", metric=metric, value=value, **kw)]
    out += [make_row(split="val", metric=c, value=v, **kw) for c, v in (val or {}).items()]
    return out


def _two_dataset_rows():
    """Seeds 0-4 on datasets d and e, variant A: logging (R@5 0.2, P@5 0.3), DM and POXM each with R@5 and
    P@5, POXM above logging by 10-14 points and DM by (1, -1, 2, 0.5, 1.5) points; greedy P@5 of DM
    (28.5 ... 32.5) and POXM (33 ... 33.8) against the logging model's 30."""
    rows = []
    for ds in ("d", "e"):
        for s in range(5):
            rows += _row("logging", s, "R@5", 0.2, ds) + _row("logging", s, "P@5", 0.3, ds)
            dm = 0.30 + 0.01 * s
            rows += _row("dm", s, "R@5", dm, ds) + _row("dm", s, "P@5", 0.285 + 0.01 * s, ds)
            gap = (0.01, -0.01, 0.02, 0.005, 0.015)[s]
            kw = dict(p=10, lam=0.9, val={"IS": 1.0, "SNIS": 1.0})
            rows += _row("poxm", s, "R@5", dm + gap, ds, **kw) + _row("poxm", s, "P@5", 0.33 + 0.002 * s, ds, **kw)
    return to_frame(rows)


def _claims(rows, criterion="IS", family=None):
    return C.claims(rows, select(rows, criterion), criterion, family=family).set_index(["dataset", "claim"])


def test_ranking_claims_compare_greedy_p5_with_the_logging_models():
    f = _claims(_two_dataset_rows())
    r = f.loc[("d", "ranking_poxm")]
    assert r["metric"] == "P@5" and r["claim_text"] == "Ranking: POXM > the logging model"
    assert r["diff"] == pytest.approx(3.4) and r["signs"] == "5/5"            # (0.33 + 0.002 s) - 0.30
    assert f.loc[("d", "ranking_dm"), "diff"] == pytest.approx(0.5) and f.loc[("d", "ranking_dm"), "signs"] == "3/5"
    assert {k for _, k in f.index if k.startswith("ranking_")} == {"ranking_poxm", "ranking_dm"}   # methods run
    assert {f"ranking_{m}" for m in RANKED} <= set(CLAIM_ORDER) and "poxm_vs_potec" in CLAIM_ORDER


def test_poxm_vs_potec():
    rows = []
    for s in range(3):
        rows += _row("potec", s, "R@5", 0.1 + 0.01 * s, p=10, lam=0.9, val={"IS": 1.0})
        rows += _row("poxm", s, "R@5", 0.3, p=10, lam=0.9, val={"IS": 1.0})
    r = _claims(to_frame(rows)).loc[("d", "poxm_vs_potec")]
    assert r["claim_text"] == "POXM > POTEC" and r["diff"] == pytest.approx(19.0) and r["source"] == "ours"


def test_holm_runs_over_the_whole_declared_family_at_once():
    rows = _two_dataset_rows()
    f = _claims(rows)                           # the default family: every cell under IS
    inside = f[f["family"] == DEFAULT]
    # 6 claims x 2 datasets: POXM > logging, > DM, > logging's greedy top-5, DM > logging, both rankings
    assert len(inside) == 12 and set(f["family"]) == {DEFAULT}
    assert np.sort(inside["p_holm"]) == pytest.approx(np.sort(holm(inside["p_value"].to_numpy())))
    # a declared family of three cells: Holm over those three only, the rest exploratory
    fam = parse_family({"family": [{"claim": "poxm_vs_dm"}, {"claim": "ranking_poxm", "datasets": ["e"]}]}, "IS")
    g = _claims(rows, family=fam)
    declared = g[g["family"] == DECLARED]
    assert sorted(declared.index) == [("d", "poxm_vs_dm"), ("e", "poxm_vs_dm"), ("e", "ranking_poxm")]
    p = declared["p_value"].to_numpy()
    k = np.argsort(p)                            # by hand: 3, 2, 1 times the sorted p, then the running max
    expect = np.maximum.accumulate(np.minimum(1, np.array([3, 2, 1]) * p[k]))
    assert declared["p_holm"].to_numpy()[k] == pytest.approx(expect)
    rest = g[g["family"] == EXPLORATORY]
    assert len(rest) == 9 and rest["p_holm"].isna().all() and set(rest["verdict"]) == {EXPLORATORY}
    assert g.loc[("d", "poxm_vs_logging"), "p_value"] == pytest.approx(f.loc[("d", "poxm_vs_logging"), "p_value"])
    assert g.loc[("e", "ranking_poxm"), "verdict"] == "holds"
    # the family's size moves a verdict: POXM's R@5 > the logging policy's greedy P@5 (raw t p 0.0499 on d)
    # holds declared alone, and is undecided in the default family of twelve
    alone = _claims(rows, family=parse_family({"family": [{"claim": "poxm_vs_logging_greedy", "datasets": ["d"]}]},
                                              "IS")).loc[("d", "poxm_vs_logging_greedy")]
    assert alone["p_value"] == pytest.approx(0.0499, abs=1e-4) and alone["p_holm"] == alone["p_value"]
    assert alone["verdict"] == "holds" and f.loc[("d", "poxm_vs_logging_greedy"), "verdict"] == "undecided"


def test_snis_beside_the_run_criterion_is_exploratory_and_a_declared_criterion_tests_only_itself():
    rows = _two_dataset_rows()
    s = _claims(rows, "SNIS")
    assert set(s["family"]) == {EXPLORATORY} and set(s["verdict"]) == {EXPLORATORY} and s["p_holm"].isna().all()
    assert s["p_sign"].notna().all()                        # every cell still carries its sign test
    both = family_of({"selection": {"criterion": "SNIS"}})  # a run that selects by SNIS tests SNIS's choices
    assert set(_claims(rows, "SNIS", both)["family"]) == {DEFAULT}
    assert set(_claims(rows, "IS", both)["family"]) == {EXPLORATORY}


def test_declared_level_and_test():
    rows = _two_dataset_rows()
    strict = parse_family({"alpha": 0.001, "family": [{"claim": "ranking_poxm", "test": "sign"}]}, "IS")
    g = _claims(rows, family=strict)
    r = g.loc[("d", "ranking_poxm")]
    # 5 of 5 seeds up: sign p = 2/32 = 0.0625; Holm over 2 cells: 0.125, no verdict at any usual level
    assert r["test"] == "sign" and r["p_value"] == pytest.approx(0.0625) and r["p_holm"] == pytest.approx(0.125)
    assert r["verdict"] == "undecided" and r["alpha"] == 0.001
    t = C.claims_table(g.reset_index(), ["IS"])
    assert "Holm p < 0.001" in t.notes[0] and t.rows[[r[0] for r in t.rows].index(
        "Ranking: POXM > the logging model (ours)")][2] == "P@5 ×100 (sign test)"


@pytest.mark.parametrize("block, message", [
    ({"family": [{"claim": "poxm_vs_logging"}, {"claim": "poxm_vs_dn"}]},
     r"^config key 'claims\.family\.1\.claim': unknown claim 'poxm_vs_dn' \(did you mean 'poxm_vs_dm'\?\)$"),
    ({"family": [{"claim": "ranking_poxn"}]}, r"'claims\.family\.0\.claim'.*did you mean 'ranking_poxm'"),
    ({"family": [{"claim": "p_grows", "tset": "sign"}]}, r"'claims\.family\.0\.tset': unknown key 'tset' \(did you mean 'test'"),
    ({"family": [{"claim": "p_grows", "test": "sgn"}]}, r"'claims\.family\.0\.test': unknown test 'sgn' \(did you mean 'sign'"),
    ({"family": [{"claim": "p_grows", "variants": ["A"]}]}, r"'claims\.family\.0\.variants': p_grows compares"),
    ({"famliy": []}, r"'claims\.famliy': unknown key 'famliy' \(did you mean 'family'"),
    ({"alpha": 1.5}, r"'claims\.alpha': expected a level in \(0, 1\)"),
    ({"family": []}, r"'claims\.family': expected a non-empty list"),
    ({"family": [{"claim": "poxm_vs_dm", "datasets": "bibtex"}]}, r"'claims\.family\.0\.datasets': expected a non-empty list")])
def test_bad_blocks_are_one_line_naming_the_key(block, message):
    with pytest.raises(PoxmInputError, match=message):
        parse_family(block, "IS")


def test_a_config_without_claims_gets_the_default_family_and_the_table_says_so():
    fam = family_of({"name": "old", "selection": {"criterion": "IS"}})
    assert fam.source == DEFAULT and fam.criterion == "IS" and [e.claim for e in fam.entries] == CLAIM_ORDER
    assert family_of({"claims": default_block("IS")}).source == DECLARED
    rows = _two_dataset_rows()
    t = C.claims_table(_claims(rows, family=fam).reset_index(), ["IS"])
    assert any("No declared `claims:` family was read" in n for n in t.notes)
    t2 = C.claims_table(_claims(rows, family=family_of({"claims": default_block("IS")})).reset_index(), ["IS"])
    assert not any("No declared" in n for n in t2.notes)


def test_a_claims_table_from_before_families_is_still_read(tmp_path):
    f = _claims(_two_dataset_rows()).reset_index()
    (tmp_path / "tables").mkdir()
    f[LEGACY_COLUMNS].to_csv(tmp_path / "tables" / "claims.csv", index=False)
    back = C.read_claims(tmp_path)
    assert list(back.columns)[:len(C.CLAIM_COLUMNS)] == C.CLAIM_COLUMNS and set(back["family"]) == {DEFAULT}
    assert back["p_sign"].isna().all() and C.summary_from_report(tmp_path).startswith("claims: ")
    assert math.isnan(C.mlflow_metrics(back).get("claims/IS/d/poxm_vs_dm/A/p_sign", math.nan))


# ------------------------------------------------------------------------------ the run declares it when it starts

DATA = {
    "name": "fam", "seeds": [0, 1],
    "datasets": [{"name": "synthetic", "synthetic": {"n_train": 50, "n_test": 20, "n_features": 30, "n_labels": 10},
                  "variants": [{"name": "A", "alpha": 0.5}, {"name": "C", "alpha": 0.5, "beta": 1.0}]}],
    "methods": {"logging": {}, "dm": {}, "poxm": {"p": [2, 4], "lam": [0.5, 0.9]}},
}


def _cfg(claims=None, path=None):
    from poxm_core.config.schema import load_config
    data = json.loads(json.dumps(DATA)) | ({"claims": claims} if claims is not None else {})
    if path is None:
        return load_config(data=data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_config(path)


def test_a_run_records_the_default_family_when_it_starts_outside_its_identity(tmp_path):
    from orchestration.rundir import sweep_id
    from orchestration.stages.plan import plan_from_run_dir, plan_sweep, write_plan
    plan = plan_sweep(_cfg(), runs_dir=tmp_path)
    assert plan.cfg.claims.model_dump(mode="json", exclude_none=True) == default_block("IS")
    assert sweep_id(plan.cfg) == sweep_id(_cfg())               # the family is not part of the run's name
    write_plan(plan)
    saved = yaml.safe_load((plan.rd.root / "config.yaml").read_text())
    assert saved["claims"] == default_block("IS")
    assert yaml.safe_load((plan.rd.root / "config.input.yaml").read_text())["claims"] == default_block("IS")
    again = plan_from_run_dir(plan.rd.root)                       # reloads under the same name, family kept
    assert again.rd.root == plan.rd.root and again.cfg.claims == plan.cfg.claims
    assert family_of(saved).source == DECLARED
    # a declared family is resolved (criterion, each test) and recorded as declared
    own = plan_sweep(_cfg({"family": [{"claim": "poxm_vs_dm", "variants": ["C"]}, {"claim": "p_grows"}]}),
                     runs_dir=tmp_path / "other")
    assert own.cfg.claims.model_dump(mode="json", exclude_none=True) == {
        "criterion": "IS", "alpha": 0.05, "family": [{"claim": "poxm_vs_dm", "variants": ["C"], "test": "crossed_t"},
                                                     {"claim": "p_grows", "test": "sign"}]}


def test_an_old_run_directory_is_not_given_a_family_after_the_fact(tmp_path):
    from orchestration.stages.plan import plan_sweep, write_plan
    plan = plan_sweep(_cfg(), runs_dir=tmp_path)
    write_plan(plan.__class__(plan.cfg.model_copy(update={"claims": None}), plan.rd, plan.cache_dir, plan.specs))
    assert "claims" not in yaml.safe_load((plan.rd.root / "config.yaml").read_text())
    assert plan_sweep(_cfg(), runs_dir=tmp_path).cfg.claims is None     # its directory exists: left as it was


def test_a_typo_in_the_family_fails_the_plan_naming_the_file_line(tmp_path):
    from orchestration.stages.plan import plan_sweep
    bad = _cfg({"family": [{"claim": "poxm_vs_logging"}, {"claim": "poxm_vs_dn"}]}, path=tmp_path / "c.yaml")
    with pytest.raises(PoxmInputError, match=r"^\S*c\.yaml:\d+: config key 'claims\.family\.1\.claim': unknown claim "
                                             r"'poxm_vs_dn' \(did you mean 'poxm_vs_dm'\?\)$"):
        plan_sweep(bad, runs_dir=tmp_path)
    for claims, message in (({"family": [{"claim": "poxm_vs_dm", "datasets": ["synthetc"]}]},
                             r"'claims\.family\.0\.datasets': 'synthetc' is not a dataset of this config \(did you mean 'synthetic'"),
                            ({"family": [{"claim": "poxm_vs_dm", "variants": ["B"]}]},
                             r"'claims\.family\.0\.variants': 'B' is not a variant"),
                            ({"criterion": "SNIS"}, r"'claims\.criterion': 'SNIS' is not this run's selection criterion 'IS'")):
        with pytest.raises(PoxmInputError, match=message):
            plan_sweep(_cfg(claims), runs_dir=tmp_path)
    from poxm_core.config.schema import load_config
    with pytest.raises(PoxmInputError, match=r"unknown config key 'claims\.family\.0\.claimz' \(did you mean 'claims\.family\.0\.claim'"):
        load_config(data=json.loads(json.dumps(DATA)) | {"claims": {"family": [{"claimz": "poxm_vs_dm"}]}})


def test_report_of_a_run_reads_its_family(tmp_path):
    """A frame built with the family of config.yaml: what the report does (its claims table's CSV)."""
    rows = _two_dataset_rows()
    cfg = {"selection": {"criterion": "IS"}, "claims": {"family": [{"claim": "ranking_poxm"}]}}
    f = C.claims(rows, select(rows, "IS"), "IS", family=family_of(cfg))
    assert set(f.loc[f["claim"] == "ranking_poxm", "family"]) == {DECLARED}
    assert (f.loc[f["claim"] != "ranking_poxm", "verdict"] == EXPLORATORY).all()
    assert isinstance(f, pd.DataFrame) and list(f.columns) == C.CLAIM_COLUMNS
