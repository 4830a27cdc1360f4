"""Named, tested SQL over an Nsight Systems SQLite export, returning typed pandas DataFrames.

One function per table, Holistic-Trace-Analysis style: tidy frames, units in column names
(``start_ns``, ``duration_ns``, ``bytes``) and joins done in SQL. The queries live in
``analysis/sql/*.sql``; where nsys 2022.4 and 2025.3 exports differ (metadata table name, optional
columns, enum tables without ``label``) the Python side checks ``sqlite_master`` and
``PRAGMA table_info`` and fills a placeholder of the query with a table name or column expression
from a fixed list, never with caller input.

nsys exports tables lazily (only those with data), so a missing activity table yields an empty
frame with the same columns and dtypes as a full one. A file that is not a readable nsys export
raises :class:`TraceError` instead: it never comes back as an empty frame.

The code lives by job in sibling modules; this module is their one import surface
(``from analysis import trace as T``):

- :mod:`analysis.export`: :func:`open_export`, the one opener of an export in any form
  (``.sqlite``, ``.sqlite.xz``, ``.sqlite.cols.xz``, ``.nsys-rep``; its SQLite file alone:
  ``analysis.export.sqlite_export``);
- :mod:`analysis.trace_db`: opening a SQLite export, the :class:`Trace` connection,
  :class:`ExportError` and its :class:`TraceError`;
- :mod:`analysis.trace_schema`: the frames' column schemas and the named-query plumbing;
- :mod:`analysis.trace_tables`: one reader per table (kernels, memcpy, cuda_api, nvtx_ranges, ...);
- :mod:`analysis.trace_ints`: bulk integer columns for the big tables (:func:`int_columns`),
  decoded from the file's pages where it can (:mod:`analysis.trace_pages`,
  :mod:`analysis.trace_expr`), else through SQLite;
- :mod:`analysis.trace_names`: CUDA API names to base names and roles.

Outside ``__all__`` it also passes on ``unxz`` and the dtype names ``I64`` and ``STR``. Tunables
read at call time (``trace_ints.PARALLEL_READERS``, ``trace_ints.PAGE_READS``,
``trace_db.MMAP_BYTES``) are set on their own
module, not here: a copy on this one would change nothing.
"""

from __future__ import annotations

from analysis.export import open_export
from analysis.trace_db import ExportError, Trace, TraceError, open_trace
from analysis.trace_db import unxz as unxz
from analysis.trace_ints import (
    Pack,
    id_bits,
    int_columns,
    name_bits,
)
from analysis.trace_names import api_base_name, api_category
from analysis.trace_schema import (
    ACTIVITY_TABLES,
    CUDA_API,
    GPU_INFO,
    KERNELS,
    MEMCPY,
    MEMSET,
    NVTX_RANGES,
    OSRT,
    STEP_RANGES,
    SYNC_EVENTS,
    THREADS,
    enum_table,
)
from analysis.trace_schema import I64 as I64
from analysis.trace_schema import STR as STR
from analysis.trace_tables import (
    cuda_api,
    gpu_info,
    kernels,
    memcpy,
    memset,
    nsys_version,
    nvtx_ranges,
    osrt,
    step_ranges,
    sync_events,
    tables,
    threads,
    window,
)

__all__ = [
    "ACTIVITY_TABLES",
    "CUDA_API",
    "GPU_INFO",
    "KERNELS",
    "MEMCPY",
    "MEMSET",
    "NVTX_RANGES",
    "OSRT",
    "STEP_RANGES",
    "SYNC_EVENTS",
    "THREADS",
    "ExportError",
    "Pack",
    "Trace",
    "TraceError",
    "api_base_name",
    "api_category",
    "cuda_api",
    "enum_table",
    "gpu_info",
    "id_bits",
    "int_columns",
    "kernels",
    "memcpy",
    "memset",
    "name_bits",
    "nsys_version",
    "nvtx_ranges",
    "open_export",
    "open_trace",
    "osrt",
    "step_ranges",
    "sync_events",
    "tables",
    "threads",
    "window",
]
