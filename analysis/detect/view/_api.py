"""CUDA API names as the detectors see them: each StringIds id of an API call resolved once to
its base name and role (launch, sync, memcpy, ...), and roles as small integer codes."""

from __future__ import annotations

import numpy as np

from analysis import trace as T
from analysis.detect.view._arrays import distinct
from analysis.detect.view._reads import trace_cache

__all__ = [
    "CATEGORIES",
    "DEVICE_ALLOC",
    "DEVICE_SYNC_FREE",
    "LAUNCH",
    "MEMCPY_CALL",
    "SYNC",
    "api_names",
    "base_name_in",
    "base_names",
    "category_ids",
]


def api_names(trace: T.Trace) -> dict[int, tuple[str, str]]:
    """StringIds id -> (base name, category) for every CUDA API name in the export (cached).

    Every API name that has a category other than ``other`` starts with ``cu`` (cudaLaunchKernel,
    cuLaunchKernel, cudaStreamSynchronize, cuMemcpyDtoH, ...), so only those strings are read.
    """
    cache = trace_cache(trace)
    if "api_names" not in cache:
        rows = trace.query("SELECT id, value FROM StringIds WHERE value LIKE 'cu%'")[1]
        out = {}
        for i, name in rows:
            base = T.api_base_name(str(name))
            out[int(i)] = (base, T.api_category(base))
        cache["api_names"] = out
    return cache["api_names"]


#: Codes of :func:`window_calls`' ``cat`` column: the index of an api_category here.
CATEGORIES = ("other", "launch", "sync", "memcpy", "memset", "alloc")
LAUNCH, SYNC, MEMCPY_CALL = 1, 2, 3


def _category_codes(trace: T.Trace, name_ids: np.ndarray) -> np.ndarray:
    """The CATEGORIES code of each API name id (0 for ids that are no known API name), by a
    table indexed by id rather than a set test per category."""
    api = api_names(trace)
    if not api:
        return np.zeros(name_ids.size, np.int8)
    top_id = max(api)
    lut = np.zeros(top_id + 3, np.int8)  # slot 0: ids below 0, the last: ids above top_id
    for i, (_, cat) in api.items():
        lut[i + 1] = CATEGORIES.index(cat)
    idx = name_ids + 1
    return lut[np.clip(idx, 0, top_id + 2, out=idx)]


def category_ids(trace: T.Trace, *categories: str) -> list[int]:
    """Name ids of the CUDA API calls in these categories (launch, sync, memcpy, ...)."""
    return sorted(i for i, (_, c) in api_names(trace).items() if c in categories)


def base_names(trace: T.Trace, name_ids: np.ndarray) -> np.ndarray:
    """Base names (object array) of CUDA API calls by StringIds id ('' where unknown)."""
    names = api_names(trace)
    ids, inv = distinct(name_ids)
    return np.array([names.get(int(i), ("", "other"))[0] for i in ids], dtype=object)[inv]


def base_name_in(trace: T.Trace, name_ids: np.ndarray, wanted: tuple[str, ...]) -> np.ndarray:
    """``np.isin(base_names(trace, name_ids), wanted)``, tested once per distinct id: no
    string per call of millions."""
    names = api_names(trace)
    ids, inv = distinct(name_ids)
    hit = np.array([names.get(int(i), ("", "other"))[0] in wanted for i in ids], bool)
    return hit[inv] if ids.size else np.zeros(np.shape(name_ids), bool)


#: Base names of the CUDA calls that take device memory from the driver or give it back.
DEVICE_ALLOC = (
    *("cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync", "cudaMallocManaged"),
    *("cuMemAlloc", "cuMemFree", "cuMemAllocAsync", "cuMemFreeAsync", "cuMemAllocManaged"),
    *("cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap", "cuMemAddressReserve"),
    *("cuMemAddressFree", "cuMemSetAccess", "cudaMallocPitch", "cuMemAllocPitch"),
)

#: Of those, the frees that synchronise the device before they give the memory back (the driver
#: cannot unmap pages queued work may still touch): they wait for all work launched before them.
#: The stream-ordered frees (``cudaFreeAsync``) queue the free instead.
DEVICE_SYNC_FREE = ("cudaFree", "cuMemFree")
