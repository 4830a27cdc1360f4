"""A small document model rendered twice: self-contained HTML and Markdown with PNG files.

Sections are built once as blocks (headings, paragraphs, notes, tables, images, details) and
rendered by :func:`render_html` (images embedded as base64 PNG, one file that opens from disk) and
:func:`render_markdown` (images as PNG files in a folder next to the ``.md``), so both say the
same thing. Text is escaped with :func:`html.escape`; no template engine.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from matplotlib.figure import Figure

from harness.core.runfolder import write_bytes

__all__ = [
    "Badge",
    "Cell",
    "Code",
    "Doc",
    "Link",
    "Tip",
    "fig_png",
    "render_html",
    "render_markdown",
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


# --- HTML ----------------------------------------------------------------------------------------

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


def _href(href: str) -> str:
    return quote(href, safe="/#:?=&%.-_~")


def _inline_html(part: Inline) -> str:
    if isinstance(part, Link):
        return f'<a href="{html.escape(_href(part.href))}">{html.escape(part.text)}</a>'
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
            label = {"missing": "No data", "caveat": "Note", "error": "Error"}.get(b.kind, "Note")
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


# --- Markdown ------------------------------------------------------------------------------------


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def _inline_md(part: Inline) -> str:
    if isinstance(part, Link):
        return f"[{_md_escape(part.text)}]({_href(part.href)})"
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
            label = {"missing": "No data", "caveat": "Note", "error": "Error"}.get(b.kind, "Note")
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
            out.append(f"![{_md_escape(b.alt)}]({_href(f'{doc.image_dir}/{b.name}.png')})\n")
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


def write_doc(doc: Doc, out_dir: Path, stem: str = "report") -> tuple[Path, Path]:
    """Write ``<stem>.html``, ``<stem>.md`` and ``<image_dir>/*.png`` into ``out_dir``.

    Every file goes through a temporary name and a rename, so a failure never leaves a
    half-written report in place of a good one.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    img_dir = out_dir / doc.image_dir
    img_dir.mkdir(parents=True, exist_ok=True)
    keep = {f"{b.name}.png" for b in doc.images}
    for b in doc.images:
        write_bytes(img_dir / f"{b.name}.png", b.png, shared=True)
    for old in img_dir.glob("*.png"):  # pictures of an earlier report that this one no longer has
        if old.name not in keep:
            old.unlink(missing_ok=True)
    html_path, md_path = out_dir / f"{stem}.html", out_dir / f"{stem}.md"
    write_bytes(md_path, render_markdown(doc).encode("utf-8"), shared=True)
    write_bytes(html_path, render_html(doc).encode("utf-8"), shared=True)
    return html_path, md_path
