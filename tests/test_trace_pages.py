"""The page reader (:mod:`analysis.trace_pages`, :mod:`analysis.trace_expr`) gives what SQLite
gives: int_columns with page reads on and off, on random tables built to reach every branch
(every integer width, NULLs, the constants 0 and 1, texts between the columns, deep b-trees,
an INTEGER PRIMARY KEY) and on the files it must refuse (WAL, overflow pages, a column added
later, REALs, arithmetic past int64), where SQLite's own answer or error must come back."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from analysis import trace as T
from analysis import trace_ints
from analysis.detect import diagnose
from analysis.packed_export import SUFFIX
from analysis.trace_expr import NotHere, parse
from analysis.trace_pages import Pages, Unreadable
from tests._fixtures import sqlite_fixture

#: Values of every serial type's width: 1, 2, 3, 4, 6 and 8 bytes, both signs, and 0 and 1.
_EDGES = [0, 1, -1, 2, 127, -128, 255, 32767, -32768, 2**23 - 1, -(2**23), 2**31 - 1, -(2**31),
          2**47 - 1, -(2**47), 2**63 - 1, -(2**63)]  # fmt: skip


def _value(rng: random.Random, null_share: float) -> int | None:
    if rng.random() < null_share:
        return None
    if rng.random() < 0.3:
        return rng.choice(_EDGES)
    return rng.randint(-(2 ** rng.randint(1, 62)), 2 ** rng.randint(1, 62))


def _table(path: Path, rows: int, *, seed: int, page_size: int = 1024, key: bool = False,
           null_share: float = 0.1) -> Path:  # fmt: skip
    """An nsys-like export (StringIds) with table ``T(a, b, s TEXT, c, d)`` of random rows;
    ``key``: ``k INTEGER PRIMARY KEY`` first, with gaps and negative keys."""
    rng = random.Random(seed)
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA page_size = {page_size}")
        db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
        db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, f"s{i}") for i in range(7)])
        head = "k INTEGER PRIMARY KEY, " if key else ""
        db.execute(f"CREATE TABLE T ({head}a INTEGER, b INTEGER, s TEXT, c INTEGER, d INTEGER)")
        out = []
        for i in range(rows):
            vals = [_value(rng, null_share), rng.randint(0, 1000), "x" * rng.randint(0, 50),
                    rng.choice([0, 1, None, 3, 1000]), _value(rng, null_share)]  # fmt: skip
            if key:
                vals.insert(0, 97 * i + rng.randint(0, 90) - 5000)
            out.append(vals)
        db.executemany(f"INSERT INTO T VALUES ({', '.join('?' * len(out[0]))})", out)
    return path


def _both(path: Path, monkeypatch: pytest.MonkeyPatch, *args, **kwargs) -> tuple[object, object]:
    """int_columns' outcome (arrays, or the exception's type) with page reads off and on, and
    whether the page read answered."""
    answered = []
    real = trace_ints._paged

    def spy(*a, **k):
        out = real(*a, **k)
        answered.append(out is not None)
        return out

    monkeypatch.setattr(trace_ints, "_paged", spy)
    outcomes = []
    for on in (False, True):
        monkeypatch.setattr(trace_ints, "PAGE_READS", on)
        with T.open_trace(path) as tr:
            try:
                outcomes.append(T.int_columns(tr, *args, **kwargs))
            except T.TraceError:
                outcomes.append(T.TraceError)
    return outcomes, any(answered)


def _same(a: object, b: object) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    return a == b


_READS = [
    ({"a": "t.a", "b": "t.b", "d": "t.d"}, "1", None, ()),
    ({"b": "t.b", "c": "t.c"}, "t.b >= :lo AND t.b < :hi", {"lo": 100, "hi": 700}, ()),
    ({"id": "t.rowid", "c": "t.c"}, "t.c IN (0, 3, 1000) OR t.a IS NULL", None, ()),
    ({"hi": "t.b", "lo": "COALESCE(t.c, 0)"}, "NOT t.b = 5", None, (("hi", "lo", 10),)),
    ({"hi": "t.b", "lo": "t.c"}, "1", None, (("hi", "lo", 10),)),  # NULL as -1: SQLite packs
    ({"x": "CASE WHEN t.c IS NULL THEN -7 WHEN t.c > 1 THEN t.b ELSE t.c END"}, "1", None, ()),
    ({"x": "t.b - t.c * 2", "y": "t.b IN (SELECT id FROM StringIds)"}, "t.c IS NOT NULL", None, ()),
    (
        {"x": "t.a + t.d"},
        "t.a > 0 AND t.d > 0",
        None,
        (),
    ),  # past int64 in places: refused both ways
    ({"x": "t.b << 3 | t.c & 1"}, "COALESCE(t.c, 0) != 1", None, ()),
    ({"id": "t.rowid"}, "t.rowid % 2 = 0", None, ()),  # % is not taken: SQLite reads it
    ({"id": "t.rowid"}, "1", None, ()),
]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("page_size", [512, 4096])
def test_random_tables_read_as_sqlite_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, page_size: int
) -> None:
    path = _table(tmp_path / "t.sqlite", 6000, seed=seed, page_size=page_size)
    answered = 0
    for cols, where, params, pack in _READS:
        (off, on), paged = _both(path, monkeypatch, "T", cols, where, params, pack=pack)
        assert _same(off, on), (cols, where)
        answered += paged
    assert answered == len(_READS) - 3  # all but the overflowing sum, % and the -1 packed


def test_integer_primary_key_is_the_rowid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _table(tmp_path / "k.sqlite", 3000, seed=3, key=True)
    cols = {"k": "t.k", "id": "t.rowid", "a": "t.a"}
    (off, on), paged = _both(path, monkeypatch, "T", cols, "t.k > -2000")
    assert paged and _same(off, on)
    assert off["k"].min() > -2000 and np.array_equal(off["k"], off["id"])


def _refused(path: Path, monkeypatch: pytest.MonkeyPatch, cols: dict, where: str = "1") -> object:
    (off, on), paged = _both(path, monkeypatch, "T", cols, where)
    assert not paged and _same(off, on)
    return off


def test_wal_file_is_read_by_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _table(tmp_path / "w.sqlite", 500, seed=4)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode = WAL")
    with pytest.raises(Unreadable, match="WAL"):
        Pages(path)
    assert _refused(path, monkeypatch, {"b": "t.b"})["b"].size == 500


def test_overflow_pages_and_added_columns_are_read_by_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _table(tmp_path / "o.sqlite", 400, seed=5, page_size=512)
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO T VALUES (1, 2, ?, 3, 4)", ("y" * 2000,))  # spills over
    assert _refused(path, monkeypatch, {"b": "t.b"})["b"].size == 401
    path = tmp_path / "wide.sqlite"  # one-byte serial types, a payload past the page all the same
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA page_size = 512")
        db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
        db.execute(f"CREATE TABLE T ({', '.join(f'c{i} INTEGER' for i in range(70))})")
        db.executemany(f"INSERT INTO T VALUES ({', '.join('?' * 70)})",
                       [[2**60 + r + i for i in range(70)] for r in range(50)])  # fmt: skip
    assert _refused(path, monkeypatch, {"x": "t.c69"})["x"][0] == 2**60 + 69
    path = _table(tmp_path / "alter.sqlite", 400, seed=6)
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE T ADD COLUMN e INTEGER DEFAULT 9")  # old records stay short
    assert set(_refused(path, monkeypatch, {"e": "t.e"})["e"]) == {9}


def test_values_that_are_not_integers_raise_as_sqlite_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _table(tmp_path / "r.sqlite", 300, seed=7, null_share=0)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE T SET b = 2.5 WHERE rowid = 200")
    assert _refused(path, monkeypatch, {"b": "t.b"}) is T.TraceError
    big = {"x": "t.b * 9223372036854775807"}  # an integer product past int64: a REAL in SQLite
    assert _refused(path, monkeypatch, big, "t.rowid != 200") is T.TraceError


def test_words_past_the_last_byte_read_as_zero(tmp_path: Path) -> None:
    path = _table(tmp_path / "e.sqlite", 10, seed=8)
    pages, raw = Pages(path), path.read_bytes()
    at = np.arange(len(raw) - 12, len(raw), dtype=np.int64)
    want = [int.from_bytes(raw[a : a + 8].ljust(8, b"\0"), "big", signed=True) for a in at]
    assert pages.words(at).tolist() == want


def _random_expr(rng: random.Random, depth: int) -> str:
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(["t.a", "t.b", "t.c", "NULL", str(rng.randint(0, 2**40)),
                           str(rng.choice(_EDGES)).replace("-", "- "), ":p"])  # fmt: skip
    x, y = _random_expr(rng, depth - 1), _random_expr(rng, depth - 1)
    form = rng.choice([
        "({x} {op} {y})", "({x} {cmp} {y})", "({x} IS NULL)", "({x} IS NOT NULL)",
        "(NOT {x})", "({x} AND {y})", "({x} OR {y})", "({x} IN (1, 3, NULL))",
        "({x} NOT IN (0, 1, 2, 3, 4, 5))", "({x} IN (SELECT id FROM StringIds))",
        "CASE WHEN {x} THEN {y} ELSE {x} END", "CASE {x} WHEN 1 THEN {y} WHEN 0 THEN 7 END",
        "COALESCE({x}, {y}, 5)", "(- {x})", "({x} {shift} 3)",
    ])  # fmt: skip
    return form.format(
        x=x, y=y, op=rng.choice("+-*&|"), cmp=rng.choice(["<", "<=", ">", ">=", "=", "!="]),
        shift=rng.choice(["<<", ">>"]),
    )  # fmt: skip


def test_expressions_evaluate_as_sqlite_evaluates_them(tmp_path: Path) -> None:
    """Random expressions over a table's columns: where the evaluator answers, it gives
    SQLite's values and NULLs row for row; where SQLite gives a REAL it must not answer."""
    path = _table(tmp_path / "x.sqlite", 300, seed=9, null_share=0.2)
    rng = random.Random(10)
    db = sqlite3.connect(path)
    rows = db.execute("SELECT rowid, a, b, c FROM T ORDER BY rowid").fetchall()
    cols = {}
    for i, name in enumerate(["rowid", "a", "b", "c"]):
        vals = [r[i] for r in rows]
        null = np.array([v is None for v in vals])
        cols[name] = (np.array([v or 0 for v in vals], np.int64), null if null.any() else None)
    lists = {"SELECT id FROM StringIds": np.arange(7)}
    answered = 0
    for k in range(300):
        sql = _random_expr(rng, rng.randint(1, 4))
        p = {"p": rng.choice([None, 3, -(2**40)])}
        want = [r[0] for r in db.execute(f"SELECT {sql} FROM T AS t ORDER BY t.rowid", p)]
        try:
            got, null = parse(sql).eval(cols, p, lists)
        except NotHere:
            continue
        answered += 1
        assert not any(isinstance(w, float) for w in want), sql
        mine = [None if null is not None and null[i] else int(v) for i, v in enumerate(got)]
        assert mine == want, (k, sql)
    assert answered >= 150  # most random expressions are in the subset


_ROOT = Path(__file__).resolve().parents[1]
#: Every committed export: the suite's own (nsys 2022.4 and 2025.3) and the wild corpus's.
_EXPORTS = sorted(
    p for d in (_ROOT / "tests" / "data", _ROOT / "corpus" / "wild" / "exports")
    for p in d.rglob(f"*{SUFFIX}")
)  # fmt: skip


@pytest.mark.parametrize("xz", _EXPORTS, ids=lambda p: str(p.relative_to(_ROOT)))
def test_every_read_of_a_diagnosis_is_sqlites(xz: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each int_columns call a diagnosis makes on a real export gives, with page reads, what
    it gives without them; on the exports with GPU tables the kernel read takes the pages."""
    path = sqlite_fixture(xz.name.removesuffix(SUFFIX), xz.parent)
    calls, paged = [], []
    real_read, real_paged = T.int_columns, trace_ints._paged

    def read(tr, table, *a, **k):
        out = real_read(tr, table, *a, **k)
        calls.append((table, a, k, {n: v.copy() for n, v in out.items()}))  # callers write
        return out

    def spy(tr, table, *a, **k):
        out = real_paged(tr, table, *a, **k)
        paged.append(table) if out is not None else None
        return out

    monkeypatch.setattr(T, "int_columns", read)
    monkeypatch.setattr(trace_ints, "_paged", spy)
    monkeypatch.setattr(trace_ints, "PAGE_READS", True)
    with T.open_trace(path) as tr:
        diagnose(tr)
        kernels = tr.has("CUPTI_ACTIVITY_KIND_KERNEL")
        assert calls or not kernels, "the diagnosis read no integer columns"
        monkeypatch.setattr(trace_ints, "PAGE_READS", False)
        for table, a, k, out in calls:
            assert _same(out, real_read(tr, table, *a, **k)), (table, a)
        if kernels:
            assert "CUPTI_ACTIVITY_KIND_KERNEL" in paged


def test_heap_settings_are_checked_and_taken() -> None:
    """glibc takes each setting (mallopt answers 1); a threshold glibc would refuse is refused
    here first, with the field named."""
    from analysis import heap

    assert heap.tune(heap.HeapSettings()) == {"malloc": True, "hugepages": False}
    assert heap.tune(heap.HeapSettings(hugepages=True))["hugepages"]
    with pytest.raises(ValueError, match="mmap_threshold_bytes"):
        heap.HeapSettings(mmap_threshold_bytes=64 << 20)
    with pytest.raises(ValueError, match="trim_threshold_bytes"):
        heap.HeapSettings(trim_threshold_bytes=2**31)
