"""claims_replication: the cells a confirmatory run shares with exploratory ones, both verdicts and how the
confirmatory one reads against the exploratory one; `publish_results.py replication` refuses folders whose
variant of the same name is defined differently."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import yaml

from orchestration.report.claims_display import claims_replication
from orchestration.report.claims_registry import CLAIM_COLUMNS

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("publish_results", ROOT / "scripts" / "publish_results.py")
pub = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pub)


def _frame(cells) -> pd.DataFrame:
    """cells: (criterion, dataset, variant, claim, diff, verdict, n)."""
    rows = []
    for crit, d, v, claim, diff, verdict, n in cells:
        r = dict.fromkeys(CLAIM_COLUMNS, float("nan"))
        r.update(criterion=crit, dataset=d, variant=v, claim=claim, claim_text=claim.upper(), metric="R@5",
                 diff=diff, verdict=verdict, n=n)
        rows.append(r)
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def test_each_pair_of_verdicts_reads_as_written_and_only_shared_cells_appear():
    conf = _frame([("IS", "bib", "P", "a", 1.0, "holds", 20), ("IS", "bib", "P", "b", 0.1, "undecided", 20),
                   ("IS", "bib", "P", "c", -1.0, "fails", 20), ("IS", "bib", "A", "a", -0.5, "fails", 20),
                   ("IS", "bib", "P", "d", 0.3, "holds", 20), ("IS", "cor-redraw", "P", "a", 1.0, "holds", 20),
                   ("SNIS", "bib", "P", "a", 9.0, "exploratory", 20)])
    expl = _frame([("IS", "bib", "P", "a", 1.2, "holds", 10), ("IS", "bib", "P", "b", 0.4, "holds", 10),
                   ("IS", "bib", "P", "c", -0.2, "undecided", 10), ("IS", "bib", "P", "d", 0.1, "undecided", 10)])
    abc = _frame([("IS", "bib", "A", "a", 0.7, "holds", 10)])
    lines = claims_replication(conf, [expl, abc]).splitlines()
    body = {tuple(c.strip() for c in line.strip("|").split("|"))[:2]: line for line in lines[2:]}
    assert len(lines) == 2 + 5           # a, b, c, d at P; a at A; no re-drawn dataset, no SNIS row
    assert body[("A", "bib P")].endswith("| +1.20 holds (10) | +1.00 holds (20) | replicates |")
    assert body[("B", "bib P")].endswith("| not confirmed |")
    assert body[("C", "bib P")].endswith("| -0.20 undecided (10) | -1.00 fails (20) | newly decided |")
    assert body[("D", "bib P")].endswith("| newly decided |")
    assert body[("A", "bib A")].endswith("| +0.70 holds (10) | -0.50 fails (20) | reversed |")


def _folder(tmp: Path, name: str, variant: dict, frame: pd.DataFrame) -> Path:
    f = tmp / name
    (f / "tables").mkdir(parents=True)
    frame.to_csv(f / "tables" / "claims.csv", index=False)
    (f / "config.yaml").write_text(yaml.safe_dump({"datasets": [{"name": "bib", "variants": [variant]}]}))
    return f


def test_a_variant_defined_differently_is_refused_in_one_line(tmp_path, capsys):
    cells = _frame([("IS", "bib", "A", "a", 1.0, "holds", 20)])
    conf = _folder(tmp_path, "conf", {"name": "A", "alpha": 0.2, "beta": 0.0, "T": 2}, cells)
    same = _folder(tmp_path, "same", {"name": "A", "alpha": 0.2, "beta": 0.0, "T": 2.0, "match": None}, cells)
    other = _folder(tmp_path, "other", {"name": "A", "alpha": 0.5, "beta": 0.0, "T": 2}, cells)
    assert pub.replication([conf, same]) == 0
    assert "| replicates |" in capsys.readouterr().out
    assert pub.replication([conf, other]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert "bib variant A" in err and "not the same cells" in err


def test_the_published_replication_page_is_current(capsys):
    """docs/results/replication.md holds what the command gives on the committed folders (regenerate it
    after joining a confirmatory stage)."""
    results = ROOT / "docs" / "results"
    assert pub.replication([results / "confirmatory", results / "real-data", results / "real-data-abc"]) == 0
    table = capsys.readouterr().out.strip()
    page = (results / "replication.md").read_text()
    assert page.strip().endswith(table) and table.count("\n") > 2
