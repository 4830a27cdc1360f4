"""The HTML report: a :class:`~harness.report.doc.Doc` turned into plain data, rendered by the
Jinja templates in ``templates/`` (the markup lives there, none of it here).

The page is one self-contained file that opens from disk: the CSS is inlined and each picture is a
``data:`` URI. Autoescaping is on for every template. Values are escaped the way
:func:`html.escape` spells it (``&quot;``, ``&#x27;``) rather than MarkupSafe's (``&#34;``,
``&#39;``): the same characters are escaped either way, and reports stay byte-identical with the
ones written before the templates (and with what the tests search for).
"""

from __future__ import annotations

import base64
import html
from functools import cache
from typing import Any

import jinja2
from markupsafe import Markup

from harness.report.doc import (
    NOTE_LABELS,
    Badge,
    Block,
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

__all__ = ["environment", "page_data", "render_html"]

Data = dict[str, Any]


# --- the document as plain data ------------------------------------------------------------------


def _inline(part: Inline) -> Data:
    """One inline part: ``type`` names the template's markup for it."""
    if isinstance(part, Link):
        return {"type": "link", "text": part.text, "href": href(part.href)}
    if isinstance(part, Code):
        return {"type": "code", "text": part.text}
    if isinstance(part, Badge):
        return {"type": "badge", "text": part.text, "cls": part.kind, "tip": part.tip}
    if isinstance(part, Tip):
        return {"type": "tip", "text": part.text, "tip": part.tip}
    return {"type": "text", "text": str(part)}


def _cell_parts(value: Any) -> list[Data]:
    """What a cell shows, as inline parts (a list value: its items, separated by spaces); plain
    values formatted by :func:`cell_text`, their line breaks kept."""
    if isinstance(value, Cell):
        return _cell_parts(value.value)
    if isinstance(value, list | tuple):
        return [p for v in value for p in _cell_parts(v)]
    if isinstance(value, Link | Code | Badge | Tip):
        return [_inline(value)]
    return [{"type": "lines", "lines": cell_text(value).split("\n")}]


def _cell(value: Any, numeric: bool) -> Data:
    """A table cell: its classes (``num`` right-aligns; a :class:`Cell`'s kind colours it)."""
    classes = ["num"] if numeric else []
    tip = ""
    if isinstance(value, Cell):
        classes += value.kind.split()
        tip = value.tip
    return {"cls": " ".join(classes), "tip": tip, "parts": _cell_parts(value)}


def _table(b: Table) -> Data:
    rows = [[_cell(v, i in b.numeric) for i, v in enumerate(row)] for row in b.rows]
    return {"type": "table", "caption": b.caption, "header": b.header, "rows": rows}


def _image(b: Image) -> Data:
    src = "data:image/png;base64," + base64.b64encode(b.png).decode("ascii")
    return {
        "type": "image",
        "name": b.name,
        "alt": b.alt,
        "src": src,
        "caption": b.caption,
        "width_px": b.width_px,
    }


def _block(b: Block) -> Data:
    """One block as the template's data (``type`` picks its macro in ``blocks.html.j2``)."""
    if isinstance(b, Heading):
        level = min(max(b.level, 1), 4)
        return {"type": "heading", "level": level, "anchor": b.anchor, "text": b.text}
    if isinstance(b, Para):
        return {"type": "para", "cls": b.cls, "parts": [_inline(p) for p in b.parts]}
    if isinstance(b, Note):
        label = NOTE_LABELS.get(b.kind, "Note")
        return {"type": "note", "cls": b.kind, "label": label, "text": b.text}
    if isinstance(b, Table):
        return _table(b)
    if isinstance(b, Image):
        return _image(b)
    if isinstance(b, Details):
        return {"type": "details", "summary": b.summary, "text": b.text}
    if isinstance(b, DefList):
        entries = [{"term": t, "parts": [_inline(p) for p in parts]} for t, parts in b.items]
        return {"type": "deflist", "entries": entries}
    raise TypeError(f"not a block: {b!r}")


def page_data(doc: Doc) -> Data:
    """Everything ``report.html.j2`` shows: the title and the blocks, as dicts of strings."""
    return {"title": doc.title, "blocks": [_block(b) for b in doc.blocks]}


# --- rendering -----------------------------------------------------------------------------------


def _escape(value: Any) -> Any:
    """Every printed value, escaped as :func:`html.escape` does (already-safe markup, such as a
    macro's output, passes as it is). Autoescaping then leaves the result alone."""
    if hasattr(value, "__html__"):
        return value
    return Markup(html.escape(str(value)))


@cache
def environment() -> jinja2.Environment:
    """The report's templates (package data of ``harness.report``), autoescaped; a missing value
    is an error rather than an empty string."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("harness.report", "templates"),
        autoescape=True,
        finalize=_escape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render_html(doc: Doc) -> str:
    """One self-contained HTML page (inline CSS, images as data: URIs)."""
    return environment().get_template("report.html.j2").render(page_data(doc))
