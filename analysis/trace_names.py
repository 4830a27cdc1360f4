"""CUDA API names resolved to what the rules look at: the base name across CUDA versions and
the call's coarse role (launch, sync, memcpy, memset, alloc, other)."""

from __future__ import annotations

import re

__all__ = ["api_base_name", "api_category"]

_VERSION_SUFFIX = re.compile(r"(?:_v\d+)?$")
_PT_SUFFIX = re.compile(r"_pt(?:sz|ds)$")

_LAUNCH = (
    "cudaLaunchKernel",  # also cudaLaunchKernelExC
    "cudaLaunchCooperativeKernel",
    "cudaGraphLaunch",
    "cuLaunchKernel",  # also cuLaunchKernelEx
    "cuLaunchCooperativeKernel",
    "cuGraphLaunch",
    "cuLaunchGrid",
)
_SYNC = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaThreadSynchronize",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
    }
)
_ALLOC = (
    "cudaMalloc",
    "cudaFree",  # also cudaFreeHost, cudaFreeAsync, cudaFreeArray
    "cudaHostAlloc",
    "cudaHostRegister",
    "cudaHostUnregister",
    "cuMemAlloc",
    "cuMemFree",
    "cuMemHostAlloc",
    "cuMemHostRegister",
    "cuMemHostUnregister",
)


def api_base_name(name: str) -> str:
    """Strip nsys' version and per-thread-stream suffixes: cudaLaunchKernel_v7000 -> cudaLaunchKernel.

    Lets one name match across CUDA versions (``cudaMemcpyAsync_ptsz_v7000`` -> ``cudaMemcpyAsync``).
    """
    return _PT_SUFFIX.sub("", _VERSION_SUFFIX.sub("", name, count=1))


def api_category(base_name: str) -> str:
    """Coarse role of a CUDA API call: launch, sync, memcpy, memset, alloc or other.

    ``sync`` is only the calls that block the host until the GPU is done (not cudaStreamWaitEvent
    or cudaStreamQuery, which return at once).
    """
    if base_name.startswith(_LAUNCH) or base_name == "cuLaunch":
        return "launch"
    if base_name in _SYNC:
        return "sync"
    if base_name.startswith(("cudaMemcpy", "cuMemcpy")):
        return "memcpy"
    if base_name.startswith(("cudaMemset", "cuMemset", "cuMemsetD")):
        return "memset"
    if base_name.startswith(_ALLOC):
        return "alloc"
    return "other"
