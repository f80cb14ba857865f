"""The report's index page: one list of blocks rendered as Markdown (index.md) and HTML (index.html).

Blocks are tuples:
  ("h1" | "h2" | "h3", text)     headings
  ("p", text)                    a paragraph (Markdown inline syntax allowed: **bold**, `code`)
  ("ul", [text, ...])            a bullet list
  ("table", Table)               a table from tables.py, shown inline
  ("links", [(label, href), ...])  a line of links to files, relative to the report directory
  ("figure", png_href, title, caption, [(label, href), ...])  an image with its caption and file links

index.html is self-contained so that it renders the same from disk and inside MLflow's sandboxed
artifact frame (which resolves no relative URL and opens no link): figures are embedded as
base64 data URIs, styles are inline, there are no anchors and no external resources; the files
beside it (CSV, LaTeX, PDF) are named as plain text paths. index.md keeps ordinary relative links.
"""
from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from orchestration.report.table_format import Table, to_markdown


def render_markdown(blocks: list[tuple]) -> str:
    out: list[str] = []
    for b in blocks:
        kind = b[0]
        if kind in ("h1", "h2", "h3"):
            out += ["#" * int(kind[1]) + " " + b[1], ""]
        elif kind == "p":
            out += [b[1], ""]
        elif kind == "ul":
            out += [f"- {item}" for item in b[1]] + [""]
        elif kind == "table":
            out += [to_markdown(b[1]), ""]
        elif kind == "links":
            out += [" · ".join(f"[{label}]({href})" for label, href in b[1]), ""]
        elif kind == "figure":
            _, png, title, caption, links = b
            out += [f"**{title}**", "", f"![{title}]({png})", "", f"*{caption}*", "",
                    " · ".join(f"[{label}]({href})" for label, href in links), ""]
        else:
            raise ValueError(f"unknown index block kind {kind!r}")
    return "\n".join(out).rstrip() + "\n"


def _inline_html(text: str) -> str:
    """Escape, then the two Markdown inline forms the report uses: **bold** and `code`."""
    s = html.escape(text)
    s = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", s)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", s)


def _table_html(t: Table) -> str:
    rows = [f"<caption>{html.escape(t.title)}</caption>",
            "<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in t.columns) + "</tr>"]
    for i, row in enumerate(t.rows):
        if i in t.sections:
            rows.append(f'<tr><td colspan="{len(t.columns)}"><i>{html.escape(t.sections[i])}</i></td></tr>')
        cells = []
        for j, c in enumerate(row):
            c = html.escape(c)
            if c and (i, j) in t.bold:
                c = f"<b>{c}</b>"
            elif c and i in t.italic_rows:
                c = f"<i>{c}</i>"
            cells.append(f"<td>{c}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in t.notes)
    return '<div class="tw"><table>\n' + "\n".join(rows) + "\n</table></div>\n" + notes


_CSS = ("body{font-family:sans-serif;max-width:1500px;margin:2em auto;padding:0 1em;line-height:1.4}"
        ".tw{overflow-x:auto}td{white-space:nowrap}td:first-child{white-space:normal;min-width:9em}"
        "table{border-collapse:collapse;margin:1em 0;font-size:90%}"
        "th,td{border-bottom:1px solid #ccc;padding:3px 8px;text-align:right}"
        "th:first-child,td:first-child{text-align:left}caption{font-weight:bold;text-align:left}"
        "img{max-width:100%}figure{margin:1.5em 0}.note{font-size:85%;color:#444}"
        ".files{font-size:85%;color:#555}")


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _files_html(links: list[tuple[str, str]]) -> str:
    """Files beside the report, named (not linked: a link breaks inside MLflow's sandboxed frame)."""
    return ('<span class="files">files: ' + " · ".join(f"<code>{html.escape(h)}</code>" for _, h in links)
            + "</span>") if links else ""


def render_html(blocks: list[tuple], title: str, base: Path) -> str:
    """Self-contained HTML; `base` is the report directory the figure paths are relative to."""
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"]
    for b in blocks:
        kind = b[0]
        if kind in ("h1", "h2", "h3"):
            out.append(f"<{kind}>{_inline_html(b[1])}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{_inline_html(b[1])}</p>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in b[1]) + "</ul>")
        elif kind == "table":
            out.append(_table_html(b[1]))
        elif kind == "links":
            out.append(f"<p>{_files_html(b[1])}</p>")
        elif kind == "figure":
            _, png, title, caption, links = b
            out.append(f'<figure><img src="{_data_uri(Path(base) / png)}" alt="{html.escape(title)}">'
                       f"<figcaption><b>{html.escape(title)}.</b> {html.escape(caption)}<br>"
                       + _files_html(links) + "</figcaption></figure>")
        else:
            raise ValueError(f"unknown index block kind {kind!r}")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
