"""Cut an nsys SQLite export down to a time span, for a small test fixture from a real capture.

    python scripts/trim_export.py SRC.sqlite OUT.sqlite --keep-ms 400 [--from-ms 0] [--xz]

Keeps the rows of every timed table (kernels, copies, memsets, graph replays, CUDA API, sync
records, NVTX, OS runtime) that start within [first activity + from_ms, + keep_ms], and every
other table whole (strings, enums, threads, GPU info, metadata); NVTX ranges that enclose the
span (``measure``) are kept, clipped to it. ``--gpu-only`` empties the host-side tables (CUDA
API, sync records, CUDA events, OS runtime): a fixture for what the GPUs did (e.g. NCCL kernels
across ranks), a fraction of the size. ``--margin-ms`` also keeps the GPU activity (kernels, copies,
memsets) that started up to that long before or after the span: a rank's kernel at an edge can
wait for a peer's that started beyond it. Then VACUUM, and ``--xz`` compresses OUT to OUT.xz.
"""

from __future__ import annotations

import argparse
import lzma
import shutil
import sqlite3
from pathlib import Path

TIMED = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
    "CUDA_GRAPH_EVENTS",
    "OSRT_API",
    "OSRT_CALLCHAINS",
    "NVTX_EVENTS",
)
#: The host-side tables ``--gpu-only`` empties.
HOST_SIDE = (
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
    "OSRT_API",
    "OSRT_CALLCHAINS",
)


def first_activity(db: sqlite3.Connection) -> int:
    """The time ``from_ms`` and ``keep_ms`` count from: the first kernel, CUDA call or NVTX event
    (the first OS-runtime call in a capture of none of those: a CPU script without NVTX)."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    for group in (("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"),
                  ("OSRT_API",)):  # fmt: skip
        starts = [db.execute(f"SELECT MIN(start) FROM {t}").fetchone()[0] for t in group
                  if t in tables]  # fmt: skip
        if any(s is not None for s in starts):
            return min(s for s in starts if s is not None)
    raise SystemExit("no timed rows to cut from")


def _domain_create_id(db: sqlite3.Connection, tables: set[str]) -> int:
    """The NvtxDomainCreate event type's id (75 in the exports of nsys 2022.4 to 2025.3)."""
    if "ENUM_NSYS_EVENT_TYPE" in tables:
        row = db.execute(
            "SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name = 'NvtxDomainCreate'"
        ).fetchone()
        if row is not None:
            return int(row[0])
    return 75


#: GPU activity tables, which ``--margin-ms`` keeps beyond the span.
GPU_ACTIVITY = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
)


def trim(
    src: Path,
    out: Path,
    from_ms: float,
    keep_ms: float,
    gpu_only: bool = False,
    margin_ms: float = 0,
) -> None:
    shutil.copyfile(src, out)
    db = sqlite3.connect(out)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    t0 = first_activity(db)
    lo, hi = t0 + int(from_ms * 1e6), t0 + int((from_ms + keep_ms) * 1e6)
    for t in TIMED:
        if t not in tables:
            continue
        cols = {r[1] for r in db.execute(f'PRAGMA table_info("{t}")')}
        if "start" not in cols:
            continue
        if gpu_only and t in HOST_SIDE:
            db.execute(f"DELETE FROM {t}")
        elif t == "NVTX_EVENTS":  # ranges inside the span, and those enclosing it clipped to it
            # domain creations are kept wherever they lie: they name the domains (nsys's
            # "GIL Trace") of the events kept
            db.execute(
                f'DELETE FROM {t} WHERE NOT ((start >= ? AND COALESCE("end", start) < ?) '
                'OR (start < ? AND "end" >= ?)) AND eventType != ?',
                (lo, hi, lo, hi, _domain_create_id(db, tables)),
            )
            # an enclosing range (`measure`) ends up spanning exactly the whole `step`s kept
            inner = db.execute(
                f'SELECT MIN(n.start), MAX(n."end") FROM {t} AS n JOIN StringIds AS s '
                "ON s.id = n.textId WHERE s.value = 'step' AND n.start >= ? AND n.\"end\" < ?",
                (lo, hi),
            ).fetchone()
            a, b = (inner[0], inner[1]) if inner[0] is not None else (lo, hi)
            db.execute(
                f'UPDATE {t} SET start = MAX(start, ?), "end" = MIN("end", ?) '
                'WHERE start < ? AND "end" >= ?',
                (a, b, lo, hi),
            )
        elif t == "OSRT_CALLCHAINS":
            db.execute(f"DELETE FROM {t}")
        else:
            margin = int(margin_ms * 1e6) if t in GPU_ACTIVITY else 0
            db.execute(f"DELETE FROM {t} WHERE start < ? OR start >= ?", (lo - margin, hi + margin))
    db.commit()
    db.execute("VACUUM")
    db.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--from-ms", type=float, default=0.0)
    ap.add_argument("--keep-ms", type=float, required=True)
    ap.add_argument("--xz", action="store_true")
    ap.add_argument("--gpu-only", action="store_true", help="empty the host-side tables")
    ap.add_argument(
        "--margin-ms", type=float, default=0.0, help="GPU activity kept beyond the span"
    )
    a = ap.parse_args()
    trim(a.src, a.out, a.from_ms, a.keep_ms, a.gpu_only, a.margin_ms)
    if a.xz:
        with (
            a.out.open("rb") as fh,
            lzma.open(f"{a.out}.xz", "wb", preset=9 | lzma.PRESET_EXTREME) as xz,
        ):
            shutil.copyfileobj(fh, xz)
        a.out.unlink()
    print(f"{a.out}{'.xz' if a.xz else ''} written")


if __name__ == "__main__":
    main()
