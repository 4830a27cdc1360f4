"""analysis.trace on small synthetic nsys-shaped databases written with sqlite3: they pin the
schema-difference paths (enums without ``label``, shuffled enum ids, missing optional columns,
both metadata tables, the legacy and the 2025 layouts) with exact values, and need nothing
installed. The readers on real exports: test_tables.py; unreadable files:
test_trace_unreadable.py."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import trace as T
from tests.test_tables import TABLE_FUNCS, _assert_schema

# --- synthetic exports: schema differences, exact values ---------------------------------------


def _enum_rows(names: list[tuple[int, str, str]], with_label: bool) -> list[tuple[object, ...]]:
    return [(i, n, lab) if with_label else (i, n) for i, n, lab in names]


def _synthetic(path: Path, *, legacy: bool, measure: bool = True) -> Path:
    """A tiny nsys-shaped export. legacy=True mimics older layouts: EXPORT_META_DATA, enums with
    only (id, name), no graphNodeId / memKind columns. Enum ids are deliberately not nsys' own, so
    a query that hard-codes ids gets the wrong answer."""
    db = sqlite3.connect(path)
    label = not legacy
    pid, tid = 4242, 4243
    gpid = (1 << 56) | (pid << 24)
    main, worker = gpid | pid, gpid | tid
    enum_cols = "id INTEGER PRIMARY KEY, name TEXT" + (", label TEXT" if label else "")

    def enum(table: str, rows: list[tuple[int, str, str]]) -> None:
        db.execute(f"CREATE TABLE {table} ({enum_cols})")
        vals = _enum_rows(rows, label)
        db.executemany(f"INSERT INTO {table} VALUES ({','.join('?' * len(vals[0]))})", vals)

    db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    strings = {
        1: "measure", 2: "step", 3: "forward", 4: "python", 5: "loader",
        6: "cudaLaunchKernel_v7000", 7: "cudaStreamSynchronize_v3020", 8: "cuGetProcAddress_v2",
        9: "void kern<int>(int)", 10: "kern", 11: "read", 12: "cudaMemcpyAsync_v3020",
    }  # fmt: skip
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", strings.items())
    meta = "EXPORT_META_DATA" if legacy else "META_DATA_EXPORT"
    db.execute(f"CREATE TABLE {meta} (name TEXT NOT NULL, value TEXT)")
    version = "2022.4.2.1" if legacy else "2025.3.2.0"
    db.execute(f"INSERT INTO {meta} VALUES ('EXPORT_PRODUCT_VERSION', ?)", (version,))

    enum("ENUM_NSYS_EVENT_TYPE", [
        (34, "NvtxMark", "NvtxMark"), (159, "NvtxPushPopRange", "NvtxPushPopRange"),
        (160, "NvtxStartEndRange", "NvtxStartEndRange"), (75, "NvtxDomainCreate", "NvtxDomainCreate"),
    ])  # fmt: skip
    enum("ENUM_NSYS_EVENT_CLASS", [
        (0, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA runtime"),
        (1, "TRACE_PROCESS_EVENT_CUDA_DRIVER", "CUDA driver"),
    ])  # fmt: skip
    enum("ENUM_CUDA_MEMCPY_OPER", [
        (7, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"), (3, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"),
        (1, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"),
    ])  # fmt: skip
    enum("ENUM_CUDA_MEM_KIND", [
        (5, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"),
        (0, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"),
    ])  # fmt: skip
    enum("ENUM_CUPTI_SYNC_TYPE", [
        (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
        (1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"),
    ])  # fmt: skip

    db.execute(
        "CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER)"
    )
    db.executemany("INSERT INTO ThreadNames VALUES (?, 20, ?)", [(4, main), (5, worker)])
    db.execute("CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT)")
    db.execute("INSERT INTO PROCESSES VALUES (?, ?, 'python3')", (gpid, pid))

    db.execute(
        "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,"
        " rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,"
        " endGlobalTid INTEGER, textId INTEGER, domainId INTEGER)"
    )
    nvtx_rows = [  # start, end, type, text, tid, textId, domainId
        (200, 300, 159, None, main, 2, 0),  # step 0
        (300, 450, 159, None, main, 2, 0),  # step 1
        (210, 260, 159, "forward", main, None, 0),
        (220, 230, 159, None, worker, 3, 7),  # forward in domain "io"
        (500, 600, 160, "async", main, None, 0),
        (470, None, 34, "mark", main, None, 0),
        (10, None, 75, "io", worker, None, 7),
    ]
    if measure:
        nvtx_rows.append((100, 480, 159, None, main, 1, 0))
    db.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        nvtx_rows,
    )

    graph = "" if legacy else ", graphNodeId INTEGER"
    db.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,"
        " deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,"
        " correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,"
        " shortName INTEGER NOT NULL, registersPerThread INTEGER, gridX INTEGER, gridY INTEGER,"
        " gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER,"
        f" staticSharedMemory INTEGER, dynamicSharedMemory INTEGER{graph})"
    )
    kcols = "start, end, deviceId, contextId, streamId, correlationId, globalPid, demangledName,"
    kcols += " shortName, gridX, gridY, gridZ, blockX, blockY, blockZ"
    db.execute(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({kcols}) VALUES"
        f" (215, 250, 0, 1, 7, 11, {gpid}, 9, 10, 4, 2, 1, 128, 1, 1)"
    )
    db.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,"
        " deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,"
        " correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL,"
        f" copyKind INTEGER NOT NULL, srcKind INTEGER, dstKind INTEGER{graph})"
    )
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId,"
        " correlationId, globalPid, bytes, copyKind, srcKind, dstKind)"
        f" VALUES (?, ?, 0, 1, 7, ?, {gpid}, ?, ?, ?, ?)",
        [
            (201, 211, 21, 1000, 7, 5, 2),  # pageable HtoD, 100 B/ns
            (212, 214, 22, 1000, 7, 0, 2),  # pinned HtoD
            (260, 270, 23, 500, 3, 2, 5),  # DtoH into pageable
            (271, 271, 24, 8, 1, 2, 2),  # DtoD, zero duration
        ],
    )
    memkind = "" if legacy else ", memKind INTEGER"
    db.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,"
        " deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,"
        f" correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL{memkind})"
    )
    db.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, streamId,"
        f" correlationId, globalPid, value, bytes) VALUES (280, 281, 0, 1, 7, 31, {gpid}, 0, 64)"
    )
    if not legacy:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMSET SET memKind = 2")
    db.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,"
        " eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER,"
        " nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER)"
    )
    db.executemany(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, {main}, ?, ?, 0, NULL)",
        [
            (205, 209, 0, 11, 6),
            (190, 200, 0, 21, 12),
            (190, 200, 0, 22, 12),
            (255, 290, 0, 41, 7),
            (50, 60, 1, 51, 8),
        ],
    )
    db.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER NOT NULL,"
        " end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,"
        " streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,"
        " syncType INTEGER NOT NULL, eventId INTEGER NOT NULL)"
    )
    db.executemany(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (?, ?, 0, 1, ?, ?, {gpid}, ?, ?)",
        [(256, 289, 7, 41, 3, 4294967295), (291, 292, 4294967295, 42, 1, 9)],
    )
    db.execute(
        "CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER NOT NULL,"
        " eventClass INTEGER NOT NULL, globalTid INTEGER, nameId INTEGER NOT NULL,"
        " returnValue INTEGER NOT NULL, nestingLevel INTEGER, callchainId INTEGER NOT NULL)"
    )
    db.execute(f"INSERT INTO OSRT_API VALUES (20, 700, 27, {worker}, 11, 4096, 0, 0)")
    db.commit()
    db.close()
    return path


@pytest.fixture(params=[False, True], ids=["layout2025", "legacy"])
def synthetic(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[T.Trace, bool]]:
    legacy = request.param
    with T.open_trace(_synthetic(tmp_path / "syn.sqlite", legacy=legacy)) as tr:
        yield tr, legacy


def test_synthetic_version_and_schemas(synthetic: tuple[T.Trace, bool]) -> None:
    tr, legacy = synthetic
    assert T.nsys_version(tr) == ("2022.4.2.1" if legacy else "2025.3.2.0")
    for what, (func, schema) in TABLE_FUNCS.items():
        _assert_schema(func(tr), schema, what)
    assert T.gpu_info(tr).empty  # no TARGET_INFO_GPU table


def test_synthetic_memcpy_reads_enum_tables(synthetic: tuple[T.Trace, bool]) -> None:
    tr, legacy = synthetic
    m = T.memcpy(tr)
    assert m["copy_kind"].tolist() == [
        "CUDA_MEMCPY_KIND_HTOD",
        "CUDA_MEMCPY_KIND_HTOD",
        "CUDA_MEMCPY_KIND_DTOH",
        "CUDA_MEMCPY_KIND_DTOD",
    ]
    assert m["direction"].tolist() == ["HtoD", "HtoD", "DtoH", "DtoD"]
    assert m["pageable"].tolist() == [True, False, True, False]
    if legacy:  # no label column: the symbol stands in
        assert m["src_kind"].tolist()[:2] == [
            "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE",
            "CUDA_MEMOPR_MEMORY_KIND_PINNED",
        ]
    else:
        assert m["src_kind"].tolist() == ["Pageable", "Pinned", "Device", "Device"]
        assert m["dst_kind"].tolist() == ["Device", "Device", "Pageable", "Device"]
    assert m["gbps"].iloc[0] == 100.0
    assert pd.isna(m["gbps"].iloc[3])  # zero duration
    assert m["pid"].tolist() == [4242] * 4
    assert m["graph_node_id"].isna().all()


def test_synthetic_kernels_memset_sync(synthetic: tuple[T.Trace, bool]) -> None:
    tr, legacy = synthetic
    k = T.kernels(tr)
    assert k[["name", "short_name", "grid_x", "block_x", "duration_ns", "pid"]].iloc[
        0
    ].tolist() == [
        "void kern<int>(int)",
        "kern",
        4,
        128,
        35,
        4242,
    ]
    ms = T.memset(tr)
    assert ms["bytes"].tolist() == [64]
    if legacy:  # no memKind column
        assert ms["mem_kind"].isna().all()
    else:
        assert ms["mem_kind"].tolist() == ["Device"]
    s = T.sync_events(tr)
    assert s["stream_id"].tolist() == [7, pd.NA]  # 0xFFFFFFFF: no stream
    assert s["event_id"].tolist() == [pd.NA, 9]
    if legacy:  # no label column: the symbol stands in
        assert s["sync_type"].str.endswith("_SYNCHRONIZE").all()
    else:
        assert s["sync_type"].tolist() == ["Stream sync", "Event sync"]


def test_synthetic_cuda_api(synthetic: tuple[T.Trace, bool]) -> None:
    tr, _ = synthetic
    api = T.cuda_api(tr)
    assert api["base_name"].tolist() == [
        "cuGetProcAddress",
        "cudaMemcpyAsync",
        "cudaMemcpyAsync",
        "cudaLaunchKernel",
        "cudaStreamSynchronize",
    ]
    assert api["category"].tolist() == ["other", "memcpy", "memcpy", "launch", "sync"]
    assert api["api"].tolist() == ["driver", "runtime", "runtime", "runtime", "runtime"]
    assert api["tid"].unique().tolist() == [4242]


def test_synthetic_nvtx(synthetic: tuple[T.Trace, bool]) -> None:
    tr, _ = synthetic
    r = T.nvtx_ranges(tr)
    assert r["text"].tolist() == ["measure", "step", "forward", "forward", "step", "async"]
    assert r["range_type"].tolist() == ["push_pop"] * 5 + ["start_end"]
    assert r["depth"].tolist() == [0, 1, 2, 0, 1, pd.NA]
    assert r["domain"].tolist() == [pd.NA, pd.NA, pd.NA, "io", pd.NA, pd.NA]
    assert r["thread_name"].tolist() == ["python", "python", "python", "loader", "python", "python"]
    assert T.window(tr) == (100, 480)
    steps = T.step_ranges(tr)
    assert steps[["step_index", "start_ns", "end_ns"]].values.tolist() == [
        [0, 200, 300],
        [1, 300, 450],
    ]
    th = T.threads(tr)
    assert th[["tid", "thread_name", "process_name"]].values.tolist() == [
        [4242, "python", "python3"],
        [4243, "loader", "python3"],
    ]
    o = T.osrt(tr)
    assert o[["name", "tid", "return_value", "duration_ns"]].values.tolist() == [
        ["read", 4243, 4096, 680]
    ]


def test_window_without_measure_spans_activity(tmp_path: Path) -> None:
    with T.open_trace(_synthetic(tmp_path / "s.sqlite", legacy=False, measure=False)) as tr:
        assert T.window(tr) == (10, 700)  # DomainCreate at 10 .. OSRT read ending at 700


# --- bulk integer columns and enum tables on the synthetic layouts -----------------------------


def test_int_columns_nulls_and_non_integers(synthetic: tuple[T.Trace, bool]) -> None:
    tr, _ = synthetic
    # NVTX marks have no end: NULL comes back as the sentinel, so columns stay aligned
    got = T.int_columns(tr, "NVTX_EVENTS", {"s": "t.start", "e": 't."end"'}, null=-7)
    _, rows = tr.query('SELECT start, COALESCE("end", -7) FROM NVTX_EVENTS ORDER BY rowid')
    np.testing.assert_array_equal(np.column_stack([got["s"], got["e"]]), np.array(rows))
    assert (got["e"] == -7).sum() == 2
    for few in (False, True):
        with pytest.raises(T.TraceError, match="not integers"):
            T.int_columns(tr, "NVTX_EVENTS", {"text": "t.text"}, "t.text IS NOT NULL", few=few)


def test_enum_table_is_public_and_handles_every_layout(synthetic: tuple[T.Trace, bool]) -> None:
    tr, legacy = synthetic
    expr = T.enum_table(tr, "ENUM_CUDA_MEM_KIND")
    _, rows = tr.query(f"SELECT id, name, label FROM {expr} ORDER BY id")
    assert [r[0] for r in rows] == [0, 2, 5]
    labels = {r[1]: r[2] for r in rows}
    assert labels["CUDA_MEMOPR_MEMORY_KIND_PAGEABLE"] == (
        "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE" if legacy else "Pageable"  # no label: name stands in
    )
    _, none = tr.query(f"SELECT id, name, label FROM {T.enum_table(tr, 'ENUM_NOT_THERE')}")
    assert none == []
    assert "enum_table" in T.__all__ and not hasattr(T, "_enum")
