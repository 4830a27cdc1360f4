"""One variant in one process: ``python -m harness.execution.worker --spec SPEC.json``.

The parent never imports CUDA; this process does. It builds the workload, runs warm-up steps,
then a measured window of N steps bracketed by ``cudaProfilerStart/Stop`` (so nsys with
``--capture-range=cudaProfilerApi`` records only steady state) and by an NVTX range ``measure``
(so whole-process CPU profiles can be clipped to the same window). On the GPU, step times come
from CUDA events and the device is synchronized only at the window's edges. Right before the
window and right after it (outside the capture range) the worker probes the host's speed
(:mod:`harness.execution.hostprobe`: a launch-rate probe and a Python loop), so a reader can
tell a host that drifted from a variant that changed (result.json's ``host_probe``), and counts
how long its threads waited for a core in the window (:mod:`harness.core.schedwait`: ``sched``).

When the parent asks (``WorkerSpec.report_progress``), the worker says how far it got in
``.progress.json`` (:class:`harness.core.runfolder.WorkerState`), and with ``WorkerSpec.gate`` it
waits after its set-up, before the warm-up, until the parent creates ``.go``: the parent starts
a worker while the previous one still tears down and lets it measure once that one has gone.
The ranks of a distributed worker all wait at that gate, polling for ``.go`` (no collective:
an NCCL barrier would spin on the GPU beside another worker's window); rank 0 says ``held``
once every rank has set up (``.ready-<rank>``).

Ranks forked by the harness (``harness.fork_ranks``) rather than started by torchrun find the
rendezvous file in ``BOTTLENECK_RDZV_FILE``: rank 0 hosts the TCP store there (on a port the
kernel picks, so no port is raced for) as torchrun's agent would, every rank connects to it as
a client (``TORCHELASTIC_USE_AGENT_STORE=True``, as under torchrun), and the process group is
then made the usual way (``env://``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib
import os
import platform
import resource
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core import runfolder as rf
from harness.core import schedwait
from harness.core.atomic import read_json, write_json
from harness.execution.hostprobe import host_probe, probe_record
from harness.execution.kineto import Capture, capture_for

#: Set by the parent when it starts a worker (epoch seconds), so the worker can say how long
#: the interpreter and its wrappers (nsys, torchrun) took to reach ``main``.
LAUNCHED_AT_ENV = "BOTTLENECK_LAUNCHED_AT"
_MODULE_LOADED_AT = time.time()
#: Set by the parent for forked ranks: the file in which rank 0 says the port of the store it
#: hosts (:func:`forked_rendezvous`).
RDZV_FILE_ENV = "BOTTLENECK_RDZV_FILE"

#: Exit code of a worker that ran out of memory (host RAM cap or CUDA), so the parent records
#: 'oom' rather than a generic failure. Wrappers (nsys, torchrun) may change the code, so the
#: worker also prints OOM_MARKER on stderr, which the parent looks for as well.
OOM_EXIT_CODE = 3
OOM_MARKER = "harness-worker: out of memory:"
#: Printed (stdout, flushed) as the measured window starts: tests wait for it to signal a run
#: while a worker is inside its window, and a log shows how far a killed worker got.
WINDOW_MARKER = "harness-worker: window starts:"


@dataclass(kw_only=True)
class WorkerSpec:
    """Everything a worker needs; written by the parent as JSON."""

    scenario: str
    """Scenario name."""
    variant: str
    """Variant name."""
    phase: str
    """The unit's phase (:func:`harness.core.runfolder.timing_phase` or ``runfolder.PROFILE``)."""
    size: str
    """'smoke' or 'full'."""
    device: str
    """'cuda' or 'cpu'."""
    config: dict[str, Any]
    """The scenario's composed config (plain containers)."""
    seed: int
    """Seed shared by all variants of the scenario."""
    cache_dir: str
    """Where generated data sets live."""
    out_dir: str
    """Where result.json goes."""
    emit_nvtx: bool = False
    """Wrap the window in torch.autograd.profiler.emit_nvtx()."""
    memory_cap_gb: float | None = None
    """harness.memory_cap_gb: address-space cap set at start-up on the CPU (None: none)."""
    max_window_s: float | None = None
    """harness.max_window_s: shorten the measured window to about this many seconds when the
    size's ``steps`` would take longer (never below ``min_steps``); None keeps ``steps``."""
    min_steps: int = 5
    """harness.min_steps: the fewest measured steps a shortened window keeps."""
    max_warmup_s: float | None = None
    """harness.max_warmup_s: end the warm-up early once it has run this long and at least
    ``MIN_WARMUP_STEPS`` steps (single-process workers only); None runs every warm-up step."""
    preload: list[str] = field(default_factory=list)
    """Modules imported right after torch (``import_preload_s``, part of ``import_s``): what
    the fork server imports for forked workers, so that a worker started as a new interpreter
    (a profiled one) does not import ``torch._dynamo`` inside its set-up instead."""
    report_progress: bool = False
    """Write ``.progress.json`` in ``out_dir`` as the run goes (rank 0 only)."""
    gate: bool = False
    """After the set-up, wait before the warm-up until ``out_dir/.go`` exists (every rank of a
    distributed worker on one node; implies ``report_progress``)."""
    parent_pid: int | None = None
    """The harness's pid: a worker held at the gate leaves if that process is gone."""
    gate_timeout_s: float = 900.0
    """The longest a worker waits at the gate before it gives up (the parent's own timeout
    normally ends it first)."""
    exit_after_capture: bool = False
    """A profiled worker leaves through ``os._exit`` once its result is written: only on a GPU,
    where cudaProfilerStop has already handed nsys the capture (nsys.exit_after_capture)."""
    warm_only: bool = False
    """A compiler-cache warm-up (harness.warm_compile): build and set up the workload, then
    exit; no warm-up, window or result.json."""
    capture_lead_steps: int = 0
    """Profiled on a GPU: steps run after cudaProfilerStart and before the measured window
    (nsys.capture_lead_steps), so nsys's cost of starting a capture is not measured."""
    probe_launches: int = 0
    """harness.host_probe.launches: the launch-rate probe's launches, run right before and
    right after the measured window (:mod:`harness.execution.hostprobe`); 0: no host probes."""
    probe_python_loop: int = 300_000
    """harness.host_probe.python_loop: the Python loop probe's iterations."""
    kineto: dict[str, Any] | None = None
    """A kineto unit's PyTorch Profiler settings (the ``kineto`` config section): the window
    runs under ``torch.profiler`` and every rank writes its trace; None: no profiler."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Reserved for scenario-specific launch facts."""

    @classmethod
    def load(cls, path: str | Path) -> WorkerSpec:
        return cls(**read_json(path))


def _say_progress(spec: WorkerSpec, state: rf.WorkerState, stage: str | None = None) -> None:
    """Rewrite ``.progress.json`` (rank 0; a failed write is ignored: progress is a hint)."""
    if not (spec.report_progress or spec.gate) or os.environ.get("RANK", "0") != "0":
        return
    record = {"state": state.value, "stage": stage, "at": time.time()}
    with contextlib.suppress(OSError):
        write_json(Path(spec.out_dir) / rf.PROGRESS, record)


def _publish_stages(spec: WorkerSpec, ctx: Any) -> None:
    """Make ``ctx.stage(name)`` also say the set-up stage it enters and leaves, so the parent
    can show that a slow set-up is compiling (and not stuck)."""
    timed = ctx.stage

    @contextlib.contextmanager
    def stage(name: str) -> Any:
        with timed(name):
            _say_progress(spec, rf.WorkerState.SETUP, name)
            try:
                yield
            finally:
                _say_progress(spec, rf.WorkerState.SETUP)

    ctx.stage = stage


#: A context that does nothing (the window without the PyTorch Profiler's ranges).
NULL = contextlib.nullcontext()
#: How often a worker held at the gate looks for ``.go`` (seconds).
GATE_POLL_S = 0.005


def wait_at_gate(spec: WorkerSpec, rank: int = 0) -> float:
    """Rank 0 says 'held'; every rank waits until the parent creates ``.go``; the seconds
    waited. Raises RuntimeError when the parent is gone or ``gate_timeout_s`` has passed."""
    go = Path(spec.out_dir) / rf.GO
    if rank == 0:
        _say_progress(spec, rf.WorkerState.HELD)
    t0 = time.perf_counter()
    _wait_for(spec, go.exists, "held before the warm-up", GATE_POLL_S)
    return time.perf_counter() - t0


def ranks_ready(spec: WorkerSpec, rank: int, world: int) -> None:
    """A rank of a gated distributed worker has set up: it says so with a file, and rank 0
    waits until every rank has (a file poll, not a collective: nothing runs on the GPU while
    the unit waits), so that 'held' means the whole unit has set up."""
    folder = Path(spec.out_dir)
    (folder / rf.ready_marker(rank)).touch()
    if rank == 0:
        names = [folder / rf.ready_marker(r) for r in range(world)]
        every = lambda: all(p.exists() for p in names)  # noqa: E731
        _wait_for(spec, every, "waiting for the other ranks' set-up", GATE_POLL_S)


def _wait_for(spec: WorkerSpec, done: Any, what: str, poll_s: float) -> None:
    """Poll ``done()`` until true; RuntimeError once the harness is gone or after
    ``gate_timeout_s``."""
    t0 = checked = time.perf_counter()
    while not done():
        now = time.perf_counter()
        if now - t0 > spec.gate_timeout_s:
            raise RuntimeError(f"{what} for {spec.gate_timeout_s:g} s: no go")
        if now - checked > 1.0:
            checked = now
            if spec.parent_pid is not None and not rf.pid_alive(spec.parent_pid):
                raise RuntimeError("the harness that held this worker is gone")
        time.sleep(poll_s)


def forked_rendezvous(spec: WorkerSpec, dist: Any, rank: int, world: int) -> Any:
    """For ranks the harness forked (``BOTTLENECK_RDZV_FILE`` set): rank 0 starts the TCP store
    torchrun's agent would host, on a port the kernel picks, and writes that port to the file;
    the others wait for it. Sets ``MASTER_PORT``; returns this rank's handle on the store (rank
    0: the server, kept alive until :func:`leave_rendezvous`), or None under torchrun (no file:
    nothing to do)."""
    path = os.environ.get(RDZV_FILE_ENV)
    if not path:
        return None
    timeout = dt.timedelta(seconds=spec.gate_timeout_s)
    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    if rank == 0:
        store = dist.TCPStore(
            host, 0, world, is_master=True, timeout=timeout, wait_for_workers=False
        )
        port = int(store.port)
        write_json(Path(path), {"port": port, "pid": os.getpid()})
    else:
        found: dict[str, Any] = {}

        def published() -> bool:
            with contextlib.suppress(OSError, ValueError):
                found.update(read_json(path) or {})
            return "port" in found

        _wait_for(spec, published, "waiting for rank 0's rendezvous store", GATE_POLL_S)
        port = int(found["port"])
        store = dist.TCPStore(host, port, world, is_master=False, timeout=timeout)
    os.environ["MASTER_PORT"] = str(port)
    return store


#: The forked ranks' store key counting the ranks done with their process group.
DONE_KEY = "harness/ranks_done"
#: The longest rank 0 keeps its store up for the other ranks once done itself (seconds).
LEAVE_WAIT_S = 60.0


def leave_rendezvous(store: Any, rank: int, world: int) -> None:
    """Forked ranks, their process group destroyed: each counts itself in the store, and rank
    0, which hosts it, leaves once every rank has (at most ``LEAVE_WAIT_S``), so the store
    outlives every rank's use of it, as torchrun's agent's does. None (torchrun): nothing."""
    if store is None:
        return
    with contextlib.suppress(RuntimeError):  # the store gone: the harness stops the unit
        store.add(DONE_KEY, 1)
        deadline = time.monotonic() + LEAVE_WAIT_S
        while rank == 0 and store.add(DONE_KEY, 0) < world and time.monotonic() < deadline:
            time.sleep(GATE_POLL_S)


def _env_info(torch_mod: Any, device: Any) -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch_mod.__version__,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch_mod.get_num_threads(),
    }
    if device.type == "cuda":
        props = torch_mod.cuda.get_device_properties(device)
        info.update(
            gpu=props.name,
            gpu_count=torch_mod.cuda.device_count(),
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            sm_count=props.multi_processor_count,
            cuda_runtime=torch_mod.version.cuda,
            cudnn=torch_mod.backends.cudnn.version(),
        )
    return info


def _device(spec: WorkerSpec, torch: Any) -> tuple[Any, float]:
    """The worker's device, and the seconds the CUDA context and first kernel took."""
    if spec.device != "cuda":
        # Leave half the cores to loader workers, as a GPU job leaves its cores to them.
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
        return torch.device("cpu"), 0.0
    if not torch.cuda.is_available():
        raise RuntimeError("the parent saw a GPU but torch.cuda.is_available() is False here")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    t0 = time.perf_counter()
    torch.cuda.set_device(device)
    torch.zeros(1, device=device).add_(1)  # the CUDA context and the first kernel load
    torch.cuda.synchronize(device)
    return device, time.perf_counter() - t0


def _warm_up(
    spec: WorkerSpec, workload: Any, planned: int, distributed: bool, sync: Any
) -> tuple[int, float, float]:
    """Run the warm-up: (steps run, seconds, steady step seconds from its second half)."""
    import bottlenecks as markers

    # Start together: a rank that set up faster must not count its wait at the first barrier
    # as step time (the window's length is planned from the warm-up).
    sync()
    t0 = time.perf_counter()
    # Ranks must run the same steps (each one holds collectives): no early end there.
    budget = None if distributed else spec.max_warmup_s
    ends: list[float] = []
    for i in range(planned):
        with markers.phase(markers.STEP):
            workload.step(i)
        ends.append(time.perf_counter())
        if warmup_done(budget, len(ends), ends[-1] - t0):
            break
    sync()
    t_end = time.perf_counter()
    warmup = len(ends)
    # Steady-state step time from the second half of the warm-up (the first steps carry
    # one-off costs: cuDNN autotuning, allocator growth, compilation).
    mid = warmup // 2
    t_mid = ends[mid - 1] if mid else t0
    return warmup, t_end - t0, (t_end - t_mid) / max(1, warmup - mid)


def _measure(
    spec: WorkerSpec,
    workload: Any,
    torch: Any,
    first: int,
    n: int,
    on_gpu: bool,
    sync: Any,
    capture: Capture | None = None,
) -> tuple[list[float], list[float], float, float, dict[str, Any] | None]:
    """The measured window of ``n`` steps: (step ms, host ms per step, window seconds, seconds
    cudaProfilerStop took, its threads' CPU and run-queue wait: :mod:`harness.core.schedwait`). On a GPU, step times come from CUDA events and the window is the
    cudaProfilerApi range; under nsys the stop returns only once nsys has taken the capture
    (seconds: ``capture_stop_s``). A kineto unit's ``capture`` (the PyTorch Profiler) starts
    before the window and is written after it (:mod:`harness.execution.kineto`)."""
    import bottlenecks as markers

    nvtx_ops = torch.autograd.profiler.emit_nvtx() if spec.emit_nvtx else contextlib.nullcontext()
    host_ms: list[float] = []
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)] if on_gpu else []
    if on_gpu:
        torch.cuda.profiler.start()
        # nsys's first steps of a capture run slow (a 98 ms step of 40 on the H100): they are
        # captured but not measured, and the window's NVTX range starts after them
        for j in range(spec.capture_lead_steps):
            workload.step(first + j)
        if spec.capture_lead_steps:
            sync()
        first += spec.capture_lead_steps
    if capture is not None:
        first = capture.start(workload, first, n, sync)
    in_trace = capture.window() if capture is not None else NULL
    workload.start_window()
    _say_progress(spec, rf.WorkerState.WINDOW)
    print(f"{WINDOW_MARKER} {n} steps after {first} warm-up steps", flush=True)
    threads_before = schedwait.snapshot()  # each thread's CPU and run-queue wait so far
    with nvtx_ops, markers.phase(markers.MEASURE), in_trace:
        w0 = time.perf_counter()
        if on_gpu:
            events[0].record()
        for j in range(n):
            s0 = time.perf_counter()
            with markers.phase(markers.STEP), capture.step_range() if capture else NULL:
                workload.step(first + j)
            if on_gpu:
                events[j + 1].record()
            host_ms.append((time.perf_counter() - s0) * 1e3)
            if capture is not None and j < n - 1:
                capture.step()  # the last step's range ends when the profiler stops
        sync()
        window_s = time.perf_counter() - w0
    sched = schedwait.window_record(threads_before, schedwait.snapshot(), n, window_s)
    _say_progress(spec, rf.WorkerState.STOPPING)
    if capture is not None:
        capture.finish()
    if not on_gpu:
        return host_ms, host_ms, window_s, 0.0, sched
    t_stop = time.perf_counter()
    torch.cuda.profiler.stop()
    stop_s = time.perf_counter() - t_stop
    step_ms = [events[j].elapsed_time(events[j + 1]) for j in range(n)]
    return step_ms, host_ms, window_s, stop_s, sched


def run(spec: WorkerSpec) -> dict[str, Any]:
    """Build, warm up, measure; return the result record (also written to result.json)."""
    _say_progress(spec, rf.WorkerState.IMPORT)
    t_import = time.perf_counter()
    import numpy as np
    import torch
    from omegaconf import OmegaConf

    import_torch_s = time.perf_counter() - t_import
    t_preload = time.perf_counter()
    for module in spec.preload:  # already imported in a forked worker: costs nothing there
        importlib.import_module(module)
    import_preload_s = time.perf_counter() - t_preload
    from harness.core.config import discover_scenarios
    from scenarios import RunContext

    started = dt.datetime.now(dt.timezone.utc)
    scen = discover_scenarios()[spec.scenario]
    build = scen.builder()  # its workload module: an import, timed with the scenarios
    import_s = time.perf_counter() - t_import
    _say_progress(spec, rf.WorkerState.SETUP)
    variant = scen.variant(spec.variant)
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(scen.config_cls), spec.config))
    size = cfg.size(spec.size)
    device, cuda_init_s = _device(spec, torch)
    torch.manual_seed(spec.seed)
    np.random.seed(spec.seed)

    ctx = RunContext(
        device=device,
        size_name=spec.size,
        seed=spec.seed,
        cache_dir=Path(spec.cache_dir),
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
    )
    _publish_stages(spec, ctx)
    distributed = ctx.world_size > 1
    if distributed:
        import torch.distributed as dist

        store = forked_rendezvous(spec, dist, ctx.rank, ctx.world_size)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    workload = build(cfg, size, variant.name, ctx)
    on_gpu = device.type == "cuda"

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize(device)
        if distributed:
            dist.barrier()

    t0 = time.perf_counter()
    workload.setup()
    if on_gpu:  # its GPU work done before it waits at its gate, beside another's window
        torch.cuda.synchronize(device)
    setup_s = time.perf_counter() - t0
    hold_s = 0.0
    try:
        if spec.warm_only:  # the compiler cache is filled: nothing is measured here
            return {"warm_only": True, "setup_s": setup_s, "import_s": import_s}
        if spec.gate and distributed:
            ranks_ready(spec, ctx.rank, ctx.world_size)
        setup_ended_at = time.time()  # set up: from here it only waits at its gate
        if spec.gate:
            hold_s = wait_at_gate(spec, ctx.rank)
        _say_progress(spec, rf.WorkerState.WARMUP)
        warmup_started_at = time.time()
        planned = size.warmup_steps + workload.extra_warmup_steps
        warmup, warmup_s, est_step_s = _warm_up(spec, workload, planned, distributed, sync)
        # before the window and its capture range; ranks meet again at the all_reduce below
        t_probe = time.perf_counter()
        probe_before = _probe(spec, torch, device)
        probe_s = time.perf_counter() - t_probe
        n = window_steps(size.steps, est_step_s, spec.max_window_s, spec.min_steps)
        if spec.kineto is not None:  # a kineto unit records a few steps (kineto.max_steps)
            n = min(n, int(spec.kineto.get("max_steps", n)))
        if distributed:  # every rank must run the same number of steps
            agreed = torch.tensor([n], device=device)
            dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
            n = int(agreed.item())
        capture = capture_for(spec, torch, on_gpu, ctx.rank)
        step_ms, host_ms, window_s, stop_s, sched = _measure(
            spec, workload, torch, warmup, n, on_gpu, sync, capture
        )
        window_ended_at = time.time() - stop_s
        t_probe = time.perf_counter()
        probe_after = _probe(spec, torch, device)  # past the window and the capture range
        probe_s += time.perf_counter() - t_probe
        own = {
            "rank": ctx.rank, "pid": os.getpid(), "ppid": os.getppid(),
            "launch_to_main_s": launch_to_main_s(), "import_s": import_s,
            "import_torch_s": import_torch_s, "cuda_init_s": cuda_init_s, "setup_s": setup_s,
            "host_probe": probe_record(probe_before, probe_after),
            "sched": sched,
        }  # fmt: skip
        ranks = [own]
        if distributed:  # after the window: each rank's start-up, for timings.csv
            ranks = [{}] * ctx.world_size
            dist.all_gather_object(ranks, own)
        metrics = workload.metrics()
        if on_gpu:
            metrics.setdefault(
                "max_memory_allocated_gib", torch.cuda.max_memory_allocated() / 2**30
            )
    finally:
        workload.close()
        if distributed:
            dist.destroy_process_group()
    if distributed:
        leave_rendezvous(store, ctx.rank, ctx.world_size)
    _say_progress(spec, rf.WorkerState.TEARDOWN)

    timing = {
        "launch_to_main_s": launch_to_main_s(),
        "import_s": import_s,
        "import_torch_s": import_torch_s,
        "import_preload_s": import_preload_s,
        "import_scenarios_s": import_s - import_torch_s - import_preload_s,
        "cuda_init_s": cuda_init_s,
        "setup_s": setup_s,
        "hold_s": hold_s,
        "warmup_s": warmup_s,
        "window_s": window_s,
        "capture_stop_s": stop_s,
        "probe_s": probe_s,
        "kineto_start_s": capture.start_s if capture is not None else None,
        "kineto_write_s": capture.write_s if capture is not None else None,
        "setup_ended_at": setup_ended_at,
        "warmup_started_at": warmup_started_at,
        "window_ended_at": window_ended_at,
        "setup_stages_s": dict(ctx.extras.get("setup_stages_s", {})),
        "ranks": ranks,
        "finished_at": time.time(),
    }
    record = _record(spec, variant.kind, ctx, workload.samples_per_step, size.steps)
    record.update(
        warmup_steps=warmup, steps=n, step_ms=step_ms, host_step_ms=host_ms, window_s=window_s,
        throughput_samples_per_s=record["samples_per_step"] * n / window_s, setup_s=setup_s,
        warmup_s=warmup_s, timing=timing, metrics={k: float(v) for k, v in metrics.items()},
        host_probe=probe_record(probe_before, probe_after), sched=sched,
        env=_env_info(torch, device), started_utc=started.isoformat(),
        finished_utc=dt.datetime.now(dt.timezone.utc).isoformat(),
    )  # fmt: skip
    return record


def _record(
    spec: WorkerSpec, kind: str, ctx: Any, samples_per_step: int, planned: int
) -> dict[str, Any]:
    """result.json's fields in their order, with what identifies the run filled in."""
    keys = (
        "warmup_steps", "steps", "samples_per_step", "step_ms", "host_step_ms", "window_s",
        "throughput_samples_per_s", "steps_planned", "setup_s", "warmup_s", "timing", "metrics",
        "host_probe", "sched", "extras", "env", "started_utc", "finished_utc",
    )  # fmt: skip
    return {
        "scenario": spec.scenario,
        "variant": spec.variant,
        "kind": kind,
        "phase": spec.phase,
        "size": spec.size,
        "device": str(ctx.device),
        "rank": ctx.rank,
        "world_size": ctx.world_size,
        **dict.fromkeys(keys),
        "samples_per_step": samples_per_step * ctx.world_size,
        "steps_planned": planned,
        "extras": ctx.extras,
    }


def _probe(spec: WorkerSpec, torch: Any, device: Any) -> dict[str, float] | None:
    """The host-speed probes (launch rate, Python loop), or None when they are off."""
    if spec.probe_launches < 1:
        return None
    return host_probe(torch, device, spec.probe_launches, spec.probe_python_loop)


#: The fewest warm-up steps a time-capped warm-up keeps (harness.max_warmup_s).
MIN_WARMUP_STEPS = 4


def warmup_done(budget_s: float | None, steps_done: int, elapsed_s: float) -> bool:
    """End the warm-up early: only with a budget, past it, and after ``MIN_WARMUP_STEPS``."""
    return budget_s is not None and steps_done >= MIN_WARMUP_STEPS and elapsed_s > budget_s


def window_steps(steps: int, est_step_s: float, max_window_s: float | None, min_steps: int) -> int:
    """Measured steps: the size's ``steps``, or fewer when they would run past
    ``max_window_s`` (slow baselines, e.g. 1.3 s steps), but never fewer than ``min_steps``."""
    if max_window_s is None or est_step_s <= 0 or steps * est_step_s <= max_window_s:
        return steps
    return max(min(min_steps, steps), int(max_window_s / est_step_s))


def launch_to_main_s() -> float | None:
    """Seconds from the parent's launch (wrappers, interpreter start) to this module's import."""
    try:
        return _MODULE_LOADED_AT - float(os.environ[LAUNCHED_AT_ENV])
    except (KeyError, ValueError):
        return None


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    """The parent stops a worker with SIGTERM: unwind, so atomic writes remove their temp files.

    The parent signals the process group and then each process it knows, so a second SIGTERM
    can arrive while the first one unwinds; it must not raise again inside a ``finally`` or
    ``except`` block (that loses the exit code and can skip a temp file's removal).
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def _cap_memory(gib: float) -> None:
    """Cap the address space (set here, in the worker, so nsys and the parent stay uncapped)."""
    limit = int(gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _is_oom(exc: BaseException) -> bool:
    """MemoryError, torch's (CUDA) OutOfMemoryError, or the CPU allocator's RuntimeError."""
    if isinstance(exc, MemoryError):
        return True
    torch_mod = sys.modules.get("torch")
    if torch_mod is not None:  # torch.OutOfMemoryError is new in 2.5; torch.cuda's is older
        for cls in (torch_mod.cuda.OutOfMemoryError, getattr(torch_mod, "OutOfMemoryError", None)):
            if cls is not None and isinstance(exc, cls):
                return True
    return isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.execution.worker", description=__doc__)
    parser.add_argument("--spec", required=True, help="worker spec JSON written by the parent")
    args = parser.parse_args(argv)
    spec = WorkerSpec.load(args.spec)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if spec.memory_cap_gb is not None and spec.device == "cpu":
        _cap_memory(spec.memory_cap_gb)
    if spec.warm_only:
        _idle_priority()
    try:
        result = run(spec)
    except Exception as exc:
        if not _is_oom(exc):
            raise
        traceback.print_exc()
        detail = (str(exc).strip().splitlines() or [""])[-1][:300]
        print(f"{OOM_MARKER} {type(exc).__name__}: {detail}", file=sys.stderr, flush=True)
        return OOM_EXIT_CODE
    if result.get("warm_only"):
        print(
            f"{spec.scenario}/{spec.variant} [warm-up of the compiler cache] set up in "
            f"{result['setup_s']:.1f} s",
            flush=True,
        )
        return _leave(0)
    if result["rank"] == 0:
        write_json(Path(spec.out_dir) / rf.RESULT, result)
    print(
        f"{spec.scenario}/{spec.variant} [{spec.phase}] {result['steps']} steps, "
        f"median {sorted(result['step_ms'])[len(result['step_ms']) // 2]:.2f} ms/step, "
        f"{result['throughput_samples_per_s']:.1f} samples/s",
        flush=True,
    )
    told = (Path(spec.out_dir) / rf.EXIT_NORMALLY).exists()
    if not rf.is_profile(spec.phase) or (spec.exit_after_capture and not told):
        # Skip the interpreter's tear-down (seconds with torch loaded, per worker): the result
        # is on disk and the loaders are closed. A profiled worker does so only after its
        # capture range has stopped on a GPU (nsys has the capture then); otherwise it exits
        # normally so nsys gets every buffer flushed at exit.
        return _leave(0)
    return 0


def _leave(code: int) -> int:
    """Leave at once through ``os._exit`` (no interpreter tear-down), output flushed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _idle_priority() -> None:
    """A compiler-cache warm-up only uses CPU no one else wants: SCHED_IDLE where Linux has it
    (its compile workers inherit it), else the lowest nice level."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):
            os.nice(19)


if __name__ == "__main__":
    sys.exit(main())
