"""A size too large for this machine is refused before anything runs, in one line with its
estimate (issue 52): a forced_sync batch whose data did not fit in host memory set up for over a
minute in each worker, which the kernel then killed.

Each scenario may say the least memory one process of a size takes
(``ScenarioConfig.memory_estimate``, a floor: :mod:`scenarios._memory`). It is compared with the
host memory available now (``MemAvailable``, or less under a memory cgroup's limit), for every
rank a distributed scenario runs on this node, and, on a GPU, with the GPU's total memory as
``nvidia-smi`` reports it (the parent never touches CUDA).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.core.errors import UsageError
from harness.core.hostmem import HostMemory, gib
from harness.execution.plan import nproc_per_node
from scenarios import MemoryEstimate

if TYPE_CHECKING:
    from harness.execution.settings import Settings


def estimate(settings: Settings, scenario: str) -> MemoryEstimate | None:
    """The scenario's floor at the run's size and device (None: it says none)."""
    cfg = settings.cfg.scenario[scenario]
    return cfg.memory_estimate(cfg.size(settings.size), settings.device == "cuda")


def ranks_here(settings: Settings, scenario: str) -> int:
    """The processes one unit of ``scenario`` runs on this node."""
    world = settings.found[scenario].world_size
    return nproc_per_node(settings.cfg, world) if world > 1 else 1


def gpu_total(settings: Settings) -> int | None:
    """Bytes of the smallest GPU's memory (nvidia-smi), None on the CPU or where unknown."""
    mib = [m for m in settings.gpu.memory_mib if m > 0]
    return min(mib) * 2**20 if settings.device == "cuda" and mib else None


def refusal(settings: Settings, memory: HostMemory) -> str:
    """Why the run's size cannot fit this machine ('' when every estimate fits): the first
    scenario whose floor exceeds the host memory available, or its GPU's memory."""
    gpu = gpu_total(settings)
    for name in settings.selected:
        est = estimate(settings, name)
        if est is None:
            continue
        ranks = ranks_here(settings, name)
        at = f"scenario.{name} at size={settings.size}"
        fix = (
            f"run a smaller size (the fields of scenario.{name}.{settings.size}) or on a machine "
            "with more memory"
        )
        host = est.host * ranks
        if memory.available is not None and host > memory.available:
            per = f" for its {ranks} ranks" if ranks > 1 else ""
            return (
                f"{at} needs at least {gib(host)} of host memory{per} by its estimate "
                f"({est.what}), more than the {gib(memory.available)} available here"
                f"{f' (of {gib(memory.total)})' if memory.total else ''}; {fix}"
            )
        if gpu is not None and est.gpu > gpu:
            return (
                f"{at} needs at least {gib(est.gpu)} of GPU memory per process by its estimate "
                f"({est.what}), more than the GPU's {gib(gpu)}; {fix}"
            )
    return ""


def check(settings: Settings) -> None:
    """Raise :class:`UsageError` (one line, exit 2) when the size cannot fit this machine."""
    why = refusal(settings, HostMemory.now())
    if why:
        raise UsageError(why)


def size_said(settings: Settings, scenario: str) -> str:
    """``size=full`` and, where the scenario estimates it, its floor of host memory per
    process: what an ``oom`` status names."""
    est = estimate(settings, scenario)
    if est is None or not est.host:
        return f"size={settings.size}"
    return f"size={settings.size} (at least {gib(est.host)} of host memory by its estimate)"
