"""Writing a report's files: the HTML page, the Markdown and its pictures, each atomically."""

from __future__ import annotations

from pathlib import Path

from harness.core.runfolder import write_bytes
from harness.report.doc import Doc
from harness.report.markdown import render_markdown
from harness.report.page import render_html

__all__ = ["write_doc"]


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
