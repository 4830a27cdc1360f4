"""Shared pieces of the detectors: the steady-state window, GPU activity in it, interval maths.

Everything is read with window-bounded SQL (only rows overlapping the window, only the columns
needed). The big tables (kernels, CUDA API calls) come back as numpy arrays through
:func:`analysis.trace.int_columns`, never as per-row Python objects or pandas frames; names and
kinds are resolved once per distinct id (StringIds, ENUM_*), as id sets in SQL or a lookup
table in numpy. Results are cached on the Trace object, so running all five detectors scans
each table once: one scan per GPU table (:func:`gpu_activity`, which also serves
:func:`gpu_starts`) and one of the API table (:func:`window_calls`, whose rows host_sync,
launch_bound and the host view all take theirs from). Rows come back from SQLite in time order
as a rule, so sorts and unique-passes check for that first and skip the work.

The code lives by job in sibling modules; this module is their one import surface
(``from analysis.detect import _common as C``):

- :mod:`._window`: the steady window (:class:`Steady`) and the loop's thread;
- :mod:`._reads`: the per-trace cache, window-bounded SQL, reads run ahead;
- :mod:`._gpu`: GPU activity in the window (:class:`Activity`);
- :mod:`._api` and :mod:`._calls`: CUDA API names and the window's API calls;
- :mod:`._osrt`: OS-runtime calls of chosen threads;
- :mod:`._intervals` and :mod:`._arrays`: interval maths and column-array helpers;
- :mod:`._evidence`: evidence stamps and the missing-table finding.

Patch a name where it lives (``_calls.window_calls``), not here: the moved code looks its
names up in its own module.
"""

from __future__ import annotations

from analysis.detect._api import (
    CATEGORIES,
    LAUNCH,
    MEMCPY_CALL,
    SYNC,
    api_names,
    base_names,
    category_ids,
)
from analysis.detect._arrays import _first_values as _first_values  # used by sibling modules
from analysis.detect._arrays import _lookup as _lookup  # used by sibling modules
from analysis.detect._arrays import (
    by_start,
    rows_where,
    top,
)
from analysis.detect._calls import (
    LAUNCH_LOOKBACK_NS,
    activity_launch_ends,
    blocking_calls,
    caller_tids,
    launch_ends,
    prefetch_calls,
    window_api,
    window_calls,
)
from analysis.detect._evidence import (
    label_at,
    missing,
    ms,
    stamp,
)
from analysis.detect._gpu import (
    DIRECTIONS,
    DTOH,
    HTOD,
    KIND_GRAPH,
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    Activity,
    busy,
    gpu_activity,
    gpu_starts,
    kernel_names,
    steady_activity,
)
from analysis.detect._intervals import (
    covered,
    difference,
    gaps,
    length,
    overlap_any,
    overlap_each,
    overlap_total,
    union,
)
from analysis.detect._osrt import (
    prefetch_osrt,
    thread_osrt,
)
from analysis.detect._reads import (
    GPU_TABLES,
    GRAPH,
    KERNEL,
    MEMCPY,
    MEMSET,
    RUNTIME,
    WINDOW,
    enum_ids,
    has_gpu,
    id_list,
    name_ids,
)
from analysis.detect._reads import _cache as _cache  # used by sibling modules
from analysis.detect._reads import _string_ids as _string_ids  # used by sibling modules
from analysis.detect._window import (
    NO_STEADY_STATE,
    Steady,
    activity_span,
    launcher_tids,
    loop_thread,
    no_steady_state,
    process_main_thread,
    steady,
)

__all__ = [
    "CATEGORIES",
    "DIRECTIONS",
    "DTOH",
    "GPU_TABLES",
    "GRAPH",
    "HTOD",
    "KERNEL",
    "KIND_GRAPH",
    "KIND_KERNEL",
    "KIND_MEMCPY",
    "KIND_MEMSET",
    "LAUNCH",
    "LAUNCH_LOOKBACK_NS",
    "MEMCPY",
    "MEMCPY_CALL",
    "MEMSET",
    "NO_STEADY_STATE",
    "RUNTIME",
    "SYNC",
    "WINDOW",
    "Activity",
    "Steady",
    "activity_launch_ends",
    "activity_span",
    "api_names",
    "base_names",
    "blocking_calls",
    "busy",
    "by_start",
    "caller_tids",
    "category_ids",
    "covered",
    "difference",
    "enum_ids",
    "gaps",
    "gpu_activity",
    "gpu_starts",
    "has_gpu",
    "id_list",
    "kernel_names",
    "label_at",
    "launch_ends",
    "launcher_tids",
    "length",
    "loop_thread",
    "missing",
    "ms",
    "name_ids",
    "no_steady_state",
    "overlap_any",
    "overlap_each",
    "overlap_total",
    "prefetch_calls",
    "prefetch_osrt",
    "process_main_thread",
    "rows_where",
    "stamp",
    "steady",
    "steady_activity",
    "thread_osrt",
    "top",
    "union",
    "window_api",
    "window_calls",
]
