"""The HTML report: one self-contained page (inline CSS, images as ``data:`` URIs) of a
:class:`~harness.report.doc.Doc`. Text is escaped with :func:`html.escape`."""

from __future__ import annotations

import base64
import html
from typing import Any

from harness.report.doc import (
    NOTE_LABELS,
    Badge,
    Cell,
    Code,
    DefList,
    Details,
    Doc,
    Heading,
    Image,
    Inline,
    Link,
    Note,
    Para,
    Table,
    Tip,
    cell_text,
    href,
)

__all__ = ["render_html"]

CSS = """
:root { --fg:#1d2430; --muted:#5b6472; --line:#dde2ea; --bg:#ffffff; --soft:#f5f7fa; }
* { box-sizing: border-box; }
body { font: 14px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--fg); background: var(--bg); margin: 0; }
main { max-width: 1560px; margin: 0 auto; padding: 24px 32px 64px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 36px 0 10px; padding-top: 12px; border-top: 2px solid var(--line); }
h3 { font-size: 16px; margin: 22px 0 8px; }
p { margin: 6px 0 10px; max-width: 1100px; }
p.sub { color: var(--muted); margin-top: 0; }
a { color: #1b5fb4; }
code { font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
       background: var(--soft); padding: 1px 4px; border-radius: 3px; }
nav { background: var(--soft); border: 1px solid var(--line); border-radius: 6px;
      padding: 8px 14px; margin: 14px 0 8px; }
nav a { margin-right: 14px; white-space: nowrap; line-height: 1.9; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 8px 0 14px; font-size: 13px; }
td a { white-space: nowrap; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: left;
         vertical-align: top; }
th { background: var(--soft); font-weight: 600; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
caption { caption-side: top; text-align: left; color: var(--muted); padding: 4px 0; }
.note { border-left: 4px solid #c9a227; background: #fdf8e6; padding: 8px 12px; margin: 8px 0 14px;
        max-width: 1100px; }
.note.caveat { border-color: #6b8cc7; background: #eef3fb; }
.note.error { border-color: #c0392b; background: #fbeeee; }
.badge { display: inline-block; padding: 0 8px; border-radius: 10px; font-size: 12px;
         font-weight: 600; background: #e7e9ee; color: #333; white-space: nowrap; }
.badge.confirmed, .badge.ok, .badge.fired-good { background: #d5f0dc; color: #17622f; }
.badge.refuted, .badge.failed, .badge.oom, .badge.timeout, .badge.evidence_failed,
.badge.no_result, .badge.fired-bad { background: #f8d7d5; color: #8c1d18; }
.badge.inconclusive, .badge.skipped, .badge.missing { background: #fbecc8; color: #7a5200; }
.badge.notjudged { background: #eceff3; color: #6b7280; }
td.match { background: #d5f0dc; } td.mismatch { background: #f8d7d5; }
td.notjudged { background: #eceff3; color: #6b7280; } td.partial { box-shadow: inset 4px 0 #c9a227; }
figure { margin: 10px 0 18px; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 4px; }
figcaption { color: var(--muted); font-size: 13px; max-width: 1100px; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; max-width: 1200px; }
dt { font-weight: 600; color: var(--muted); }
dd { margin: 0; }
details { margin: 6px 0 14px; }
details pre { background: var(--soft); padding: 10px; border-radius: 4px; overflow-x: auto;
              font-size: 12px; max-height: 600px; }
[title] { text-decoration: underline dotted #9aa3b0; cursor: help; }
a[title], .badge[title] { text-decoration: none; }
"""


def _inline_html(part: Inline) -> str:
    if isinstance(part, Link):
        return f'<a href="{html.escape(href(part.href))}">{html.escape(part.text)}</a>'
    if isinstance(part, Code):
        return f"<code>{html.escape(part.text)}</code>"
    if isinstance(part, Badge):
        tip = f' title="{html.escape(part.tip)}"' if part.tip else ""
        return f'<span class="badge {html.escape(part.kind)}"{tip}>{html.escape(part.text)}</span>'
    if isinstance(part, Tip):
        return f'<span title="{html.escape(part.tip)}">{html.escape(part.text)}</span>'
    return html.escape(str(part))


def _cell_html(value: Any) -> str:
    if isinstance(value, Cell):
        return _cell_html(value.value)
    if isinstance(value, list | tuple):
        return " ".join(_cell_html(v) for v in value)
    if isinstance(value, Link | Code | Badge | Tip):
        return _inline_html(value)
    return html.escape(cell_text(value)).replace("\n", "<br>")


def _td(value: Any, numeric: bool) -> str:
    classes = ["num"] if numeric else []
    tip = ""
    if isinstance(value, Cell):
        classes += value.kind.split()
        tip = f' title="{html.escape(value.tip)}"' if value.tip else ""
    cls = f' class="{html.escape(" ".join(classes))}"' if classes else ""
    return f"<td{cls}{tip}>{_cell_html(value)}</td>"


def render_html(doc: Doc) -> str:
    """One self-contained HTML page (inline CSS, images as data: URIs)."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(doc.title)}</title>",
        f"<style>{CSS}</style></head><body><main>",
    ]
    for b in doc.blocks:
        if isinstance(b, Heading):
            lvl = min(max(b.level, 1), 4)
            out.append(f'<h{lvl} id="{html.escape(b.anchor)}">{html.escape(b.text)}</h{lvl}>')
        elif isinstance(b, Para):
            cls = f' class="{html.escape(b.cls)}"' if b.cls else ""
            out.append(f"<p{cls}>" + "".join(_inline_html(p) for p in b.parts) + "</p>")
        elif isinstance(b, Note):
            label = NOTE_LABELS.get(b.kind, "Note")
            out.append(
                f'<div class="note {html.escape(b.kind)}"><strong>{label}:</strong> '
                f"{html.escape(b.text)}</div>"
            )
        elif isinstance(b, Table):
            out.append('<div class="scroll"><table>')
            if b.caption:
                out.append(f"<caption>{html.escape(b.caption)}</caption>")
            out.append("<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in b.header))
            out.append("</tr></thead><tbody>")
            for row in b.rows:
                cells = []
                for i, v in enumerate(row):
                    cells.append(_td(v, i in b.numeric))
                out.append("<tr>" + "".join(cells) + "</tr>")
            out.append("</tbody></table></div>")
        elif isinstance(b, Image):
            data = base64.b64encode(b.png).decode("ascii")
            style = f' style="width:{b.width_px}px"' if b.width_px else ""
            out.append(
                f'<figure id="fig-{html.escape(b.name)}"><img{style} alt="{html.escape(b.alt)}" '
                f'src="data:image/png;base64,{data}">'
            )
            if b.caption:
                out.append(f"<figcaption>{html.escape(b.caption)}</figcaption>")
            out.append("</figure>")
        elif isinstance(b, Details):
            out.append(
                f"<details><summary>{html.escape(b.summary)}</summary>"
                f"<pre>{html.escape(b.text)}</pre></details>"
            )
        elif isinstance(b, DefList):
            out.append("<dl>")
            for term, parts in b.items:
                body = "".join(_inline_html(p) for p in parts)
                out.append(f"<dt>{html.escape(term)}</dt><dd>{body}</dd>")
            out.append("</dl>")
    out.append("</main></body></html>")
    return "\n".join(out) + "\n"
