"""The lines a sweep ends with: below three seeds what the run shows, the headline table, the note on a
learner below the logging policy and how to get verdicts (no table of 'too few seeds'); with three, the
claims' verdicts. `poxm resume` on a finished sweep says so, exits 0 and never starts (or imports) Ray."""
from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from orchestration import run_summary
from orchestration.report import claims as C
from orchestration.selection import select_run
from poxm_core.common.results import make_row, to_frame
from tests.cli_peers import planned

pytestmark = pytest.mark.usefixtures("no_user_settings")


def _rows(seeds):
    out = []
    for s in seeds:
        kw = dict(dataset="d", variant="A", seed=s, epoch=2, final=True)
        for m, p, lam, x in (("logging", None, None, 0.063), ("banditnet", None, 0.9, 0.0022 + 0.0001 * s),
                             ("poxm", 10, 0.9, 0.3125 + 0.001 * s), ("skyline_e2e", None, None, 0.4764)):
            out.append(make_row(split="test", metric="R@5", value=x, method=m, p=p, lam=lam, **kw))
        out += [make_row(split="val", metric="IS", value=1.0, method="poxm", p=10, lam=0.9, **kw)]
    return to_frame(out)


def _run(tmp_path, seeds):
    rows = _rows(seeds)
    (tmp_path / "results").mkdir(parents=True)
    (tmp_path / "report" / "tables").mkdir(parents=True)
    sel = select_run(rows, "IS")
    sel.frame().to_csv(tmp_path / "results" / "selection.csv", index=False)
    pd.DataFrame([{"dataset": "d", "variant": "A", "seed": 0, "metric": m, "value": v}
                  for m, v in (("data/L", 2000.0), ("data/labels_per_instance", 5.31))]
                 ).to_csv(tmp_path / "results" / "prepare.csv", index=False)
    C.claims(rows, sel.selection, "IS").to_csv(tmp_path / "report" / "tables" / "claims.csv", index=False)
    return tmp_path


def test_below_three_seeds_the_end_leads_with_the_result_and_how_to_get_verdicts(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = _run(tmp_path / "q-1", [0])
    run_summary.print_end(run, run / "report")
    # lines fold at the terminal's width (80 columns where none is known, as under pytest-xdist): unfolded
    out = " ".join(capsys.readouterr().out.split())
    shows = out.index("What the run shows on d (test R@5 ×100): variant A: logging policy 6.30 → POXM 31.25")
    table = out.index("test R@5 (x100) of the selected (p, lambda)")
    note = out.index("note: BanditNet is below the logging policy (d: A 0.22 against 6.30)")
    verdict = out.index("No verdicts yet: a claim's verdict needs 3 seeds, this run has 1 (seed 0)")
    assert shows < table < note < verdict < out.index("claims: 2 compared")
    assert "resume q-1 --add-seeds 1,2`" in out
    assert " n/n" not in out and "too few seeds" not in out


def test_with_three_seeds_the_claims_carry_verdicts(tmp_path, capsys):
    run = _run(tmp_path, [0, 1, 2])
    run_summary.print_end(run, run / "report")
    out = capsys.readouterr().out
    assert "No verdicts yet" not in out
    assert out.index("test R@5 (x100)") < out.index("claims: mean paired difference over seeds")
    assert "POXM > logging policy (R@5)" in out


def _complete(tmp_path):
    rd = planned(tmp_path)
    for name in rd.read_sweep()["trials"]:
        (rd.root / "trials" / name).mkdir(parents=True, exist_ok=True)
        (rd.root / "trials" / name / "done.json").write_text(json.dumps({"finished": 1.0}))
    (rd.root / "report").mkdir()
    (rd.root / "report" / "index.md").write_text("# poxm report\n")
    return rd


def test_resume_of_a_complete_run_says_so_and_never_starts_ray(tmp_path):
    rd = _complete(tmp_path)
    code = ("import sys; from orchestration.cli import main; rc = main(['resume', sys.argv[1]]); "
            "print('ray imported:', 'ray' in sys.modules); sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code, str(rd.root)], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    n = len(rd.read_sweep()["trials"])
    assert f"poxm: runs/{rd.root.name} is complete: all {n} trial(s) done and the report built; nothing to " \
           "resume" in r.stdout
    assert "ray imported: False" in r.stdout and r.stderr == ""


def test_resume_of_an_unfinished_run_goes_on(tmp_path, capsys, monkeypatch):
    rd = _complete(tmp_path)
    (rd.root / "report" / "index.md").unlink()          # trials done, report not built: the sweep finishes it
    import orchestration.stages.sweep as sweep

    def reached(*a, **k):
        raise KeyboardInterrupt("reached")
    monkeypatch.setattr(sweep, "resume_sweep", reached)
    from orchestration.cli import main
    assert main(["resume", str(rd.root)]) == 130
    assert "is complete" not in capsys.readouterr().out
