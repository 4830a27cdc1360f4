"""report.html opened in a real browser: Debian's headless Chromium driven by Playwright.

The report is a web page people open from disk, so it is checked the way they see it: no console
errors, every picture decodes to a non-zero size, every section the table of contents names is
on the page and its link scrolls to it, and every other link inside the page lands on an
element. The page under test is a report of the committed H100 tables and exports (timelines
included); a full-page screenshot is saved in the test's temporary folder. The same checks must
fail on a copy whose picture is broken. Both chromium and playwright are installed by
scripts/setup.sh (and so by CI); without them the tests skip and say so.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests._fixtures import sqlite_fixture
from tests.conftest import DATA

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

#: Flags that let Debian's Chromium run headless in a container without a display or network.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

#: Committed H100 exports placed as the tables' profiled variants (timelines need a pair).
EXPORTS = {
    ("kernel_flood", "baseline"): ("h100", "h100_kernel_flood__baseline"),
    ("kernel_flood", "cuda_graphs"): ("h100", "h100_kernel_flood__cuda_graphs"),
    ("sync_loading", "baseline"): (None, "gpu_nsys2025_sync_loading"),
    ("sync_loading", "async_dataloader"): (None, "gpu_nsys2025_sync_loading_async_dataloader"),
}


def _need_browser() -> None:
    """Skip without the browser, saying how to get it; in CI (CI=true), where
    scripts/setup.sh has installed both, a missing one is a failure."""
    missing = ""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing = "playwright is not installed (bash scripts/setup.sh installs it)"
    if not missing and not Path(CHROMIUM).is_file():
        missing = "chromium is not installed (bash scripts/setup.sh installs Debian's package)"
    if missing and os.environ.get("CI") == "true":
        pytest.fail(missing)
    if missing:
        pytest.skip(missing)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """report.html of the H100 tables with four committed exports in place."""
    _need_browser()
    from harness.report import write_run_report

    run = tmp_path_factory.mktemp("browser") / "h100"
    shutil.copytree(DATA / "h100_run_tables", run)
    for (scen, variant), (sub, name) in EXPORTS.items():
        prof = run / scen / variant / "profile"
        prof.mkdir(parents=True)
        src = sqlite_fixture(name, DATA / sub) if sub else sqlite_fixture(name)
        shutil.copyfile(src, prof / f"{scen}__{variant}.sqlite")
    html, _ = write_run_report(run)
    return html


def browser_check(html: Path, shot: Path, profile: Path) -> dict[str, Any]:
    """Open ``html`` in headless Chromium (fresh profile folder) and read what a visitor meets:
    console errors, each image's decoded size, the table of contents' targets and where its
    links scroll to, the internal links without a target; a full-page screenshot to ``shot``."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1400, "height": 900},
        )
        try:
            page = ctx.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(html.resolve().as_uri(), wait_until="load")
            images = page.evaluate(
                """() => Promise.all([...document.images].map(i => i.decode().then(
                    () => ({alt: i.alt, w: i.naturalWidth, h: i.naturalHeight}),
                    () => ({alt: i.alt, w: 0, h: 0}))))"""
            )
            toc = page.eval_on_selector_all("p.nav a", "as => as.map(a => a.getAttribute('href'))")
            dangling = page.evaluate(
                """() => [...document.querySelectorAll('a[href^="#"]')]
                    .map(a => a.getAttribute('href'))
                    .filter(h => !document.getElementById(decodeURIComponent(h.slice(1))))"""
            )
            landed = {}
            for href in toc:
                page.click(f'p.nav a[href="{href}"]')
                landed[href] = page.evaluate(
                    """(id) => { const e = document.getElementById(id); if (!e) return null;
                        const r = e.getBoundingClientRect();
                        return {hash: location.hash, top: r.top, height: innerHeight}; }""",
                    href[1:],
                )
            page.screenshot(path=str(shot), full_page=True)
            width = page.evaluate("() => document.documentElement.scrollWidth")
        finally:
            ctx.close()
    return {"errors": errors, "images": images, "toc": toc, "landed": landed,
            "dangling": dangling, "scroll_width": width}  # fmt: skip


def problems(seen: dict[str, Any]) -> list[str]:
    """What a visitor would find wrong, one line each (empty: the page is sound)."""
    out = [f"console error: {e}" for e in seen["errors"]]
    out += [f"image does not decode: {i['alt']!r}" for i in seen["images"] if not i["w"] * i["h"]]
    for href, where in seen["landed"].items():
        if where is None:
            out.append(f"table of contents names {href}, which is not on the page")
        elif where["hash"] != href or not -2 <= where["top"] < where["height"]:
            out.append(f"the link {href} does not scroll to its section: {where}")
    out += [f"link to a missing target: {h}" for h in seen["dangling"]]
    if seen["scroll_width"] > 1400:
        out.append(f"the page scrolls sideways: {seen['scroll_width']} px wide in a 1400 px window")
    return out


def test_report_in_a_browser(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    seen = browser_check(report, shot, tmp_path / "profile")
    assert problems(seen) == []
    # the sections the table of contents names: the fixed ones, each scenario, the environment
    names = {h.removeprefix("#") for h in seen["toc"]}
    for anchor in ("summary", "matrix", "verdicts", "detectors", "fix-effect", "confusion",
                   "variants", "environment", "scenario-kernel_flood", "scenario-sync_loading"):  # fmt: skip
        assert anchor in names, anchor
    alts = [i["alt"] for i in seen["images"]]
    assert len(alts) >= 6 and any("timeline" in a for a in alts), alts
    from PIL import Image

    with Image.open(shot) as img:
        assert img.width >= 1400 and img.height > 5 * 900  # the whole page, not one screen


def test_a_broken_image_is_caught(report: Path, tmp_path: Path) -> None:
    """The same page with one picture's bytes damaged (its PNG signature gone, as when a figure
    is written half or as something else): the check names that picture."""
    text = report.read_text(encoding="utf-8")
    first = re.search(r'alt="([^"]+)" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert first is not None
    png = base64.b64decode(first.group(2))
    cut = base64.b64encode(png[8:]).decode("ascii")
    broken = tmp_path / "broken.html"
    broken.write_text(text.replace(first.group(2), cut, 1), encoding="utf-8")
    found = problems(browser_check(broken, tmp_path / "broken.png", tmp_path / "profile"))
    assert f"image does not decode: {first.group(1)!r}" in found, found
