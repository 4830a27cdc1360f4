"""The Markdown report: the same :class:`~harness.report.doc.Doc` as the HTML page, with its
pictures as PNG files in a folder beside the ``.md`` (GitHub shows it as it is)."""

from __future__ import annotations

import html
from typing import Any

from harness.report import doc as m

__all__ = ["render_markdown"]


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def _inline_md(part: m.Inline) -> str:
    if isinstance(part, m.Link):
        return f"[{_md_escape(part.text)}]({m.href(part.href)})"
    if isinstance(part, m.Code):
        return f"`{part.text}`"
    if isinstance(part, m.Badge):
        return f"**{_md_escape(part.text)}**"
    if isinstance(part, m.Tip):
        return _md_escape(part.text)
    return _md_escape(str(part))


def _cell_md(value: Any) -> str:
    if isinstance(value, m.Cell):
        return _cell_md(value.value)
    if isinstance(value, list | tuple):
        return " ".join(_cell_md(v) for v in value)
    if isinstance(value, m.Link | m.Code | m.Badge | m.Tip):
        return _inline_md(value)
    return _md_escape(m.cell_text(value))


def render_markdown(doc: m.Doc) -> str:
    """Markdown; images referenced as ``<image_dir>/<name>.png`` (see :func:`write_doc`)."""
    out: list[str] = []
    for b in doc.blocks:
        if isinstance(b, m.Heading):
            out.append(f"{'#' * min(max(b.level, 1), 6)} {b.text}\n")
        elif isinstance(b, m.Para):
            out.append("".join(_inline_md(p) for p in b.parts) + "\n")
        elif isinstance(b, m.Note):
            label = m.NOTE_LABELS.get(b.kind, "m.Note")
            out.append(f"> **{label}:** {_md_escape(b.text)}\n")
        elif isinstance(b, m.Table):
            if b.caption:
                out.append(f"*{_md_escape(b.caption)}*\n")
            out.append("| " + " | ".join(_md_escape(h) for h in b.header) + " |")
            out.append(
                "| "
                + " | ".join("---:" if i in b.numeric else "---" for i in range(len(b.header)))
                + " |"
            )
            for row in b.rows:
                out.append("| " + " | ".join(_cell_md(v) for v in row) + " |")
            out.append("")
        elif isinstance(b, m.Image):
            out.append(f"![{_md_escape(b.alt)}]({m.href(f'{doc.image_dir}/{b.name}.png')})\n")
            if b.caption:
                out.append(f"*{_md_escape(b.caption)}*\n")
        elif isinstance(b, m.Details):
            out.append(f"<details><summary>{html.escape(b.summary)}</summary>\n")
            out.append("```\n" + b.text.rstrip("\n") + "\n```\n")
            out.append("</details>\n")
        elif isinstance(b, m.DefList):
            for term, parts in b.items:
                out.append(f"- **{_md_escape(term)}**: " + "".join(_inline_md(p) for p in parts))
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
