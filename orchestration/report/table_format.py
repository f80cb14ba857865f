"""A report table (display strings + the CSV frame) and its renderings: Markdown, LaTeX (booktabs),
and the atomic writer of the three files. The tables themselves are built in tables.py."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from poxm_core.common.atomic import write_text

DAGGER = "†"


@dataclass
class Table:
    """A rendered table: display strings plus the machine-readable frame written as CSV."""
    name: str
    title: str
    columns: list[str]
    rows: list[list[str]]
    bold: set[tuple[int, int]] = field(default_factory=set)
    italic_rows: set[int] = field(default_factory=set)
    sections: dict[int, str] = field(default_factory=dict)  # row index -> label of a block starting there
    notes: list[str] = field(default_factory=list)
    frame: pd.DataFrame = field(default_factory=pd.DataFrame)


# --------------------------------------------------------------------------------------------
# rendering

def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


def to_markdown(t: Table) -> str:
    """GitHub-flavoured Markdown: bold **x**, italic rows *x*, block labels as bold rows."""
    ncol = len(t.columns)
    out = [f"**{t.title}**", "", "| " + " | ".join(map(_md_escape, t.columns)) + " |",
           "|" + "|".join([":---"] + ["---:"] * (ncol - 1)) + "|"]
    for i, row in enumerate(t.rows):
        if i in t.sections:
            out.append("| " + " | ".join([f"**{_md_escape(t.sections[i])}**"] + [""] * (ncol - 1)) + " |")
        cells = _styled(t, i, row, _md_escape, "**{}**", "*{}*")
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out += [n + "  " for n in t.notes]
    return "\n".join(out).rstrip() + "\n"


def _styled(t: "Table", i: int, row: list[str], escape, bold: str, italic: str) -> list[str]:
    """Row i's cells escaped for the output format, bold where best, italic on italic rows (skyline)."""
    cells = []
    for j, c in enumerate(row):
        c = escape(c)
        if c and (i, j) in t.bold:
            c = bold.format(c)
        elif c and i in t.italic_rows:
            c = italic.format(c)
        cells.append(c)
    return cells


_TEX_ESC = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
            "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_TEX_UNI = {"±": r"$\pm$", "—": "--", "−": "$-$", "λ": r"$\lambda$", "ρ": r"$\rho$",
            DAGGER: r"$^\dagger$", "×": r"$\times$", "“": "``", "”": "''", "Δ": r"$\Delta$", "←": r"$\leftarrow$"}


def tex_escape(s: str) -> str:
    s = "".join(_TEX_ESC.get(ch, ch) for ch in s)
    for a, b in _TEX_UNI.items():
        s = s.replace(a, b)
    return s


def to_latex(t: Table) -> str:
    """A booktabs table environment (needs \\usepackage{booktabs})."""
    ncol = len(t.columns)
    out = [r"\begin{table}[ht]", r"\centering", r"\small", rf"\caption{{{tex_escape(t.title)}}}",
           rf"\label{{tab:{t.name.replace('_', '-')}}}",
           r"\begin{tabular}{l" + "r" * (ncol - 1) + "}", r"\toprule",
           " & ".join(tex_escape(c) for c in t.columns) + r" \\", r"\midrule"]
    for i, row in enumerate(t.rows):
        if i in t.sections:
            if i > 0:
                out.append(r"\midrule")
            out.append(rf"\multicolumn{{{ncol}}}{{l}}{{\emph{{{tex_escape(t.sections[i])}}}}} \\")
        cells = _styled(t, i, row, tex_escape, r"\textbf{{{}}}", r"\textit{{{}}}")
        out.append(" & ".join(cells) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}"]
    if t.notes:
        out.append(r"\par\smallskip{\footnotesize " + " ".join(tex_escape(n) for n in t.notes) + "}")
    out.append(r"\end{table}")
    return "\n".join(out) + "\n"


def write_table(t: Table, out_dir: Path) -> dict[str, Path]:
    """Write <name>.csv, <name>.md, <name>.tex into out_dir; returns {'csv': path, ...}."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {ext: out_dir / f"{t.name}.{ext}" for ext in ("csv", "md", "tex")}
    write_text(paths["csv"], t.frame.to_csv(index=False))
    write_text(paths["md"], to_markdown(t))
    write_text(paths["tex"], to_latex(t))
    return paths
