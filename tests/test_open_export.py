"""analysis.export.open_export: every form of a real export opens; everything bad is one
ExportError naming the file and the problem, and no temporary file is left behind."""

from __future__ import annotations

import lzma
import shutil
import sqlite3
from pathlib import Path

import pytest

from analysis.trace import ExportError, TraceError, open_export, unxz
from tests._fixtures import xz_fixture

DATA = Path(__file__).parent / "data"
#: A real export as a plain xz file (nsys's SQLite inside), as a capture reaches the suite.
XZ = xz_fixture("cpu_nsys2022_sync_loading")
PACKED = (
    Path(__file__).parent.parent
    / "corpus"
    / "wild"
    / "exports"
    / "clean_compile_short.sqlite.cols.xz"
)


def _strings(trace) -> int:
    return int(trace.query("SELECT COUNT(*) FROM StringIds")[1][0][0])


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    return unxz(XZ, tmp_path_factory.mktemp("plain"))


def test_every_form_opens_the_same_export(plain: Path) -> None:
    with open_export(plain) as trace:
        assert trace.path == plain and trace.source == plain
        n = _strings(trace)
    with open_export(XZ) as trace:
        assert trace.source == XZ and trace.path != XZ and trace.path.name.endswith(".sqlite")
        assert _strings(trace) == n > 0
        tmp = trace.path
    assert not tmp.exists() and not tmp.parent.exists()  # the temporary folder is gone


def test_packed_export_opens() -> None:
    with open_export(PACKED) as trace:
        assert trace.source == PACKED and trace.has("StringIds") and _strings(trace) > 0
        tmp = trace.path
    assert not tmp.parent.exists()


def test_the_temporary_folder_goes_when_the_block_raises() -> None:
    with pytest.raises(KeyError), open_export(XZ) as trace:
        tmp = trace.path
        raise KeyError("the caller's own error passes through")
    assert not tmp.parent.exists()


def _truncated(tmp: Path, src: Path, n: int, name: str) -> Path:
    out = tmp / name
    out.write_bytes(src.read_bytes()[:n])
    return out


def _flipped(tmp: Path, src: Path, at: float, name: str) -> Path:
    raw = bytearray(src.read_bytes())
    raw[int(len(raw) * at)] ^= 0xFF
    out = tmp / name
    out.write_bytes(bytes(raw))
    return out


def _bad_inputs(tmp: Path, plain: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, a word its problem must say)."""
    empty = tmp / "empty.sqlite"
    empty.write_bytes(b"")
    text = tmp / "notes.sqlite"
    text.write_text("not an export\n")
    other = tmp / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    gz_named_xz = tmp / "wrong.sqlite.xz"
    gz_named_xz.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 64)
    rep = tmp / "fake.nsys-rep"
    rep.write_bytes(b"not a report" * 10)
    packed_cut = tmp / "cut.sqlite.cols.xz"
    packed_cut.write_bytes(lzma.compress(lzma.decompress(PACKED.read_bytes())[:3000]))
    return {
        "missing": (tmp / "nope.sqlite", "no such file"),
        "a folder": (tmp, "not a regular file"),
        "empty": (empty, "empty"),
        "text": (text, "not a database"),
        "no nsys tables": (other, "StringIds"),
        "truncated sqlite": (_truncated(tmp, plain, 20_000, "cut.sqlite"), "truncated"),
        "truncated xz": (_truncated(tmp, XZ, 5000, "cut.sqlite.xz"), "truncated"),
        "bit-flipped xz": (_flipped(tmp, XZ, 0.5, "flip.sqlite.xz"), "corrupt or not xz"),
        "bit-flipped header": (_flipped(tmp, plain, 0.000001, "flip.sqlite"), "not a database"),
        "wrong kind": (gz_named_xz, "not xz"),
        "damaged packed": (packed_cut, "not a readable packed export"),
        "report, nsys missing": (rep, "did not run"),
    }


def test_every_bad_input_is_one_export_error(tmp_path: Path, plain: Path) -> None:
    for name, (path, word) in _bad_inputs(tmp_path, plain).items():
        with pytest.raises(ExportError) as got, open_export(path, nsys="/nonexistent/nsys"):
            pass
        exc = got.value
        assert exc.path == path, name
        assert str(exc) == f"{path}: {exc.problem}", name
        assert "\n" not in str(exc) and word in exc.problem, (name, str(exc))
    assert not list(Path("/tmp").glob("bottleneck-export-*/cut.sqlite"))


def test_a_report_without_nsys_says_so(tmp_path: Path) -> None:
    rep = tmp_path / "fake.nsys-rep"
    rep.write_bytes(b"not a report")
    asked = []

    def none_found() -> None:
        asked.append(True)

    if shutil.which("nsys"):  # the PATH's nsys is the fallback: it refuses the fake report
        with (
            pytest.raises(ExportError, match="nsys export failed"),
            open_export(rep, nsys=none_found),
        ):
            pass
    else:
        with pytest.raises(ExportError, match="needs nsys"), open_export(rep, nsys=none_found):
            pass
    assert asked == [True]


def test_nsys_is_looked_for_only_for_a_report(plain: Path) -> None:
    def boom() -> str:
        raise AssertionError("nsys looked for on a SQLite export")

    with open_export(plain, nsys=boom) as trace:
        assert trace.has("StringIds")


def test_trace_error_is_an_export_error() -> None:
    assert issubclass(TraceError, ExportError)
    exc = TraceError(Path("x.sqlite"), "unreadable SQLite data (malformed)")
    assert str(exc) == "x.sqlite: unreadable SQLite data (malformed)" and exc.path == Path(
        "x.sqlite"
    )
