"""The reference folders a visitor opens on the repository's page: every folder of results under
results/reference/ has its report in Markdown with its pictures committed, every picture and
file it links is there, and its pictures stay small (the repository has a size budget)."""

from __future__ import annotations

import io
import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from PIL import Image

from tests.conftest import REPO

REFERENCE = REPO / "results" / "reference"

#: A folder's pictures may take this much in all (palette PNGs; see harness/report/doc.fig_png).
#: The H100 report of 2026-11-27 takes 432 kB: its sync_loading timeline alone is 183 kB (DALI's
#: 15 decode streams, each kernel drawn), already a 199-colour palette image.
MAX_PICTURES_BYTES = 450_000

#: Folders whose report is written when their run is replaced (strict: once the report is there,
#: this mark fails and asks to be removed).
PENDING: dict[str, str] = {}


def _folders() -> list[Path]:
    """Every folder of results (manifest.json beside runs.csv: a run; compare.csv: a comparison)
    under the reference; a run's extra tables (``h200/second/``: a repeat run's runs.csv,
    diagnosis.csv and verdicts.csv, without a manifest) are part of that run's folder."""
    found = {
        p.parent for p in REFERENCE.rglob("runs.csv") if (p.parent / "manifest.json").is_file()
    }
    return sorted(found | {p.parent for p in REFERENCE.rglob("compare.csv")})


#: Folders packed for the repository's size budget: README.md and tables.tar.xz, the pictures in
#: git at the commit the README names.
PACKED = ("h200x2", "h200x4", "h200/tools")


def _param(folder: Path):
    rel = folder.relative_to(REFERENCE).as_posix()
    marks = [pytest.mark.xfail(strict=True, reason=PENDING[rel])] if rel in PENDING else []
    return pytest.param(folder, id=rel, marks=marks)


@pytest.mark.parametrize("folder", [_param(f) for f in _folders()])
def test_reference_folder_has_its_report(folder: Path) -> None:
    md = folder / ("compare.md" if (folder / "compare.csv").is_file() else "report.md")
    assert md.is_file(), f"{md} is missing: python -m harness report {folder}"
    text = md.read_text(encoding="utf-8")
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert pictures, f"{md}: no pictures"
    total = 0
    for ref in pictures:
        png = md.parent / unquote(ref)
        assert png.is_file(), f"{md}: picture {ref} is not committed"
        data = png.read_bytes()
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
        with Image.open(io.BytesIO(data)) as img:
            assert img.width >= 300 and img.height >= 150, (ref, img.size)
        total += len(data)
    assert total <= MAX_PICTURES_BYTES, f"{md.parent}: pictures take {total:,} bytes"
    for ref in re.findall(r"(?<!!)\[[^\]]*\]\(([^)#][^)]*)\)", text):
        assert (md.parent / unquote(ref)).exists(), f"{md}: link {ref} leads nowhere"


def test_every_reference_folder_is_checked() -> None:
    names = {f.relative_to(REFERENCE).as_posix() for f in _folders()}
    assert {"h100", "h200", "compare"} <= names, names


@pytest.mark.parametrize("name", PACKED)
def test_a_packed_folder_says_how_to_unpack_and_holds_its_run(name: str) -> None:
    """A packed reference keeps its README (what was run, why it was packed, where its pictures
    are) and its tables in one archive that holds the run's runs.csv and report.md."""
    import lzma
    import tarfile

    folder = REFERENCE / name
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "tables.tar.xz"]
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert "tar -xJf tables.tar.xz" in readme and f"results/reference/{name}/report/" in readme
    with lzma.open(folder / "tables.tar.xz") as xz, tarfile.open(fileobj=xz) as tar:
        held = {m.name.removeprefix("./") for m in tar.getmembers()}
    assert {"runs.csv", "report.md", "manifest.json", "verdicts.csv"} <= held, held
