"""Every relative link in the user docs (README.md, docs/*.md, docs/results/**/*.md) points at a file or
folder that exists: moving or deleting a file cannot leave a reader a dead link."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "results").rglob("*.md"))]


def dead_links(md: Path) -> list[str]:
    """The relative links of `md` (outside code) whose target does not exist."""
    dead = []
    for target in LINK.findall(CODE.sub("", md.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue                                  # a URL or an anchor in the same page
        path = target.split("#", 1)[0]
        if path and not (md.parent / path).exists():
            dead.append(target)
    return dead


def test_every_relative_link_resolves():
    bad = {str(md.relative_to(ROOT)): d for md in _docs() if (d := dead_links(md))}
    assert not bad, f"dead links: {bad}"


def test_a_dead_link_is_found(tmp_path):
    md = tmp_path / "page.md"
    md.write_text("[ok](page.md) [gone](nope/there.csv) [web](https://example.org) `[code](x.md)` [a](#top)\n")
    assert dead_links(md) == ["nope/there.csv"]
