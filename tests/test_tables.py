"""Tests for analysis.trace: typed tables over nsys SQLite exports.

Three sources of exports:
- the harness' committed exports in tests/data, xz-compressed there and read from the cache of
  tests/_fixtures.py (skipped per file until they land; the directory can be pointed elsewhere
  with ANALYSIS_TEST_DATA, holding plain or xz-compressed exports),
- a CPU export generated here with the local nsys (marker ``nsys``; skipped without nsys),
- small synthetic databases written with sqlite3, which pin the schema-difference paths
  (enums without ``label``, shuffled enum ids, missing optional columns, both metadata tables)
  and the error handling, and need nothing installed.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import trace as T
from analysis import trace_ints
from tests._fixtures import sqlite_fixture

DATA_DIR = Path(os.environ.get("ANALYSIS_TEST_DATA", Path(__file__).parent / "data"))

#: The exports the harness commits (with <stem>.result.json beside each).
EXPECTED_EXPORTS = ["cpu_nsys2022_sync_loading.sqlite", "gpu_nsys2025_sync_loading.sqlite"]

TABLE_FUNCS = {
    "kernels": (T.kernels, T.KERNELS),
    "memcpy": (T.memcpy, T.MEMCPY),
    "memset": (T.memset, T.MEMSET),
    "cuda_api": (T.cuda_api, T.CUDA_API),
    "sync_events": (T.sync_events, T.SYNC_EVENTS),
    "nvtx_ranges": (T.nvtx_ranges, T.NVTX_RANGES),
    "step_ranges": (T.step_ranges, T.STEP_RANGES),
    "osrt": (T.osrt, T.OSRT),
    "threads": (T.threads, T.THREADS),
    "gpu_info": (T.gpu_info, T.GPU_INFO),
}
CUDA_TABLES = ("kernels", "memcpy", "memset", "cuda_api", "sync_events", "gpu_info")
GENERATED = "generated"


def _export_param(path: Path) -> object:
    return pytest.param(
        path,
        id=path.stem,
        marks=pytest.mark.skipif(not path.exists(), reason=f"{path} not committed yet"),
    )


def _export_path(name: str) -> Path:
    """``DATA_DIR/name`` itself, or where its ``.xz`` is decompressed to if only that is there
    (a path that does not exist when neither is, so the test skips)."""
    plain = DATA_DIR / name
    if plain.exists() or not (DATA_DIR / f"{name}.xz").is_file():
        return plain
    return sqlite_fixture(name.removesuffix(".sqlite"), DATA_DIR)


def _committed(prefix: str = "") -> list[object]:
    names = list(EXPECTED_EXPORTS)
    if DATA_DIR.is_dir():  # any further whole harness export (with its result.json) too
        found = [*DATA_DIR.glob("*.sqlite"), *DATA_DIR.glob("*.sqlite.xz")]
        whole = {p.name.removesuffix(".xz") for p in found}
        whole = {
            n for n in whole if (DATA_DIR / f"{n.removesuffix('.sqlite')}.result.json").exists()
        }
        names += sorted(whole - set(names))
    return [_export_param(_export_path(n)) for n in names if n.startswith(prefix)]


def _expected_steps(path: Path) -> int | None:
    """Steps the harness recorded in the result.json beside an export (or, for one decompressed
    from DATA_DIR into the fixture cache, beside its ``.xz``), if there is one."""
    beside = (path.with_suffix(".result.json"), path.with_name(path.name + ".result.json"))
    for cand in (*beside, DATA_DIR / f"{path.stem}.result.json"):
        if cand.exists():
            result = json.loads(cand.read_text())
            steps = int(result["steps"])
            if "step_ms" in result:
                assert len(result["step_ms"]) == steps, f"{cand}: step_ms and steps disagree"
            return steps
    return None


def _assert_schema(df: pd.DataFrame, schema: dict[str, str], what: str) -> None:
    assert list(df.columns) == list(schema), what
    got = {c: str(t) for c, t in df.dtypes.items()}
    want = {c: str(pd.Series(dtype=t).dtype) for c, t in schema.items()}
    assert got == want, what


# --- the generated CPU export ------------------------------------------------------------------

GEN_SCRIPT = textwrap.dedent(
    """
    import threading, time, nvtx

    def loader():
        nvtx.push_range("data_load")
        for _ in range(3):
            with open(__file__, "rb") as fh:
                fh.read()
            time.sleep(0.005)
        nvtx.pop_range()

    worker = threading.Thread(target=loader, name="loader")
    nvtx.push_range("measure")
    worker.start()
    for _ in range(3):
        nvtx.push_range("step")
        nvtx.push_range("data_load"); time.sleep(0.003); nvtx.pop_range()
        nvtx.push_range("forward"); sum(range(20000)); nvtx.pop_range()
        nvtx.pop_range()
    worker.join()
    nvtx.mark("done")
    nvtx.pop_range()
    """
)


@pytest.fixture(scope="session")
def generated_cpu_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real CPU export (NVTX + OSRT) made with the local nsys: 3 steps inside `measure`."""
    nsys = shutil.which("nsys")
    if nsys is None:
        pytest.skip("nsys not installed")
    d = tmp_path_factory.mktemp("nsys")
    script = d / "workload.py"
    script.write_text(GEN_SCRIPT)
    rep, db = d / "gen.nsys-rep", d / "gen.sqlite"
    profile = [
        nsys, "profile", "--trace=cuda,nvtx,osrt", "--sample=none", "--cpuctxsw=none",
        "-o", str(d / "gen"), "--force-overwrite=true", sys.executable, str(script),
    ]  # fmt: skip
    export = [
        nsys, "export", "--type", "sqlite", "--output", str(db),
        "--force-overwrite", "true", "-q", "true", str(rep),
    ]  # fmt: skip
    for cmd in (profile, export):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=d)
        assert proc.returncode == 0, (
            f"{cmd[:2]} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    (d / "gen.result.json").write_text(json.dumps({"steps": 3, "step_ms": [0.0, 0.0, 0.0]}))
    return db


@pytest.fixture(
    params=[
        *_committed("cpu_"),
        pytest.param(GENERATED, id="generated-cpu", marks=pytest.mark.nsys),
    ]
)
def cpu_export(request: pytest.FixtureRequest) -> Path:
    """Committed CPU exports, plus one generated on the fly where nsys is installed."""
    if request.param == GENERATED:
        return request.getfixturevalue("generated_cpu_export")
    return request.param


@pytest.fixture(params=_committed("gpu_"))
def gpu_export(request: pytest.FixtureRequest) -> Path:
    """Committed GPU exports (nsys 2025.3 on an H100)."""
    return request.param


@pytest.fixture(
    params=[*_committed(), pytest.param(GENERATED, id="generated-cpu", marks=pytest.mark.nsys)]
)
def any_export(request: pytest.FixtureRequest) -> Path:
    """Every export available, for the checks that hold for all of them."""
    if request.param == GENERATED:
        return request.getfixturevalue("generated_cpu_export")
    return request.param


def _nvtx_or_skip(tr: T.Trace) -> pd.DataFrame:
    """NVTX ranges; a generated export without any is an environment problem, so it skips.

    nvtx>=0.2.12 emits ranges that nsys 2022.4 drops ("NVTX binary payload extension is
    incompatible"); committed harness exports must have their ranges, so there it fails.
    """
    ranges = T.nvtx_ranges(tr)
    if ranges.empty and tr.path.name == "gen.sqlite":
        from importlib.metadata import version

        pytest.skip(
            f"nsys {T.nsys_version(tr)} recorded no NVTX ranges from nvtx {version('nvtx')} "
            "(nvtx>=0.2.12 vs nsys 2022.4: 'NVTX binary payload extension is incompatible')"
        )
    assert not ranges.empty, f"{tr.path}: no NVTX ranges recorded"
    return ranges


# --- checks on every export --------------------------------------------------------------------


@pytest.mark.parametrize("what", list(TABLE_FUNCS))
def test_every_table_has_its_schema(any_export: Path, what: str) -> None:
    func, schema = TABLE_FUNCS[what]
    with T.open_trace(any_export) as tr:
        _assert_schema(func(tr), schema, what)


def test_version_matches_file_name(any_export: Path) -> None:
    with T.open_trace(any_export) as tr:
        version = T.nsys_version(tr)
    assert version is not None
    if "nsys2022" in any_export.name:
        assert version.startswith("2022.4")
    elif "nsys2025" in any_export.name:
        assert version.startswith("2025.3")


def test_steps_match_result_json(any_export: Path) -> None:
    with T.open_trace(any_export) as tr:
        _nvtx_or_skip(tr)
        steps = T.step_ranges(tr)
        start, end = T.window(tr)
    assert not steps.empty
    inside = steps[(steps["start_ns"] >= start) & (steps["end_ns"] <= end)]
    expected = _expected_steps(any_export)
    for pid, per_pid in inside.groupby("pid"):
        if expected is not None:
            assert len(per_pid) == expected, f"pid {pid}"
    for _, per_pid in steps.groupby("pid"):
        assert per_pid["step_index"].tolist() == list(range(len(per_pid)))
        assert per_pid["start_ns"].is_monotonic_increasing


def test_measure_once_and_window_is_its_span(any_export: Path) -> None:
    with T.open_trace(any_export) as tr:
        ranges = _nvtx_or_skip(tr)
        measure = ranges[ranges["text"] == "measure"]
        # one measure per process (a torchrun scenario's report holds each rank's)
        assert len(measure) == measure["pid"].nunique() >= 1
        assert T.window(tr) == (measure["start_ns"].min(), measure["end_ns"].max())
        for m in measure.itertuples():  # the measured steps nest directly inside, same thread
            steps = ranges[
                (ranges["text"] == "step")
                & (ranges["global_tid"] == m.global_tid)
                & (ranges["start_ns"] >= m.start_ns)
                & (ranges["end_ns"] <= m.end_ns)
            ]
            assert not steps.empty
            assert (steps["depth"] == m.depth + 1).all()


def test_nvtx_threads_are_known(any_export: Path) -> None:
    with T.open_trace(any_export) as tr:
        ranges = _nvtx_or_skip(tr)
        threads = T.threads(tr)
    assert threads["global_tid"].is_unique
    named = threads.set_index("global_tid")["thread_name"]
    main = ranges[ranges["text"] == "measure"].iloc[0]
    assert named[main["global_tid"]] == main["thread_name"]
    assert (ranges["duration_ns"] == ranges["end_ns"] - ranges["start_ns"]).all()
    assert (ranges["pid"] == (ranges["global_tid"] // 2**24) % 2**24).all()
    assert (ranges["tid"] == ranges["global_tid"] % 2**24).all()


def test_basic_tables_present(any_export: Path) -> None:
    with T.open_trace(any_export) as tr:
        assert {"StringIds", "NVTX_EVENTS", "ThreadNames", "PROCESSES"} <= T.tables(tr)
        assert not T.threads(tr).empty


# --- CPU exports -------------------------------------------------------------------------------


def test_cpu_export_has_empty_typed_cuda_tables(cpu_export: Path) -> None:
    with T.open_trace(cpu_export) as tr:
        assert not any(t.startswith("CUPTI_ACTIVITY_KIND") for t in T.tables(tr))
        for what in CUDA_TABLES:
            func, schema = TABLE_FUNCS[what]
            df = func(tr)
            assert df.empty, what
            _assert_schema(df, schema, what)


def test_cpu_export_has_osrt(cpu_export: Path) -> None:
    with T.open_trace(cpu_export) as tr:
        os_calls = T.osrt(tr)
    assert not os_calls.empty
    assert os_calls["name"].notna().all()
    assert (os_calls["duration_ns"] == os_calls["end_ns"] - os_calls["start_ns"]).all()
    assert (os_calls["duration_ns"] >= 0).all()


def test_cpu_export_loader_thread(cpu_export: Path) -> None:
    if "sync_loading" not in cpu_export.name and cpu_export.name != "gen.sqlite":
        pytest.skip("only sync_loading and the generated workload load data")
    with T.open_trace(cpu_export) as tr:
        ranges = _nvtx_or_skip(tr)
    main_tid = ranges.loc[ranges["text"] == "measure", "global_tid"].iloc[0]
    loads = ranges[ranges["text"] == "data_load"]
    # harness and generated workload both load data; the generated one also on a second thread
    assert not loads.empty
    if cpu_export.name == "gen.sqlite":
        assert (loads["global_tid"] != main_tid).sum() == 1
        assert (loads["global_tid"] == main_tid).sum() == 3
        assert set(ranges["text"]) == {"measure", "step", "data_load", "forward"}


# --- GPU exports -------------------------------------------------------------------------------


def test_gpu_kernels_and_launches(gpu_export: Path) -> None:
    with T.open_trace(gpu_export) as tr:
        k = T.kernels(tr)
        api = T.cuda_api(tr)
        start, end = T.window(tr)
    assert not k.empty
    assert k["name"].notna().all() and k["short_name"].notna().all()
    assert (k["duration_ns"] >= 0).all()
    # every kernel was launched by an API call of category launch (graph kernels: cudaGraphLaunch)
    launch = api[api["category"] == "launch"]
    assert set(k["correlation_id"]) <= set(launch["correlation_id"])
    graph_launch = launch["base_name"].str.contains("GraphLaunch")
    assert set(k.loc[k["graph_node_id"].notna(), "correlation_id"]) <= set(
        launch.loc[graph_launch, "correlation_id"]
    )
    # inside the window, one direct launch call per non-graph kernel at least
    in_k = k[(k["start_ns"] >= start) & (k["start_ns"] <= end) & k["graph_node_id"].isna()]
    in_launch = launch[(launch["start_ns"] >= start) & (launch["start_ns"] <= end) & ~graph_launch]
    assert len(in_launch) >= len(in_k) > 0


def test_gpu_memcpy(gpu_export: Path) -> None:
    with T.open_trace(gpu_export) as tr:
        m = T.memcpy(tr)
        api = T.cuda_api(tr)
    assert (m["direction"] == "HtoD").any()
    assert set(m["direction"]) <= {"HtoD", "DtoH", "DtoD", "HtoH", "PtoP"}
    assert m["pageable"].notna().all()
    host_side = m["src_kind"].where(m["direction"].isin(["HtoD", "HtoH"]), m["dst_kind"])
    h2x = m["direction"].isin(["HtoD", "DtoH"])
    assert (m.loc[h2x, "pageable"] == (host_side[h2x] == "Pageable")).all()
    assert (m.loc[m["direction"] == "DtoD", "pageable"] == False).all()  # noqa: E712
    timed = m[m["duration_ns"] > 0]
    assert (timed["gbps"] == timed["bytes"] / timed["duration_ns"]).all()
    assert set(m["correlation_id"]) <= set(api.loc[api["category"] == "memcpy", "correlation_id"])


def test_gpu_sync_and_info(gpu_export: Path) -> None:
    with T.open_trace(gpu_export) as tr:
        api = T.cuda_api(tr)
        sync = T.sync_events(tr)
        info = T.gpu_info(tr)
    assert (api["category"] == "sync").any()
    # Every sync event comes from a recorded API call, except the context sync that
    # cudaProfilerStop itself causes at the capture's end: its API call falls outside the capture.
    inside = sync[sync["start_ns"] <= api["end_ns"].max()]
    assert set(inside["correlation_id"]) <= set(api["correlation_id"])
    assert len(sync) - len(inside) <= 1
    assert sync["sync_type"].notna().all()
    assert len(info) >= 1
    assert info["name"].notna().all()
    assert (info["sm_count"] > 0).all() and (info["total_memory_bytes"] > 0).all()


# --- API naming, no export needed --------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "base", "category"),
    [
        ("cudaLaunchKernel_v7000", "cudaLaunchKernel", "launch"),
        ("cudaLaunchKernelExC_v11060", "cudaLaunchKernelExC", "launch"),
        ("cuLaunchKernel", "cuLaunchKernel", "launch"),
        ("cuLaunchKernelEx", "cuLaunchKernelEx", "launch"),
        ("cudaGraphLaunch_v10000", "cudaGraphLaunch", "launch"),
        ("cudaDeviceSynchronize_v3020", "cudaDeviceSynchronize", "sync"),
        ("cudaStreamSynchronize_ptsz_v7000", "cudaStreamSynchronize", "sync"),
        ("cudaEventSynchronize_v3020", "cudaEventSynchronize", "sync"),
        ("cudaStreamWaitEvent_v3020", "cudaStreamWaitEvent", "other"),
        ("cudaStreamQuery_v3020", "cudaStreamQuery", "other"),
        ("cudaMemcpyAsync_v3020", "cudaMemcpyAsync", "memcpy"),
        ("cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync", "memcpy"),
        ("cudaMemsetAsync_v3020", "cudaMemsetAsync", "memset"),
        ("cudaMalloc_v3020", "cudaMalloc", "alloc"),
        ("cudaFreeHost_v3020", "cudaFreeHost", "alloc"),
        ("cudaHostAlloc_v3020", "cudaHostAlloc", "alloc"),
        ("cuMemAlloc_v2", "cuMemAlloc", "alloc"),
        ("cudaEventRecord_v3020", "cudaEventRecord", "other"),
        ("cuGetProcAddress_v2", "cuGetProcAddress", "other"),
    ],
)
def test_api_names(name: str, base: str, category: str) -> None:
    assert T.api_base_name(name) == base
    assert T.api_category(base) == category


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


# --- unreadable files --------------------------------------------------------------------------


def _plain_db(path: Path, rows: int = 2000) -> Path:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("CREATE TABLE OSRT_API (start INTEGER, end INTEGER, eventClass INTEGER,"
               " globalTid INTEGER, nameId INTEGER, returnValue INTEGER, nestingLevel INTEGER,"
               " callchainId INTEGER)")  # fmt: skip
    db.execute("INSERT INTO StringIds VALUES (1, 'read')")
    db.executemany(
        "INSERT INTO OSRT_API VALUES (?, ?, 0, 1, 1, 0, 0, 0)", [(i, i + 1) for i in range(rows)]
    )
    db.commit()
    db.close()
    return path


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(T.TraceError, match="no such file"):
        T.open_trace(tmp_path / "nope.sqlite")


def test_text_file(tmp_path: Path) -> None:
    p = tmp_path / "notes.sqlite"
    p.write_text("this is not a database\n" * 20)
    with pytest.raises(T.TraceError, match="not a database"):
        T.open_trace(p)


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.sqlite"
    p.touch()
    with pytest.raises(T.TraceError, match="empty file"):
        T.open_trace(p)


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(T.TraceError, match="not a regular file"):
        T.open_trace(tmp_path)


def test_truncated_file(tmp_path: Path) -> None:
    full = _plain_db(tmp_path / "full.sqlite")
    assert full.stat().st_size > 4096 * 4
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(full.read_bytes()[:4096])
    with pytest.raises(T.TraceError, match="truncated"):
        T.open_trace(cut)


def test_corrupt_pages_raise_on_query(tmp_path: Path) -> None:
    p = _plain_db(tmp_path / "bad.sqlite", rows=20000)
    data = bytearray(p.read_bytes())
    data[4096 * 3 :] = b"\xab" * (len(data) - 4096 * 3)  # keep header, schema and StringIds
    p.write_bytes(bytes(data))
    with T.open_trace(p) as tr, pytest.raises(T.TraceError, match=r"malformed|not a database"):
        T.osrt(tr)


def test_sqlite_without_nsys_tables(tmp_path: Path) -> None:
    p = tmp_path / "other.sqlite"
    db = sqlite3.connect(p)
    db.execute("CREATE TABLE t (x INTEGER)")
    db.commit()
    db.close()
    with pytest.raises(T.TraceError, match="StringIds"):
        T.open_trace(p)


def test_sql_files_ship_as_package_data() -> None:
    from importlib import resources

    names = {p.name for p in resources.files("analysis").joinpath("sql").iterdir()}
    assert {f"{n}.sql" for n in TABLE_FUNCS if n != "step_ranges"} <= names


# --- bulk integer columns and enum tables ------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 3], ids=["serial", "parallel"])
def test_int_columns_match_plain_query(gpu_export: Path, workers: int, monkeypatch) -> None:
    """Chunked, column-at-a-time (and threaded) reading gives exactly the plain query's rows."""
    monkeypatch.setattr(trace_ints, "PARALLEL_READERS", workers)  # read where it lives
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    with T.open_trace(gpu_export) as tr:
        lo, hi = T.window(tr)
        where = 't."end" > :lo AND t.start < :hi'
        _, rows = tr.query(
            f'SELECT start, "end", correlationId, nameId, rowid FROM {t} AS t WHERE {where} '
            "ORDER BY rowid",
            {"lo": lo, "hi": hi},
        )
        cols = {"s": "t.start", "e": 't."end"', "c": "t.correlationId", "n": "t.nameId"}
        cols["r"] = "t.rowid"
        got = T.int_columns(tr, t, cols, where, {"lo": lo, "hi": hi}, chunk_rows=257)
        few = T.int_columns(tr, t, cols, where, {"lo": lo, "hi": hi}, few=True)
        none = T.int_columns(tr, "NO_SUCH_TABLE", cols)
        total = tr.query(f"SELECT COUNT(*) FROM {t}")[1][0][0]
    assert 2 * 257 < len(rows) < total  # several chunks of 257; the window leaves rows out
    expected = np.array(rows, dtype=np.int64)
    for i, name in enumerate(cols):
        assert got[name].dtype == np.int64
        np.testing.assert_array_equal(got[name], expected[:, i])
        np.testing.assert_array_equal(few[name], expected[:, i])
        assert none[name].size == 0


def test_int_columns_pack_reads_pairs_as_one_value(gpu_export: Path) -> None:
    """A packed pair comes back as the two columns it was made of; a low column out of its
    bits would corrupt the high one, and a high one past int64 is refused, never misread."""
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    cols = {"s": "t.start", "d": 't."end" - t.start', "c": "t.correlationId", "n": "t.nameId"}
    with T.open_trace(gpu_export) as tr:
        bits = T.id_bits(tr, "StringIds", "id")
        plain = T.int_columns(tr, t, cols, chunk_rows=257)
        sbits = int(
            plain_start_max := tr.query(f"SELECT MAX(start) FROM {t}")[1][0][0]
        ).bit_length()
        packed = T.int_columns(
            tr, t, cols, chunk_rows=257, pack=[("d", "n", bits), ("c", "s", sbits)]
        )
        assert plain_start_max < 2**sbits
        assert list(packed) == list(cols)
        for name in cols:
            np.testing.assert_array_equal(packed[name], plain[name])
        assert bits == int(tr.query("SELECT MAX(id) FROM StringIds")[1][0][0]).bit_length()
        assert plain["n"].max() < 2**bits
        assert T.id_bits(tr, "NO_SUCH_TABLE") is None
        with pytest.raises(T.TraceError, match="not integers"):
            T.int_columns(tr, t, cols, pack=[("s", "c", 62)])  # start * 2**62 overflows


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
