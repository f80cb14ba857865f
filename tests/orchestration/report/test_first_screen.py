"""The first screen of a run: below the seeds a verdict needs, the headline table and one line on how
to get verdicts lead (the claims follow); what the run shows (logging policy, POXM, skyline) in one
line; a learner below the logging policy carries its explanation."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from orchestration.report import first_screen as FS
from poxm_core.common.results import make_row, to_frame


def _frame(cells):
    return pd.DataFrame([{"dataset": d, "variant": v, "method": m, "mean": x} for d, v, m, x in cells])


def _prep(L=2000.0, k=5.31):
    return pd.DataFrame([{"dataset": "d", "variant": "A", "seed": 0, "metric": "data/L", "value": L},
                         {"dataset": "d", "variant": "A", "seed": 0, "metric": "data/labels_per_instance", "value": k}])


def test_verdict_seeds_fill_up_to_three_from_the_smallest_free():
    assert FS.verdict_seeds([0]) == [1, 2]
    assert FS.verdict_seeds([1, 5]) == [0]
    assert FS.verdict_seeds([]) == [0, 1, 2]
    assert FS.verdict_seeds([0, 1, 2]) == []


def test_verdict_line_names_the_command_and_the_seeds():
    line = FS.verdict_line("runs/q-1", [0])
    assert line.startswith("No verdicts yet: a claim's verdict needs 3 seeds, this run has 1 (seed 0)")
    assert "add seeds 1, 2 with `poxm resume runs/q-1 --add-seeds 1,2`" in line
    assert FS.verdict_line("runs/q-1", [0, 1, 2]) is None
    assert "--add-seeds 2`" in FS.verdict_line("r", [0, 1], command=".venv/bin/poxm")
    merged = FS.verdict_line("m", [0, 1], merged=True)
    assert "resume" not in merged and "`poxm report m RUN_B ...`" in merged


def test_the_claims_need_seeds_when_none_has_three():
    assert FS.needs_seeds(pd.DataFrame({"n": [1, 2]}))
    assert not FS.needs_seeds(pd.DataFrame({"n": [3, 2]}))
    assert not FS.needs_seeds(pd.DataFrame()) and not FS.needs_seeds(None)     # no claims: nothing waits


def test_phenomenon_line_hand_values():
    f = _frame([("d", "A", "logging", 6.32), ("d", "A", "poxm", 31.25), ("d", "A", "skyline", 47.52),
                ("d", "A", "skyline_e2e", 47.64), ("d", "B", "logging", 4.0), ("d", "B", "poxm", 16.0),
                ("e", "A", "poxm", 1.0)])                     # no logging or skyline in e: no line
    lines = FS.phenomenon_lines(f)
    assert len(lines) == 1
    # (31.25 - 6.32) / (47.64 - 6.32) = 0.6034: the paper's end-to-end skyline is the reference
    assert "variant A: logging policy 6.32 → POXM 31.25 (skyline 47.64; POXM closes 60 % of the gap)" in lines[0]
    assert "variant B" not in lines[0]                        # B has no skyline


def test_banditnet_at_a_uniform_draw_is_explained():
    f = _frame([("d", "A", "logging", 6.32), ("d", "A", "banditnet", 0.22), ("d", "A", "poxm", 31.25),
                ("d", "A", "skyline", 47.5), ("d", "B", "logging", 4.27), ("d", "B", "banditnet", 0.25)])
    notes = FS.below_logging_notes(f, _prep())
    assert len(notes) == 1
    n = notes[0]
    assert n.startswith("BanditNet is below the logging policy (d: A 0.22 against 6.32, B 0.25 against 4.27)")
    assert "uniform draw over all 2,000 labels" in n and "(5.31 true labels per instance / 2,000 = 0.27)" in n and "docs/data.md" in n
    assert FS.uniform_level(_prep(), "d") == pytest.approx((5.31, 2000.0, 0.2655))


def test_a_learner_below_the_logging_policy_far_above_uniform_gets_the_plain_note():
    f = _frame([("d", "A", "logging", 6.32), ("d", "A", "dm", 5.0), ("d", "A", "skyline", 3.0)])
    notes = FS.below_logging_notes(f, _prep())       # the skyline is no learner: never flagged
    assert len(notes) == 1 and notes[0].startswith("Direct Method is below the logging policy (d: A 5.00")
    assert "did not beat the policy that collected it" in notes[0]
    assert FS.below_logging_notes(f, None)[0] == notes[0]       # no data statistics: the same plain note


def test_selection_frame_and_seeds_from_selection_csv(tmp_path):
    (tmp_path / "results").mkdir()
    pd.DataFrame([{"dataset": "d", "variant": "A", "method": m, "seed": s, "selection": "is", "criterion": "IS",
                   "test_R@5": r + 0.01 * s} for m, r in (("poxm", 0.3), ("logging", 0.06)) for s in (0, 4)]
                 ).to_csv(tmp_path / "results" / "selection.csv", index=False)
    f = FS.selection_frame(tmp_path).set_index("method")
    assert f.loc["poxm", "mean"] == pytest.approx(32.0) and f.loc["logging", "n"] == 2
    assert FS.run_seeds(tmp_path) == [0, 4]


def _rows(seeds):
    out = []
    for s in seeds:
        for v in ("A",):
            kw = dict(dataset="d", variant=v, seed=s, epoch=2, final=True)
            out += [make_row(split="test", metric="R@5", value=x, method=m, p=p, lam=lam, **kw)
                    for m, p, lam, x in (("logging", None, None, 0.063), ("banditnet", None, 0.9, 0.0022),
                                         ("poxm", 10, 0.9, 0.3125 + 0.001 * s), ("skyline_e2e", None, None, 0.4764))]
            out += [make_row(split="val", metric=c, value=1.0, method="poxm", p=10, lam=0.9, **kw) for c in ("IS", "SNIS")]
    return to_frame(out)


def _headings(index: str) -> list[str]:
    return [ln for ln in index.splitlines() if re.match(r"^(#+ |\*\*[^*])", ln)]


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [[0], [0, 1, 2]])
def test_report_leads_with_the_headline_below_three_seeds(tmp_path, seeds):
    from orchestration.report.build import build_report
    run = tmp_path / "run"
    (run / "results").mkdir(parents=True)
    _rows(seeds).to_csv(run / "results" / "rows.csv", index=False)
    _prep().to_csv(run / "results" / "prepare.csv", index=False)
    (run / "config.yaml").write_text(f"name: q\nseeds: {seeds}\n")
    index = (build_report(run) / "index.md").read_text()
    heads = _headings(index)
    claims = next(i for i, h in enumerate(heads) if h.startswith("**Claims"))
    headline = next(i for i, h in enumerate(heads) if h.startswith("**Test R@5 per method and variant"))
    if len(seeds) < 3:
        assert headline < claims
        verdict = index.index("**No verdicts yet**: a claim's verdict needs 3 seeds, this run has 1 (seed 0)")
        assert index.index("**Test R@5 per method and variant") < verdict < index.index("**Claims")
        assert "--add-seeds 1,2`" in index
    else:
        assert claims < headline and "No verdicts yet" not in index
    # the phenomenon before the table; BanditNet's 0.22 explained under it
    assert index.index("What the run shows on d (test R@5 ×100): variant A: logging policy 6.30 → POXM") < index.index("**Test R@5 per")
    table = (run / "report" / "tables" / "headline_d.md").read_text()
    assert "BanditNet is below the logging policy (d: A 0.22 against 6.30)" in table
    assert "uniform draw over all 2,000 labels" in table
