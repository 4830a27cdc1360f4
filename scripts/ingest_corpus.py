"""Bring a wild-corpus capture (scripts/device/capture-corpus.sh) into corpus/wild/.

    python -m scripts.ingest_corpus CALL_OUT [CALL_OUT ...] [--iterations 8] [--dest corpus/wild]
    python -m scripts.ingest_corpus --recut [--iterations 8]    # the committed exports again
    python -m scripts.ingest_corpus --add h100x2 CALL_OUT     # more switches, old rows kept

Each CALL_OUT is one device call's $OUT (corpus-exports.tar, corpus-timing.csv). For every
export: the tables no reader uses (UNREAD, and the ENUM_* tables not in READ_ENUMS), the
columns no reader uses (UNREAD_COLUMNS), in a report with kernels the OS-runtime calls no
detector reads by default (read_calls: every list-valued ``*_calls`` threshold and
analysis.detect.view.WAIT_CALLS; a compiling thread's mmap64/munmap/stat64 rows were 62% of
clean_compile_short's rows, 3.2 MB after xz with them, 0.96 MB without; an override naming
another call finds none in these exports) and the CUDA API calls no detector reads by default
(:func:`_drop_unread_api`: calls of no role shorter than ``window.min_call_ns`` that no GPU
activity or sync record refers to, PyTorch 2.11's cuKernelGetName before every launch the most;
a smaller ``window.min_call_ns`` finds none of them) and then the strings no row refers to are
dropped,
and every timed row after the ``--iterations``-th steady iteration (found by the detectors' own
iteration search, no NVTX needed) is removed with scripts/trim_export.py, so start-up,
compilation and autotuning stay whole; then xz -9e into ``DEST/exports/NAME.sqlite.xz``. The
cut never comes before ``--iterations`` of the script's own steps (its timed `none` step, from
the timing rows) after the first steady iteration: where the search finds a repeat shorter
than a step (one layer of lb_tiny_layers, one all-reduce of ddp_exposed_comm), a count of
repeats would keep less than a step. ``--iterations`` 8 = the detectors' ``window.min_repeats``
(5) + ``skip_iterations`` (1) + 2 of margin. The timing CSVs are joined into ``DEST/timing.csv``
(rows of the scripts captured replace that script's old rows; others are kept) and
``DEST/measured.csv`` is recomputed.
``--recut`` applies the same to the exports already in ``DEST/exports`` (what was cut stays
cut). Prints one line per export: raw and committed size, iterations kept; then the exports'
total against BUDGET_MB.

    python -m scripts.ingest_corpus --prune FILE [FILE ...]  # a test fixture, in place
    python -m scripts.ingest_corpus --prune FILE [FILE ...] --osrt  # a committed export

``--prune`` drops the same tables, columns and strings from other exports (.sqlite or .sqlite.xz,
xz -9e again), without any cut: the real exports under tests/data, which keep every OS-runtime
call (their tests read them all); with ``--osrt`` the unread OS-runtime calls too, as ingesting
does: the committed corpus exports, without cutting them again; with ``--api`` the CUDA API
calls no detector reads by default (:func:`_drop_unread_api`), as ingesting does too.

    python -m scripts.ingest_corpus --prune FILE [FILE ...] --osrt --api  # a committed export
"""

from __future__ import annotations

import argparse
import csv
import io
import lzma
import re
import shutil
import sqlite3
import sys
import tarfile
import tempfile
from pathlib import Path

from analysis import trace as T
from analysis.detect import load_thresholds
from analysis.detect import view as C
from analysis.detect import view as S
from analysis.detect.config import diagnosis_dict
from analysis.detect.view import WAIT_CALLS
from analysis.packed_export import SUFFIX, pack_file
from analysis.trace_db import unxz
from corpus import measure
from scripts.trim_export import first_activity, trim

ROOT = Path(__file__).resolve().parents[1]

#: Steady iterations kept after start-up (module docstring).
ITERATIONS = 8
#: The corpus exports' share of the repository's 12 MiB (README.md; 29 exports, 6.84 MB after the
#: pruning of the unread OS-runtime calls, 5.79 MB after that of the unread CUDA API calls): a
#: larger total is flagged.
BUDGET_MB = 7.0
#: Tables no reader uses (analysis/sql/*.sql, analysis/trace.py, analysis/detect/, harness/):
#: call chains, graph-building events, nsys's own bookkeeping, the
#: profiled machine's environment variables. Every table not named here is kept (kernels,
#: copies, memsets, graph replays, CUDA API, syncs, OS-runtime calls of every thread, NVTX,
#: StringIds, ThreadNames, PROCESSES, the READ_ENUMS, the other TARGET_INFO_*,
#: META_DATA_EXPORT, and whatever a newer nsys adds).
UNREAD = (
    "OSRT_CALLCHAINS",
    "CUDA_CALLCHAINS",
    "CUDA_GRAPH_EVENTS",
    "META_DATA_CAPTURE",
    "PROFILER_OVERHEAD",
    "DIAGNOSTIC_EVENT",
    "ANALYSIS_DETAILS",
    "ANALYSIS_FILE",
    "ProcessStreams",
    "TARGET_INFO_SYSTEM_ENV",
)
#: The ENUM_* tables read (by analysis/sql, analysis/detect and nsys's expert rules, whose 2024+
#: versions read ENUM_CUDA_MEM_KIND): every other ENUM_* table is dropped.
READ_ENUMS = (
    "ENUM_CUDA_MEMCPY_OPER",
    "ENUM_CUDA_MEM_KIND",
    "ENUM_CUPTI_SYNC_TYPE",
    "ENUM_NSYS_EVENT_CLASS",
    "ENUM_NSYS_EVENT_TYPE",
)
#: Columns no reader uses in the tables kept: what analysis/sql/*.sql, analysis/trace.py,
#: analysis/detect/, harness/ and nsys's expert rules (2022.4, and 2024+ which also read
#: greenContextId, srcDeviceId and dstDeviceId) read stays, and so does every column not named
#: here (a newer nsys's too). Kernels lose their launch details that no reader looks at (the
#: grid, block, registers and shared memory the kernel table reads stay), NVTX events their
#: payloads, colours and range ids, OS-runtime calls their event class and call-chain id. The
#: CUDA API calls' callchainId (never filled in these captures) stays: without it the 47
#: exports of the corpus and tests/data took 91 KB more after xz.
UNREAD_COLUMNS: dict[str, tuple[str, ...]] = {
    "OSRT_API": ("eventClass", "callchainId"),
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "mangledName",
        "launchType",
        "cacheConfig",
        "localMemoryPerThread",
        "localMemoryTotal",
        "gridId",
        "sharedMemoryExecuted",
        "sharedMemoryLimitConfig",
    ),
    "NVTX_EVENTS": (
        "rangeId",
        "color",
        "endGlobalTid",
        "uint64Value",
        "int64Value",
        "doubleValue",
        "uint32Value",
        "int32Value",
        "floatValue",
        "jsonTextId",
        "jsonText",
        "binaryData",
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "deprecatedSrcId",
        "srcContextId",
        "dstContextId",
        "migrationCause",
        "virtualAddress",
        "copyCount",
    ),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ("deprecatedSyncType",),
    # an event sync's record (analysis/detect/view/_events.py): joined on eventId and eventSyncId
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT": ("deviceId", "contextId", "greenContextId"),
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": ("graphId",),
}
#: Columns that hold StringIds ids, besides those the export's schema marks ``REFERENCES
#: StringIds(id)``: a string stays while one of these (in any table kept) refers to it.
STRING_ID_COLUMNS = ("nameId", "textId", "jsonTextId", "demangledName", "shortName", "mangledName")
_REFERS_TO_STRINGS = re.compile(r'^\s*"?(\w+)"?\s[^\n]*REFERENCES StringIds\(id\)', re.M)


def cut_ns(path: Path, iterations: int, step_ns: float = 0.0) -> tuple[int | None, int]:
    """(where to cut: the end of the ``iterations``-th steady iteration, and no earlier than
    ``iterations`` steps of ``step_ns`` after the first; None: keep it all, iterations found)."""
    wcfg = load_thresholds().window
    with T.open_trace(path) as tr:
        it = S.gpu_iterations(tr, wcfg) or S.nvtx_iterations(tr, wcfg)
        kernels = S.KERNEL
        _, rows = tr.query(
            f'SELECT MAX("end") FROM {kernels}' if tr.has(kernels) else "SELECT NULL"
        )
    last = rows[0][0] if rows else None
    if it is None or it.n <= iterations:
        return None, 0 if it is None else it.n
    cut = max(int(it.starts[iterations]), int(it.starts[0] + iterations * step_ns))
    return (cut if last is None or cut < last else None), it.n


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]


def _tables(db: sqlite3.Connection) -> dict[str, str]:
    """Name -> CREATE TABLE text of every table."""
    rows = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    return {name: sql or "" for name, sql in rows}


def read_calls() -> tuple[str, ...]:
    """The OS-runtime calls some detector reads by default: every list-valued ``*_calls`` key
    of the diagnosis thresholds (``host.file_calls``, ``gil_contention.wait_calls``,
    ``stage_imbalance.wait_calls``) and ``analysis.detect.view.WAIT_CALLS``."""
    names = set(WAIT_CALLS)
    for section in diagnosis_dict(load_thresholds()).values():
        if isinstance(section, dict):
            for key, value in section.items():
                if key.endswith("_calls") and isinstance(value, list):
                    names.update(str(v) for v in value)
    return tuple(sorted(names))


def _drop_unread_calls(db: sqlite3.Connection) -> None:
    """Delete the OSRT_API rows of calls not in :func:`read_calls` (a compiling thread's
    hundreds of thousands of mmap64/munmap/stat64 rows: 90% of a whole-process capture's
    rows, read by no detector). Only in a report with kernels: in one without, every
    OS-runtime call of a process's main thread is a pipeline rank's idle (stage_imbalance)
    and the span of all activity is the window."""
    tables = _tables(db)
    if not {"OSRT_API", "StringIds", S.KERNEL} <= set(tables):
        return
    if db.execute(f"SELECT 1 FROM {S.KERNEL} LIMIT 1").fetchone() is None:
        return
    names = read_calls()
    marks = ", ".join("?" * len(names))
    kept = f"SELECT id FROM StringIds WHERE value IN ({marks})"
    db.execute(f"DELETE FROM OSRT_API WHERE nameId NOT IN ({kept})", names)


def _drop_unread_api(db: sqlite3.Connection, roles: list[int]) -> None:
    """Delete the CUDA API rows that no detector reads by default and nothing refers to: calls
    of no role (not one of ``roles``, the name ids analysis.detect.view.category_ids gives
    for launch, sync, memcpy, memset and alloc) shorter than the default ``window.min_call_ns``
    (``view.window_calls`` skips them, and no other reader of the API table reads a call of
    no role), whose correlation id no other table holds (a GPU activity or sync record made by
    the call) and which are not the table's first start or last end (``trace.window``'s span).
    PyTorch 2.11's ``cuKernelGetName`` before every launch is most of them. Only in a report
    with kernels (without GPU activity, ``gpu_activity_lost`` reads whether any API row is
    there at all)."""
    tables = _tables(db)
    if not {C.RUNTIME, S.KERNEL} <= set(tables):
        return
    if db.execute(f"SELECT 1 FROM {S.KERNEL} LIMIT 1").fetchone() is None:
        return
    made = [
        f'SELECT correlationId FROM "{t}" WHERE correlationId IS NOT NULL'
        for t in sorted(tables)
        if t != C.RUNTIME and "correlationId" in _columns(db, t)
    ]
    refer = f"AND correlationId NOT IN ({' UNION '.join(made)})" if made else ""
    tiny = load_thresholds().window.min_call_ns
    db.execute(
        f"""DELETE FROM {C.RUNTIME} WHERE "end" - start < ? AND nameId NOT IN ({C.id_list(roles)})
            {refer} AND start > (SELECT MIN(start) FROM {C.RUNTIME})
            AND "end" < (SELECT MAX("end") FROM {C.RUNTIME})""",
        (tiny,),
    )


def _role_ids(path: Path) -> list[int]:
    """Name ids of the CUDA API calls with a role (launch, sync, memcpy, memset, alloc), as the
    detectors tell them (``view.category_ids``)."""
    with T.open_trace(path) as tr:
        return C.category_ids(tr, *C.CATEGORIES[1:])


def drop_unread(path: Path, *, calls: bool = False, api: bool = False) -> None:
    """Drop what no reader uses from an export in place: the UNREAD tables, the ENUM_* tables
    not in READ_ENUMS, the UNREAD_COLUMNS, the CUDA event records no sync waits for, with
    ``calls`` the OS-runtime calls no detector reads by default (:func:`read_calls`), with
    ``api`` the CUDA API calls no detector reads by default (:func:`_drop_unread_api`), then
    the strings no row refers to any more; VACUUM
    (freed pages would stay). Rows (but those calls'), rowids, the columns kept and their
    declarations are as they were; a column SQLite cannot drop (one an index uses) is kept."""
    roles = _role_ids(path) if api else []
    db = sqlite3.connect(path)
    try:
        if calls:
            _drop_unread_calls(db)
        if api:
            _drop_unread_api(db, roles)
        _drop_unawaited_events(db)
        for t in _tables(db):
            if t in UNREAD or (t.startswith("ENUM_") and t not in READ_ENUMS):
                db.execute(f'DROP TABLE "{t}"')
        for t, cols in UNREAD_COLUMNS.items():
            gone = [c for c in cols if c in _columns(db, t)]
            for c in gone:
                try:
                    db.execute(f'ALTER TABLE "{t}" DROP COLUMN "{c}"')
                except sqlite3.OperationalError:
                    pass
            if gone:  # DROP COLUMN leaves 0 and 1 in a byte each (xz did worse): rows anew
                first = _columns(db, t)[0]
                db.execute(f'UPDATE "{t}" SET "{first}" = "{first}"')
        _drop_unused_strings(db)
        db.commit()
        db.execute("VACUUM")
    finally:
        db.close()


def _drop_unawaited_events(db: sqlite3.Connection) -> None:
    """Delete the CUDA event records no sync of the export waits for: the one reader
    (analysis/detect/view/_events.py) looks a record up from a sync, by eventId and eventSyncId."""
    tables = _tables(db)
    ev, sy = "CUPTI_ACTIVITY_KIND_CUDA_EVENT", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    if ev not in tables or "eventSyncId" not in _columns(db, ev):
        return
    if sy not in tables or "eventSyncId" not in _columns(db, sy):
        db.execute(f'DELETE FROM "{ev}"')
        return
    db.execute(
        f"""DELETE FROM "{ev}" WHERE NOT EXISTS (SELECT 1 FROM "{sy}" AS y
            WHERE y.eventSyncId = "{ev}".eventSyncId AND y.eventId = "{ev}".eventId)"""
    )


def _drop_unused_strings(db: sqlite3.Connection) -> None:
    """Delete the StringIds rows that no column holding string ids refers to. The largest id
    stays, so that the readers size their packed columns as before (analysis.trace.name_bits)."""
    tables = _tables(db)
    if "StringIds" not in tables:
        return
    refs = []
    for t, sql in tables.items():
        if t == "StringIds":
            continue
        cols = set(_columns(db, t))
        named = set(_REFERS_TO_STRINGS.findall(sql)) | set(STRING_ID_COLUMNS)
        refs += [f'SELECT "{c}" FROM "{t}" WHERE "{c}" IS NOT NULL' for c in sorted(named & cols)]
    keep = " UNION ".join(["SELECT MAX(id) FROM StringIds", *refs])
    db.execute(f"DELETE FROM StringIds WHERE id NOT IN ({keep})")


def ingest_export(raw: Path, dest: Path, iterations: int, step_ms: float = 0.0) -> str:
    """Trim one decompressed export into ``dest`` (xz); a line for the log."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / raw.name
        shutil.copyfile(raw, work)
        drop_unread(work, calls=True, api=True)
        cut, found = cut_ns(work, iterations, step_ms * 1e6)
        if cut is not None:
            db = sqlite3.connect(work)
            keep_ms = (cut - first_activity(db)) / 1e6
            db.close()
            trim(work, work.with_suffix(".trim"), 0.0, keep_ms)
            work = work.with_suffix(".trim")
            drop_unread(work)  # the strings only the rows cut referred to
        pack_file(work, dest)
    kept = f"{iterations} of {found}" if cut is not None else f"all {found}"
    mb, kb = raw.stat().st_size / 1e6, dest.stat().st_size / 1e3
    return f"{raw.stem}: {mb:.1f} MB -> {kb:.0f} KB packed, iterations kept: {kept}"


def prune_file(path: Path, calls: bool = False, api: bool = False) -> str:
    """:func:`drop_unread` on one export in place (an ``.xz`` one decompressed, then compressed
    again as the corpus is); a line for the log."""
    before = path.stat().st_size
    if path.suffix == ".xz":
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp) / path.stem
            work.write_bytes(lzma.decompress(path.read_bytes()))
            drop_unread(work, calls=calls, api=api)
            path.write_bytes(_xz(work.read_bytes()))
    else:
        drop_unread(path, calls=calls, api=api)
    return f"{path}: {before / 1e3:.0f} KB -> {path.stat().st_size / 1e3:.0f} KB"


def _xz(data: bytes) -> bytes:
    return lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)


def merge_timing(calls: list[Path], old: Path, add: str | None = None) -> list[dict]:
    """Rows of the calls' corpus-timing.csv, plus ``old``'s rows of scripts they lack. With
    ``add`` (a tag), ``old`` is kept whole and the calls' rows are added with their rounds
    named ``<add>-<round>``: a call that timed more switches (REMOVALS_ONLY=1) beside its own
    ``none``; corpus/measure.py compares each switch with ``none`` of its own rounds."""
    new: list[dict] = []
    for call in calls:
        with (call / "corpus-timing.csv").open(newline="") as fh:
            new += list(csv.DictReader(fh))
    if add:
        new = [{**r, "repeat": f"{add}-{r['repeat']}"} for r in new]
    captured = set() if add else {r["script"] for r in new}
    kept = []
    if old.exists():
        with old.open(newline="") as fh:
            kept = [r for r in csv.DictReader(fh) if r["script"] not in captured]
            if add:  # the same call added twice replaces its own rows
                kept = [r for r in kept if not r["repeat"].startswith(f"{add}-")]
    return kept + new


def none_step_ms(rows: list[dict]) -> dict[str, float]:
    """Each script's mean timed step of `none` (runs that exited 0)."""
    got: dict[str, list[float]] = {}
    for r in rows:
        if r["fix"] == "none" and r["rc"] == "0" and r["step_ms"]:
            got.setdefault(r["script"], []).append(float(r["step_ms"]))
    return {k: sum(v) / len(v) for k, v in got.items()}


def _committed(dest: Path) -> list[Path]:
    """The corpus's exports: packed (``.sqlite.cols.xz``) or, from before, ``.sqlite.xz``."""
    return sorted([*(dest / "exports").glob(f"*{SUFFIX}"), *(dest / "exports").glob("*.sqlite.xz")])


def repack(dest: Path) -> list[str]:
    """Every committed ``.sqlite.xz`` export packed (lossless, nothing cut again); a line each."""
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted((dest / "exports").glob("*.sqlite.xz")):
            raw = unxz(path, Path(tmp))
            out = pack_file(raw, path.parent / f"{raw.stem}{SUFFIX}")
            lines.append(f"{raw.stem}: {path.stat().st_size / 1e3:.0f} KB xz -> "
                         f"{out.stat().st_size / 1e3:.0f} KB packed")  # fmt: skip
            path.unlink()
            raw.unlink()
    return lines


def _exports(calls: list[Path], dest: Path, recut: bool, tmp: Path):
    """(name, decompressed export) of every export to ingest: the calls' tars, or with
    ``recut`` the committed ones."""
    if recut:
        for path in _committed(dest):
            raw = unxz(path, tmp)
            yield raw.stem, raw
            raw.unlink()
    for call in calls:
        tar_path = call / "corpus-exports.tar"
        if not tar_path.exists():
            continue
        with tarfile.open(tar_path) as tar:
            for member in tar.getmembers():
                name = Path(member.name).name.removesuffix(".sqlite.xz")
                raw = tmp / f"{name}.sqlite"
                with tar.extractfile(member) as fh:  # type: ignore[union-attr]
                    raw.write_bytes(lzma.decompress(fh.read()))
                yield name, raw
                raw.unlink()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("calls", nargs="*", type=Path, help="device calls' $OUT folders")
    p.add_argument("--iterations", type=int, default=ITERATIONS)
    p.add_argument("--dest", type=Path, default=ROOT / "corpus" / "wild")
    p.add_argument("--recut", action="store_true", help="cut the committed exports again")
    p.add_argument("--repack", action="store_true",
                   help="pack the committed .sqlite.xz exports (analysis.packed_export), "
                   "nothing cut again")  # fmt: skip
    p.add_argument(
        "--add",
        metavar="TAG",
        help="keep every committed timing row; add the calls' rows as "
        "rounds TAG-1, TAG-2 (a REMOVALS_ONLY=1 call)",
    )
    p.add_argument(
        "--prune",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="only drop the unread tables, columns and strings of these exports, in place",
    )
    p.add_argument(
        "--osrt",
        action="store_true",
        help="with --prune: also the OS-runtime calls no detector reads (as ingesting does)",
    )
    p.add_argument(
        "--api",
        action="store_true",
        help="with --prune: also the short CUDA API calls of no role that nothing refers to "
        "(as ingesting does)",
    )
    args = p.parse_args(argv)
    if args.prune:
        for path in args.prune:
            print(prune_file(path, args.osrt, args.api), flush=True)
        return 0
    if args.repack:
        for line in repack(args.dest):
            print(line, flush=True)
        return 0
    if not args.calls and not args.recut:
        p.error("name the calls' $OUT folders, or --recut (or --prune FILE)")
    (args.dest / "exports").mkdir(parents=True, exist_ok=True)
    rows = merge_timing(args.calls, args.dest / "timing.csv", args.add)
    steps = none_step_ms(rows)
    with tempfile.TemporaryDirectory() as tmp:
        for name, raw in _exports(args.calls, args.dest, args.recut, Path(tmp)):
            dest = args.dest / "exports" / f"{name}{SUFFIX}"
            print(ingest_export(raw, dest, args.iterations, steps.get(name, 0.0)), flush=True)
            (args.dest / "exports" / f"{name}.sqlite.xz").unlink(missing_ok=True)
    sizes = [p.stat().st_size for p in _committed(args.dest)]
    over = " OVER BUDGET" if sum(sizes) > BUDGET_MB * 1e6 else ""
    print(f"exports: {len(sizes)}, {sum(sizes) / 1e6:.2f} MB (budget {BUDGET_MB} MB){over}")
    if not args.calls:
        return 0
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=measure.TIMING_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    (args.dest / "timing.csv").write_text(buf.getvalue())
    measured = measure.summarize(str(args.dest / "timing.csv"), str(args.dest / "labels.csv"))
    measure.write_csv(measured, str(args.dest / "measured.csv"))
    print(f"timing.csv: {len(rows)} runs; measured.csv: {len(measured)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
