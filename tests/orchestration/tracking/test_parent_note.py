"""The sweep's MLflow parent run opens on the results: its description leads with what the run shows,
the results table and its notes, and (below three seeds) how to get verdicts before the claims; the
sweep's own description follows below a rule, and a second report replaces the lead, never stacks it."""
from __future__ import annotations

import pytest

from orchestration.report import claims as C
from orchestration.selection import select_run
from orchestration.stages.track import headline_note
from orchestration.tracking import runs as tracking
from poxm_core.common.results import make_row, to_frame


def _run(tmp_path, seeds):
    out = []
    for s in seeds:
        kw = dict(dataset="d", variant="A", seed=s, epoch=2, final=True)
        for m, p, lam, x in (("logging", None, None, 0.063), ("banditnet", None, 0.9, 0.0022),
                             ("poxm", 10, 0.9, 0.3125 + 0.001 * s), ("skyline_e2e", None, None, 0.4764)):
            out.append(make_row(split="test", metric="R@5", value=x, method=m, p=p, lam=lam, **kw))
        out.append(make_row(split="val", metric="IS", value=1.0, method="poxm", p=10, lam=0.9, **kw))
    rows = to_frame(out)
    (tmp_path / "results").mkdir(parents=True)
    (tmp_path / "report" / "tables").mkdir(parents=True)
    rows.to_csv(tmp_path / "results" / "rows.csv", index=False)
    sel = select_run(rows, "IS")
    sel.frame().to_csv(tmp_path / "results" / "selection.csv", index=False)
    C.claims(rows, sel.selection, "IS").to_csv(tmp_path / "report" / "tables" / "claims.csv", index=False)
    return tmp_path


def test_below_three_seeds_the_note_leads_with_results_then_how_to_get_verdicts(tmp_path):
    run = _run(tmp_path / "q-1", [0])
    note = headline_note(run, run / "report")
    order = [note.index(x) for x in ("What the run shows on d", "**Results**", "BanditNet is below the logging policy",
                                     "**No verdicts yet**: a claim's verdict needs 3 seeds", "**Claims**")]
    assert order == sorted(order), note
    assert "--add-seeds 1,2`" in note


def test_with_three_seeds_no_line_on_verdicts(tmp_path):
    run = _run(tmp_path, [0, 1, 2])
    note = headline_note(run, run / "report")
    assert "No verdicts yet" not in note and note.index("**Results**") < note.index("**Claims**")


@pytest.mark.slow
def test_the_results_lead_the_description_and_replace_an_earlier_lead(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    exp = tracking.init_store(uri, "sweep-n", tmp_path / "mlartifacts")
    rid = tracking.ensure_parent(uri, exp, "sweep-n", {}, description="the sweep")
    c = tracking.client(uri)
    tracking.set_note(c, rid, "results A")
    assert c.get_run(rid).data.tags["mlflow.note.content"] == "### Results\n\nresults A\n\n---\n\nthe sweep"
    tracking.set_note(c, rid, "results B")          # `poxm report` again: the lead replaced
    assert c.get_run(rid).data.tags["mlflow.note.content"] == "### Results\n\nresults B\n\n---\n\nthe sweep"
    c.set_tag(rid, "mlflow.note.content", "the sweep\n\n---\n\nold results")     # an older poxm's layout
    tracking.set_note(c, rid, "results C")
    assert c.get_run(rid).data.tags["mlflow.note.content"] == "### Results\n\nresults C\n\n---\n\nthe sweep"
