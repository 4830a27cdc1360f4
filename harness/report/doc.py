"""A small document model rendered twice: self-contained HTML and Markdown with PNG files.

Sections are built once as blocks (headings, paragraphs, notes, tables, images, details) and
rendered by :func:`~harness.report.page.render_html` (Jinja templates; images embedded as base64
PNG, one file that opens from disk) and :func:`~harness.report.markdown.render_markdown` (images
as PNG files in a folder next to the ``.md``), so both say the same thing;
:func:`~harness.report.write.write_doc` writes them. Nothing here knows HTML.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from matplotlib.figure import Figure

__all__ = [
    "NOTE_LABELS",
    "Badge",
    "Cell",
    "Code",
    "Doc",
    "Link",
    "Tip",
    "cell_text",
    "fig_png",
    "href",
]


# --- inline parts --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """A relative link; ``href`` is a path relative to the report (quoted when rendered)."""

    text: str
    href: str


@dataclass(frozen=True)
class Code:
    text: str


@dataclass(frozen=True)
class Badge:
    """A coloured label: ``kind`` picks the colour (confirmed, refuted, inconclusive, ok, ...)."""

    text: str
    kind: str = ""
    tip: str = ""


@dataclass(frozen=True)
class Tip:
    """Text with more on hover in HTML (``title``); Markdown shows the text only."""

    text: str
    tip: str


Inline = str | Link | Code | Badge | Tip


@dataclass(frozen=True)
class Cell:
    """A table cell with a background colour: ``kind`` picks it (match, mismatch, notjudged);
    ``value`` is what the cell shows (any cell value), ``tip`` more on hover in HTML."""

    value: Any
    kind: str
    tip: str = ""


# --- blocks --------------------------------------------------------------------------------------


@dataclass
class Heading:
    level: int
    text: str
    anchor: str


@dataclass
class Para:
    parts: tuple[Inline, ...]
    cls: str = ""


@dataclass
class Note:
    """Why a section has no data (or holds a caveat); rendered as a visible callout."""

    text: str
    kind: str = "missing"  # missing | caveat | error


@dataclass
class Table:
    header: list[str]
    rows: list[list[Any]]
    caption: str = ""
    numeric: set[int] = field(default_factory=set)


@dataclass
class Image:
    name: str
    png: bytes
    alt: str
    caption: str = ""
    width_px: int = 0


@dataclass
class Details:
    summary: str
    text: str


@dataclass
class DefList:
    items: list[tuple[str, Sequence[Inline]]]


Block = Heading | Para | Note | Table | Image | Details | DefList

#: What a note's callout starts with, per kind.
NOTE_LABELS = {"missing": "No data", "caveat": "Note", "error": "Error"}


def fig_png(fig: Figure, dpi: int = 100) -> bytes:
    """The figure as a palette PNG (white background, at most 256 colours, no dithering).

    Charts are flat colours with anti-aliased edges, so a palette loses nothing a reader sees
    and makes the file 3-4x smaller than RGBA: reports stay light, and reference folders keep
    their pictures in git (the repository has a size budget)."""
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, facecolor="white")
    buf.seek(0)
    with Image.open(buf) as img:
        pal = img.convert("RGB").quantize(
            colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE
        )
    out = io.BytesIO()
    pal.save(out, format="PNG", optimize=True)
    return out.getvalue()


def slug(text: str) -> str:
    out = "".join(c if c.isalnum() else "-" for c in text.lower())
    return "-".join(p for p in out.split("-") if p) or "section"


class Doc:
    """An ordered list of blocks plus the images they use (name -> PNG bytes)."""

    def __init__(self, title: str, image_dir: str = "report") -> None:
        self.title = title
        self.image_dir = image_dir
        self.blocks: list[Block] = []
        self._anchors: set[str] = set()

    # builders ---------------------------------------------------------------------------------
    def h(self, level: int, text: str, anchor: str | None = None) -> str:
        base = anchor or slug(text)
        a, i = base, 2
        while a in self._anchors:
            a, i = f"{base}-{i}", i + 1
        self._anchors.add(a)
        self.blocks.append(Heading(level, text, a))
        return a

    def p(self, *parts: Inline, cls: str = "") -> None:
        self.blocks.append(Para(tuple(parts), cls))

    def note(self, text: str, kind: str = "missing") -> None:
        self.blocks.append(Note(text, kind))

    def table(
        self,
        header: list[str],
        rows: Iterable[Sequence[Any]],
        caption: str = "",
        numeric: Iterable[int] = (),
    ) -> None:
        self.blocks.append(Table(header, [list(r) for r in rows], caption, set(numeric)))

    def image(
        self, name: str, fig: Figure | bytes, alt: str, caption: str = "", width_px: int = 0
    ) -> None:
        png = fig if isinstance(fig, bytes) else fig_png(fig)
        names = {b.name for b in self.blocks if isinstance(b, Image)}
        if name in names:
            raise ValueError(f"image name {name!r} used twice")
        self.blocks.append(Image(name, png, alt, caption, width_px))

    def details(self, summary: str, text: str) -> None:
        self.blocks.append(Details(summary, text))

    def deflist(self, items: list[tuple[str, Sequence[Inline]]]) -> None:
        self.blocks.append(DefList(items))

    @property
    def images(self) -> list[Image]:
        return [b for b in self.blocks if isinstance(b, Image)]

    @property
    def headings(self) -> list[Heading]:
        return [b for b in self.blocks if isinstance(b, Heading)]


# --- cell text -----------------------------------------------------------------------------------


def cell_text(value: Any) -> str:
    """Plain text of a table cell: numbers with 3 significant digits, NaN/None as an en dash."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        return f"{value:.3g}" if abs(value) < 1e3 else f"{value:,.0f}"
    if isinstance(value, Link | Code | Badge | Tip):
        return value.text
    if isinstance(value, Cell):
        return cell_text(value.value)
    try:  # pandas NA and numpy scalars
        import pandas as pd

        if pd.isna(value):
            return "–"
    except (TypeError, ValueError):
        pass
    if hasattr(value, "item"):
        return cell_text(value.item())
    return str(value)


def href(target: str) -> str:
    """A relative link as a URL: spaces and other unsafe characters percent-quoted."""
    return quote(target, safe="/#:?=&%.-_~")
