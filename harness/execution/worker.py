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
import gc
import importlib
import os
import platform
import resource
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core import runfolder as rf
from harness.core.atomic import write_json
from harness.execution.hostprobe import (
    SLICE_LAUNCHES,
    SliceProbe,
    host_probe,
    launch_probe,
    probe_record,
)
from harness.execution.kineto import capture_for
from harness.execution.rendezvous import (  # noqa: F401 - re-exported
    RDZV_FILE_ENV,
    forked_rendezvous,
    leave_rendezvous,
    ranks_ready,
    wait_at_gate,
)
from harness.execution.steps import (  # noqa: F401 - re-exported: the worker's surface
    MIN_WARMUP_STEPS,
    WINDOW_MARKER,
    measure_window,
    warm_up,
    warmup_done,
    window_steps,
)

#: Set by the parent when it starts a worker (epoch seconds), so the worker can say how long
#: the interpreter and its wrappers (nsys, torchrun) took to reach ``main``.
LAUNCHED_AT_ENV = "BOTTLENECK_LAUNCHED_AT"
_MODULE_LOADED_AT = time.time()

#: Exit code of a worker that ran out of memory (host RAM cap or CUDA), so the parent records
#: 'oom' rather than a generic failure. Wrappers (nsys, torchrun) may change the code, so the
#: worker also prints OOM_MARKER on stderr, which the parent looks for as well.
OOM_EXIT_CODE = 3
OOM_MARKER = "harness-worker: out of memory:"


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
    slice_probes: bool = False
    """harness.timing.slice_probes: probe the host before and after every slice of a sliced
    round (:class:`harness.execution.hostprobe.SliceProbe`)."""
    turn_gate: str | None = None
    """A timing worker of a sliced round (harness.timing.slices): the parent's turn gate, a
    Unix socket it connects to once set up, then runs the warm-up, the slices and the end it
    is sent (:mod:`harness.execution.turns`) instead of waiting for ``.go``."""
    cpus: dict[str, Any] | None = None
    """A sliced round's CPU plan (:class:`harness.execution.pinning.CpuPlan` as a record:
    ``loop``, ``helpers``); None: nothing pinned."""
    warmup_min_steps: int = MIN_WARMUP_STEPS
    """The fewest warm-up steps a time-capped warm-up keeps in a sliced round
    (harness.timing.warmup_min_steps; the back-to-back window keeps ``MIN_WARMUP_STEPS``)."""
    kineto: dict[str, Any] | None = None
    """A kineto unit's PyTorch Profiler settings (the ``kineto`` config section): the window
    runs under ``torch.profiler`` and every rank writes its trace; None: no profiler."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Reserved for scenario-specific launch facts."""

    @classmethod
    def load(cls, path: str | Path) -> WorkerSpec:
        return cls(**rf.read_json(path, required=True))


def _say_progress(spec: WorkerSpec, state: rf.WorkerState, stage: str | None = None) -> None:
    """Rewrite ``.progress.json`` (rank 0; a failed write is ignored: progress is a hint)."""
    if not (spec.report_progress or spec.gate) or os.environ.get("RANK", "0") != "0":
        return
    record = {"state": state.value, "stage": stage, "at": time.time(), "pid": os.getpid()}
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


@dataclass
class _Built:
    """A worker's workload, built and set up, with what it needs to run steps."""

    torch: Any
    device: Any
    ctx: Any
    variant: Any
    size: Any
    workload: Any
    distributed: bool
    dist: Any
    store: Any
    on_gpu: bool
    started: dt.datetime
    timing: dict[str, Any]
    """The start-up's parts so far (import, CUDA context, set-up seconds)."""

    def sync(self) -> None:
        """The GPU's work done, and every rank at the same point."""
        if self.on_gpu:
            self.torch.cuda.synchronize(self.device)
        if self.distributed:
            self.dist.barrier()


def _build(spec: WorkerSpec) -> _Built:
    """Import, make the device and the workload, and set it up (its GPU work synchronised
    before it waits at its gate, beside another worker's window)."""
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
        device=device, size_name=spec.size, seed=spec.seed, cache_dir=Path(spec.cache_dir),
        rank=int(os.environ.get("RANK", "0")), world_size=int(os.environ.get("WORLD_SIZE", "1")),
    )  # fmt: skip
    _publish_stages(spec, ctx)
    distributed, dist, store = ctx.world_size > 1, None, None
    if distributed:
        import torch.distributed as dist

        store = forked_rendezvous(spec, dist, ctx.rank, ctx.world_size)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    built = _Built(
        torch=torch, device=device, ctx=ctx, variant=variant, size=size,
        workload=build(cfg, size, variant.name, ctx), distributed=distributed, dist=dist,
        store=store, on_gpu=device.type == "cuda", started=started,
        timing={"import_s": import_s, "import_torch_s": import_torch_s,
                "import_preload_s": import_preload_s, "cuda_init_s": cuda_init_s},
    )  # fmt: skip
    t0 = time.perf_counter()
    built.workload.setup()
    if built.on_gpu:  # its GPU work done before it waits at its gate, beside another's window
        torch.cuda.synchronize(device)
    built.timing["setup_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    built.timing["heap_frozen_objects"] = settle_heap()
    built.timing["settle_s"] = time.perf_counter() - t0
    return built


def settle_heap() -> int:
    """Collect the set-up's garbage and freeze what survives, before the warm-up.

    The import and the set-up leave a large heap pending for Python's oldest generation; its
    first full collection, at a step set by the allocation count, stops the loop for as long as
    it takes to walk the heap (touching every page a forked worker shares with its server). A
    short window catches that once and reads it as the variant's speed. Done here it costs the
    set-up, and later full collections walk only what the loop itself keeps (a forked worker's
    imports were frozen by its fork server: this walks its set-up's objects). Returns how many
    objects were frozen (result.json's ``timing``)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@dataclass
class _Window:
    """What a worker measured, back to back or in slices."""

    warmup: int
    warmup_s: float
    step_ms: list[float]
    host_ms: list[float]
    window_s: float
    stop_s: float
    sched: dict[str, Any] | None
    probe_before: dict[str, float] | None
    probe_after: dict[str, float] | None
    probe_s: float
    hold_s: float
    warmup_started_at: float
    window_ended_at: float
    kineto: Any = None
    slices: dict[str, Any] | None = None


def _planned_warmup(b: _Built) -> int:
    return b.size.warmup_steps + b.workload.extra_warmup_steps


def _gated_window(spec: WorkerSpec, b: _Built) -> _Window:
    """The back-to-back window: wait at the gate, warm up, probe, measure, probe."""
    say = lambda state: _say_progress(spec, state)  # noqa: E731
    hold_s = wait_at_gate(spec, b.ctx.rank, say) if spec.gate else 0.0
    _say_progress(spec, rf.WorkerState.WARMUP)
    warmup_started_at = time.time()
    budget = None if b.distributed else spec.max_warmup_s
    warmup, warmup_s, est_step_s = warm_up(b.workload, _planned_warmup(b), b.sync, budget)
    # before the window and its capture range; ranks meet again at the all_reduce below
    t_probe = time.perf_counter()
    probe_before = _probe(spec, b.torch, b.device)
    probe_s = time.perf_counter() - t_probe
    n = whole_periods(
        window_steps(b.size.steps, est_step_s, spec.max_window_s, spec.min_steps), b.workload
    )
    if spec.kineto is not None:  # a kineto unit records a few steps (kineto.max_steps)
        n = min(n, int(spec.kineto.get("max_steps", n)))
    if b.distributed:  # every rank must run the same number of steps
        agreed = b.torch.tensor([n], device=b.device)
        b.dist.all_reduce(agreed, op=b.dist.ReduceOp.MIN)
        n = int(agreed.item())
    capture = capture_for(spec, b.torch, b.on_gpu, b.ctx.rank)
    step_ms, host_ms, window_s, stop_s, sched = measure_window(
        spec, b.workload, b.torch, warmup, n, b.on_gpu, b.sync,
        lambda state: _say_progress(spec, state), capture,
    )  # fmt: skip
    window_ended_at = time.time() - stop_s
    t_probe = time.perf_counter()
    probe_after = _probe(spec, b.torch, b.device)  # past the window and the capture range
    probe_s += time.perf_counter() - t_probe
    return _Window(
        warmup=warmup, warmup_s=warmup_s, step_ms=step_ms, host_ms=host_ms, window_s=window_s,
        stop_s=stop_s, sched=sched, probe_before=probe_before, probe_after=probe_after,
        probe_s=probe_s, hold_s=hold_s, warmup_started_at=warmup_started_at,
        window_ended_at=window_ended_at, kineto=capture,
    )  # fmt: skip


def whole_periods(n: int, workload: Any) -> int:
    """``n`` steps rounded down to whole periods of the workload's periodic work
    (``Workload.period_steps``: a checkpoint every N steps), at least one period: a window
    holds the periodic work as often as the loop does."""
    period = max(1, int(getattr(workload, "period_steps", 1) or 1))
    return max(period, n // period * period)


def _sliced_window(spec: WorkerSpec, b: _Built) -> _Window:
    """A sliced round's window: connect to the parent's turn gate and run what it sends
    (:mod:`harness.execution.turns`)."""
    from harness.execution.gate import connect
    from harness.execution.pinning import CpuPlan
    from harness.execution.turns import Turns, run_turns

    assert spec.turn_gate is not None
    _say_progress(spec, rf.WorkerState.HELD)  # before the parent can stop it (on hello)
    chan = connect(spec.turn_gate, spec.out_dir)
    cpus = CpuPlan(int(spec.cpus["loop"]), tuple(spec.cpus["helpers"])) if spec.cpus else None
    turns = Turns(
        channel=chan, workload=b.workload, torch=b.torch, on_gpu=b.on_gpu, sync=b.sync,
        warm_up=lambda: warm_up(
            b.workload, _planned_warmup(b), b.sync, spec.max_warmup_s,
            max(spec.warmup_min_steps, b.workload.extra_warmup_steps),
        ),
        probe=lambda: _probe(spec, b.torch, b.device),
        window_steps=lambda est: window_steps(b.size.steps, est, spec.max_window_s,
                                              spec.min_steps),
        say=lambda state: _say_progress(spec, state),
        parent_alive=lambda: spec.parent_pid is None or rf.pid_alive(spec.parent_pid),
        timeout_s=spec.gate_timeout_s, cpus=cpus,
        slice_probe=_slice_prober(cpus, b) if spec.slice_probes else None,
    )  # fmt: skip
    try:
        got = run_turns(turns)
    finally:
        chan.close()
    ended = got.slice_end_s[-1] if got.slice_end_s else time.monotonic()
    return _Window(
        warmup=got.warmup_steps, warmup_s=got.warmup_s, step_ms=got.step_ms,
        host_ms=got.host_ms, window_s=got.window_s, stop_s=0.0, sched=got.sched,
        probe_before=got.probe_before, probe_after=got.probe_after, probe_s=got.probe_s,
        hold_s=got.held_s, warmup_started_at=got.warmup_started_at or time.time(),
        window_ended_at=time.time() - (time.monotonic() - ended),
        slices=got.slices_record(),
    )  # fmt: skip


def run(spec: WorkerSpec) -> dict[str, Any]:
    """Build, warm up, measure; return the result record (also written to result.json)."""
    b = _build(spec)
    try:
        if spec.warm_only:  # the compiler cache is filled: nothing is measured here
            return {"warm_only": True, "setup_s": b.timing["setup_s"],
                    "import_s": b.timing["import_s"]}  # fmt: skip
        if spec.gate and b.distributed:
            ranks_ready(spec, b.ctx.rank, b.ctx.world_size)
        setup_ended_at = time.time()  # set up: from here it only waits at its gate
        sliced = spec.turn_gate is not None and not b.distributed
        w = _sliced_window(spec, b) if sliced else _gated_window(spec, b)
        own = {
            "rank": b.ctx.rank, "pid": os.getpid(), "ppid": os.getppid(),
            "launch_to_main_s": launch_to_main_s(), "import_s": b.timing["import_s"],
            "import_torch_s": b.timing["import_torch_s"],
            "cuda_init_s": b.timing["cuda_init_s"], "setup_s": b.timing["setup_s"],
            "host_probe": probe_record(w.probe_before, w.probe_after), "sched": w.sched,
        }  # fmt: skip
        ranks = [own]
        if b.distributed:  # after the window: each rank's start-up, for timings.csv
            ranks = [{}] * b.ctx.world_size
            b.dist.all_gather_object(ranks, own)
        metrics = b.workload.metrics()
        if b.on_gpu:
            metrics.setdefault(
                "max_memory_allocated_gib", b.torch.cuda.max_memory_allocated() / 2**30
            )
    finally:
        b.workload.close()
        if b.distributed:
            b.dist.destroy_process_group()
    if b.distributed:
        leave_rendezvous(b.store, b.ctx.rank, b.ctx.world_size)
    _say_progress(spec, rf.WorkerState.TEARDOWN)
    return _result(spec, b, w, setup_ended_at, ranks, metrics)


def _result(
    spec: WorkerSpec,
    b: _Built,
    w: _Window,
    setup_ended_at: float,
    ranks: list[dict[str, Any]],
    metrics: dict[str, Any],
) -> dict[str, Any]:
    """The result record (result.json) of a worker that measured ``w``."""
    capture = w.kineto
    timing = {
        "launch_to_main_s": launch_to_main_s(),
        **{k: b.timing[k] for k in ("import_s", "import_torch_s", "import_preload_s")},
        "import_scenarios_s": b.timing["import_s"] - b.timing["import_torch_s"]
        - b.timing["import_preload_s"],
        "cuda_init_s": b.timing["cuda_init_s"], "setup_s": b.timing["setup_s"],
        "settle_s": b.timing["settle_s"], "heap_frozen_objects": b.timing["heap_frozen_objects"],
        "hold_s": w.hold_s, "warmup_s": w.warmup_s, "window_s": w.window_s,
        "capture_stop_s": w.stop_s, "probe_s": w.probe_s,
        "kineto_start_s": capture.start_s if capture is not None else None,
        "kineto_write_s": capture.write_s if capture is not None else None,
        "setup_ended_at": setup_ended_at, "warmup_started_at": w.warmup_started_at,
        "window_ended_at": w.window_ended_at,
        "setup_stages_s": dict(b.ctx.extras.get("setup_stages_s", {})),
        "ranks": ranks, "finished_at": time.time(),
    }  # fmt: skip
    n = len(w.step_ms)
    record = _record(spec, b.variant.kind, b.ctx, b.workload.samples_per_step, b.size.steps)
    record.update(
        warmup_steps=w.warmup, steps=n, step_ms=w.step_ms, host_step_ms=w.host_ms,
        window_s=w.window_s,
        throughput_samples_per_s=record["samples_per_step"] * n / w.window_s,
        setup_s=b.timing["setup_s"], warmup_s=w.warmup_s, timing=timing,
        metrics={k: float(v) for k, v in metrics.items()},
        host_probe=probe_record(w.probe_before, w.probe_after), sched=w.sched,
        env=_env_info(b.torch, b.device), started_utc=b.started.isoformat(),
        finished_utc=dt.datetime.now(dt.timezone.utc).isoformat(),
    )  # fmt: skip
    if w.slices is not None:
        record["slices"] = w.slices
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


def _slice_prober(cpus: Any, b: _Built) -> Callable[[], dict[str, float]]:
    """The probe run around each slice: on the loop's core, on the first helper core where
    threads are pinned (the cores a GIL-holding thread or a loader worker runs on), and the
    launch rate on the worker's device."""
    helper = cpus.helpers[0] if cpus is not None and cpus.helpers else None
    return SliceProbe(helper, lambda: launch_probe(b.torch, b.device, SLICE_LAUNCHES))


def _probe(spec: WorkerSpec, torch: Any, device: Any) -> dict[str, float] | None:
    """The host-speed probes (launch rate, Python loop), or None when they are off."""
    if spec.probe_launches < 1:
        return None
    return host_probe(torch, device, spec.probe_launches, spec.probe_python_loop)


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


#: What an out-of-memory error says where it comes as a plain RuntimeError: the CPU allocator,
#: CUDA seen from a library (cuBLAS's workspace, a CUDA error raised outside the allocator).
_OOM_TEXTS = (
    "can't allocate memory",
    "CUDA out of memory",
    "CUDA error: out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
)


def _is_oom(exc: BaseException) -> bool:
    """MemoryError, torch's (CUDA) OutOfMemoryError, or a RuntimeError saying it ran out
    (:data:`_OOM_TEXTS`); also where one is the cause of another (torch.compile wraps the
    errors of what it compiles)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if _is_oom_one(exc):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


#: What a line that says the memory ran out contains (case aside).
_OOM_SAID = ("out of memory", "can't allocate memory", "ALLOC_FAILED")


def oom_line(exc: BaseException) -> str:
    """The line of the error's message that says it ran out (CUDA's errors end in advice
    about device-side assertions, not in what happened), else its first line; 300 characters."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()] or [""]
    said = [ln for ln in lines if any(t.lower() in ln.lower() for t in _OOM_SAID)]
    return (said or lines)[0][:300]


def _is_oom_one(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    torch_mod = sys.modules.get("torch")
    if torch_mod is not None:  # torch.OutOfMemoryError is new in 2.5; torch.cuda's is older
        for cls in (torch_mod.cuda.OutOfMemoryError, getattr(torch_mod, "OutOfMemoryError", None)):
            if cls is not None and isinstance(exc, cls):
                return True
    return isinstance(exc, RuntimeError) and any(t in str(exc) for t in _OOM_TEXTS)


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
        print(f"{OOM_MARKER} {type(exc).__name__}: {oom_line(exc)}", file=sys.stderr, flush=True)
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
