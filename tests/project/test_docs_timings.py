"""README.md and scripts/test.sh state the same measured figures for the test tiers, and the README's
quickstart figure names its machine."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _figures(text: str) -> set[str]:
    return set(re.findall(r"\b\d+ (?:s|tests)\b", text))


def test_readme_and_test_sh_agree_on_the_test_tiers():
    readme = (REPO / "README.md").read_text()
    tiers = "\n".join(line for line in readme.splitlines() if line.startswith("./scripts/test.sh"))
    script = "\n".join(line for line in (REPO / "scripts" / "test.sh").read_text().splitlines() if line.startswith("#"))
    assert _figures(tiers) and _figures(tiers) == _figures(script), (_figures(tiers), _figures(script))


def test_the_quickstart_timing_names_the_machine():
    readme = (REPO / "README.md").read_text()
    para = readme[readme.index("The quickstart ("):][:600]
    assert re.search(r"\d+ s wall", para) and "2 CPU cores" in para and "measured" in para
