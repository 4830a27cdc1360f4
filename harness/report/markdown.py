"""The Markdown report: the same :class:`~harness.report.doc.Doc` as the HTML page, with its
pictures as PNG files in a folder beside the ``.md`` (GitHub shows it as it is)."""

from __future__ import annotations

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

__all__ = ["render_markdown"]


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def _inline_md(part: Inline) -> str:
    if isinstance(part, Link):
        return f"[{_md_escape(part.text)}]({href(part.href)})"
    if isinstance(part, Code):
        return f"`{part.text}`"
    if isinstance(part, Badge):
        return f"**{_md_escape(part.text)}**"
    if isinstance(part, Tip):
        return _md_escape(part.text)
    return _md_escape(str(part))


def _cell_md(value: Any) -> str:
    if isinstance(value, Cell):
        return _cell_md(value.value)
    if isinstance(value, list | tuple):
        return " ".join(_cell_md(v) for v in value)
    if isinstance(value, Link | Code | Badge | Tip):
        return _inline_md(value)
    return _md_escape(cell_text(value))


def render_markdown(doc: Doc) -> str:
    """Markdown; images referenced as ``<image_dir>/<name>.png`` (see :func:`write_doc`)."""
    out: list[str] = []
    for b in doc.blocks:
        if isinstance(b, Heading):
            out.append(f"{'#' * min(max(b.level, 1), 6)} {b.text}\n")
        elif isinstance(b, Para):
            out.append("".join(_inline_md(p) for p in b.parts) + "\n")
        elif isinstance(b, Note):
            label = NOTE_LABELS.get(b.kind, "Note")
            out.append(f"> **{label}:** {_md_escape(b.text)}\n")
        elif isinstance(b, Table):
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
        elif isinstance(b, Image):
            out.append(f"![{_md_escape(b.alt)}]({href(f'{doc.image_dir}/{b.name}.png')})\n")
            if b.caption:
                out.append(f"*{_md_escape(b.caption)}*\n")
        elif isinstance(b, Details):
            out.append(f"<details><summary>{html.escape(b.summary)}</summary>\n")
            out.append("```\n" + b.text.rstrip("\n") + "\n```\n")
            out.append("</details>\n")
        elif isinstance(b, DefList):
            for term, parts in b.items:
                out.append(f"- **{_md_escape(term)}**: " + "".join(_inline_md(p) for p in parts))
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
