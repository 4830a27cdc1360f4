"""The ``diagnosis`` config group's sections: one keyword-only dataclass per detector (its
thresholds), plus the steady-state window, the host reading, the time model and the nsys
expert-rules cross-check.

Every field is checked by the unit in its name (``*_share`` in 0..1, durations > 0, other
numbers >= 0, names non-empty), so adding a threshold is one field with a default and a
docstring. The group itself (:class:`analysis.detect.config.DiagnosisConfig`, which holds one
field per section, and the loaders) is in :mod:`analysis.detect.config`, which re-exports every
section: import them from either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from bottlenecks import Klass

__all__ = [
    "AllocatorChurnThresholds",
    "BlockingIoThresholds",
    "DataStallThresholds",
    "ExpertRulesConfig",
    "ExposedCommThresholds",
    "Fp32MathThresholds",
    "GilContentionThresholds",
    "HostSyncThresholds",
    "HostThresholds",
    "LaunchBoundThresholds",
    "LayoutTransposeThresholds",
    "PageableCopyThresholds",
    "PredictConfig",
    "StageImbalanceThresholds",
    "UnfusedElementwiseThresholds",
    "WindowThresholds",
]


_DURATION_SUFFIXES = ("_ns", "_us", "_ms", "_s")


def _check_threshold(key: str, value: Any) -> None:
    """Validate one threshold by the unit in its name (raises ValueError naming key and range)."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"{key} must be a finite number, got {value}")
        if key.endswith("_share") and not 0.0 <= value <= 1.0:
            raise ValueError(f"{key} must be in 0..1 (a share), got {value}")
        if key.endswith(_DURATION_SUFFIXES) and value <= 0:
            raise ValueError(f"{key} must be > 0 (a duration), got {value}")
        if value < 0:
            raise ValueError(f"{key} must be >= 0, got {value}")
    elif isinstance(value, str) and not value.strip():
        raise ValueError(f"{key} must be a non-empty name, got {value!r}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_threshold(f"{key}[{i}]", item)


@dataclass(kw_only=True)
class _Section:
    """One section of ``diagnosis``, checked field by field from the unit in each name.

    ``*_share``: 0..1; durations ``*_ns``, ``*_us``, ``*_ms``, ``*_s``: > 0; any other number
    (counts, rates, ratios): >= 0 and finite; strings (and list items): non-empty; None and bools
    pass. A section whose fields need more (one bound below another, say) adds ``_check``.
    """

    SECTION: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            _check_threshold(f"diagnosis.{self.SECTION}.{f.name}", getattr(self, f.name))
        self._check()

    def _check(self) -> None:
        """Checks the naming rules cannot express; none by default."""

    def _refuse(self, key: str, must: str) -> None:
        """Raise the one error of a value the naming rules let through: what it ``must`` be."""
        value = getattr(self, key)
        raise ValueError(f"diagnosis.{self.SECTION}.{key} must be {must}, got {value}")


@dataclass(kw_only=True)
class WindowThresholds(_Section):
    """The steady-state window every detector judges."""

    SECTION: ClassVar[str] = "window"
    use_nvtx: bool = True
    """Use the harness' NVTX ``measure``/``step`` ranges when the report has them."""
    find_iterations: bool = True
    """Without them: find repeating iterations in the GPU work (else in NVTX ranges of any name)
    and judge only those, leaving start-up (compile, autotuning, loader start) out."""
    min_repeats: int = 5
    """An iteration must repeat at least this often to count as the steady state."""
    skip_iterations: int = 1
    """Steady iterations dropped at the start (allocator, caches still warming)."""
    outlier_factor: float = 3.0
    """Leading or trailing iterations longer than this times the median are dropped (a compile
    inside the first repeat, a tear-down after the last)."""
    stall_factor: float = 5.0
    """An iteration in the window's first part (``stall_lead_share``) that takes over this many
    times the median and over this many times every iteration after it is a one-off warm-up
    stall (a lazy init, a first-call compile, the allocator growing): the window starts after
    it. A stall that recurs (periodic work: a checkpoint, an eval every N steps) has a later
    one as long and stays; so does one holding the window's periodic writes
    (``period_calls``)."""
    stall_lead_share: float = 0.5
    """The share of the window's first iterations in which a one-off stall may be left out
    (later, the loop has settled: a stall there is the loop's own)."""
    period_calls: list[str] = field(
        default_factory=lambda: [
            *("write", "writev", "pwrite", "pwrite64", "pwritev", "pwritev2", "fwrite"),
            *("fsync", "fdatasync", "msync", "sync_file_range"),
        ]
    )
    """OS-runtime calls of the loop thread's periodic work (a checkpoint, a dump every N
    steps): the window keeps whole periods of their runs (:mod:`analysis.detect.view._periods`)."""
    period_gap_ms: float = 15.0
    """Periodic writes at most this far apart are one run (one save)."""
    min_period_run_ms: float = 1.0
    """Write runs shorter than this are no periodic work worth a period (a log line)."""
    min_cover_share: float = 0.3
    """The repeating iterations must hold at least this share of a stream's GPU items (less:
    what repeats is a detail, such as one layer's kernels, not the loop)."""
    min_local_cover_share: float = 0.9
    """... or at least this share of the items from their first repeat to their last: a short
    loop after a long autotuning or compile phase holds few of the stream's items but nearly all
    of its own stretch."""
    anchor_candidates: int = 0
    """How many GPU item codes, the most frequent first, are tried as an iteration's anchor; 0:
    every code that occurs ``min_repeats`` + 1 times. A kernel that runs once a step is rare
    beside each layer's kernels and an autotuner's or compiler's trial runs of them: on a
    whole-process capture of a 50-step loop after cuDNN autotuning (corpus
    ``clean_cudnn_short``) the first of them ranked 55th of 216 codes, and the 24 most frequent
    held no step anchor."""
    streams: int = 3
    """The busiest streams of the busiest GPU searched for repeats."""
    min_device_share: float = 0.3
    """The stream whose repeats are the loop must hold at least this share of the busiest
    GPU's items from their first repeat to their last (less: a side stream's detail, such as a
    cuDNN handle's few identical memsets spread over an autotuning phase). On the corpus and
    the fixtures the loop's stream holds 0.47 to 1 of them."""
    max_after_share: float = 0.5
    """... and at most this share of the busiest GPU's items from their first repeat on may
    follow their last (more: a phase the program left, such as a weight upload's copies or a
    compiler's trial runs, not the loop it settles into). On the corpus and the fixtures at
    most 0.11 follow the loop. Repeats followed by a later run of repeats that takes longer
    are such a phase too. Where every run of repeats found fails these rules, the report is not
    judged rather than judged on the span of GPU activity (mostly start-up)."""
    startup_skip_share: float = 0.2
    """Last resort, when nothing repeats: drop this share of the span from the first kernel (or
    first activity) to the last as start-up."""
    burst_gap_items: int = 4
    """Varying loops (:mod:`analysis.detect.view._bursts`): occurrences of a kernel at most this
    many GPU items apart on its stream are one burst (a foreach optimizer's chunks)."""
    max_burst_spread: float = 0.5
    """Varying loops: the items from one burst to the next may vary by at most this share of
    their median (coefficient of variation) for the bursts to be the loop's rhythm."""
    prefer_bursts_span: float = 1.5
    """A rhythm of bursts spanning at least this many times the span of the exactly repeating
    iterations is the loop (those repeats are the steps without the periodic work)."""
    min_call_ns: int = 1000
    """CUDA API calls shorter than this that neither launch, wait, copy, set nor allocate are
    not read: they hold no host time worth a verdict, and on PyTorch 2.11 captures a
    ``cuKernelGetName`` before every launch is half of the API table. 1 reads every call."""

    def _check(self) -> None:
        if self.startup_skip_share >= 1.0:
            self._refuse(
                "startup_skip_share", "in 0..1 (exclusive of 1: something must be left to judge)"
            )


@dataclass(kw_only=True)
class DataStallThresholds(_Section):
    """data_stall: the GPU waits while the host loads the next batch."""

    SECTION: ClassVar[str] = Klass.DATA_STALL
    range_name: str = "data_load"
    """NVTX range the harness wraps batch loading in: reported (``data_load_share``) where the
    capture has it, never what decides."""
    min_data_load_share: float | None = None
    """CPU captures: the training thread's input runs (``input_work_share``) cover at least
    this share of the window. On the training thread they run between its compute, so their
    share is the saving of removing them: None (the default) holds it to ``min_saving_share``,
    the bar of a GPU capture's predicted saving and of the measured truth."""
    cpu_input_gap_ms: float = 10.0
    """CPU captures: consecutive file reads and queue waits of the training thread at most this
    far apart belong to one input run (the gap: decoding and augmenting the item just read);
    farther apart, the thread did other work (forward, backward) in between."""
    cpu_wait_calls: list[str] = field(
        default_factory=lambda: [
            *("poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait"),
            *("recv", "recvfrom", "recvmsg"),
        ]
    )
    """CPU captures: OS-runtime calls in which the training thread waits for loader workers
    (a DataLoader's queue is a pipe it polls and receives from). Sleeps and semaphore or
    condition waits are left out: on a CPU capture they are a thread pool's or the GIL's."""
    min_saving_share: float = 0.15
    """GPU captures: the saving the time model predicts for the input work removed, ``1 - 1 /
    predicted_speedup``, is at least this share of the step (~1.18x)."""


@dataclass(kw_only=True)
class HostThresholds(_Section):
    """How the main thread's time is read (analysis/detect/view/_host.py), for data_stall,
    launch_bound and host_sync alike."""

    SECTION: ClassVar[str] = "host"
    stretch_ms: float = 1.0
    """A stretch without CUDA calls at least this long is host work, not launch overhead."""
    min_launch_share: float = 0.02
    """Threads launching at least this share of the loop's work onto its streams issue it
    (the main thread and PyTorch's autograd thread)."""
    file_calls: list[str] = field(
        default_factory=lambda: [
            *("read", "pread64", "pread", "readv", "preadv", "fread"),
            *("open", "open64", "openat", "openat64", "fopen", "fopen64"),
        ]
    )
    """OS-runtime calls in a stretch that mean the host reads input."""
    write_calls: list[str] = field(
        default_factory=lambda: [
            *("write", "writev", "pwrite", "pwrite64", "pwritev", "pwritev2", "fwrite"),
            *("fsync", "fdatasync", "msync", "sync_file_range", "fflush"),
        ]
    )
    """OS-runtime calls that write files (a checkpoint, a log): a stretch that writes more
    than it reads is output, never input work (blocking_io's)."""
    min_wait_share: float = 0.3
    """OS-runtime waits on other threads or processes (queue, pipe, semaphore) covering at
    least this share of a stretch mean the host waits for input."""
    min_read_share: float = 0.05
    """File reads mean the host reads input only when they cover at least this share of the
    stretch or number ``min_reads`` calls in it (a batch's files): a few small opens and reads
    in a long stretch (a library's or the runtime's own, a config file) are not an input
    pipeline, whose reads take time or come by the batch."""
    min_reads: int = 24
    h2d_lookahead_calls: int = 8
    """A host-to-device copy among this many CUDA calls after a stretch, before any kernel
    launch: the new batch (pinning it makes a few calls of its own first)."""
    data_hints: list[str] = field(
        default_factory=lambda: [
            *("data", "load", "fetch", "input", "decode", "augment", "prefetch", "collate"),
        ]
    )
    """User NVTX range names (substrings) that mark input work: hints, never required."""
    blocked_calls: list[str] = field(default_factory=lambda: ["pthread_cond_wait"])
    """OS-runtime calls in which the main thread sleeps until another thread of its process
    wakes it (an untimed condition wait: DDP's main thread while its backward and collectives
    run elsewhere), read with the input evidence. In a host stretch the time model keeps this
    time when it removes the host's own work (launch_bound): an instant host still waits."""


@dataclass(kw_only=True)
class PageableCopyThresholds(_Section):
    """pageable_copy: host-to-device copies from pageable memory."""

    SECTION: ClassVar[str] = Klass.PAGEABLE_COPY
    min_saving_share: float = 0.15
    """Removing the pageable HtoD copies (pinned memory and a side stream hide them) would save
    at least this share of the step (~1.18x), the same bar as the other classes."""


@dataclass(kw_only=True)
class LaunchBoundThresholds(_Section):
    """launch_bound: kernels too short to hide their launch cost."""

    SECTION: ClassVar[str] = Klass.LAUNCH_BOUND
    max_gap_us: float = 50.0
    """Reported: an idle gap shorter than this, waiting on the kernel's launch call, is a launch
    gap (``launch_gap_share``)."""
    min_saving_share: float = 0.25
    """A host that issued work instantly would save at least this share of the step (the
    time model's predicted saving)."""


@dataclass(kw_only=True)
class HostSyncThresholds(_Section):
    """host_sync: blocking device-to-host synchronisations that drain the GPU's queue."""

    SECTION: ClassVar[str] = Klass.HOST_SYNC
    min_syncs_per_step: float = 1.0
    """At least this many blocking syncs per step ..."""
    min_syncs_per_s: float = 10.0
    """... or, without NVTX steps, this many per second."""
    min_saving_share: float = 0.15
    """Without the syncs the step would shrink by at least this share (~1.18x; the time
    model's predicted saving)."""


@dataclass(kw_only=True)
class ExposedCommThresholds(_Section):
    """exposed_comm: collective time not overlapped by compute."""

    SECTION: ClassVar[str] = Klass.EXPOSED_COMM
    min_nccl_exposed_share: float = 0.1
    """Mean, over the GPUs that run NCCL, of each one's NCCL *transfer* time (the part of its NCCL
    kernels after the last participant arrived) not overlapped by its own compute, as a share of
    the window: removing the communication would save this share. The part of a kernel before
    the last participant arrived is a wait, charged to what the late rank was doing."""
    match_margin_ms: float = 500.0
    """NCCL kernels are read this far beyond the window, so that a peer's kernel that started
    before the window (or a rank whose window is offset from another's) is still matched."""
    min_lane_match_share: float = 0.25
    """Two GPUs' NCCL streams are one communicator's when at least this share of their kernels,
    paired in order, have the same name, overlap in time and end together. Not all of them do: a
    small send completes into the receiver's buffer before the receive starts
    (docs/detectors.md, "Measurements behind the code")."""
    max_align_offset: int = 8
    """Kernels by which two ranks' NCCL streams may be offset where the capture cut them."""
    max_end_skew_us: float = 250.0
    """Two ranks' kernels of one operation end within this of each other (a collective or a
    message completes on every rank at about the same moment, a large send and its receive
    included: docs/detectors.md, "Measurements behind the code")."""
    min_work_ratio: float = 1.15
    """A late rank whose host was issuing work (not blocked, not in a long host stretch) had more
    work than the rank that waited for it when it ran at least this many times as many kernels
    in the window (unequal work: stage_imbalance); fewer, and the wait is the collectives'
    coupling of equal ranks: communication."""


@dataclass(kw_only=True)
class GilContentionThresholds(_Section):
    """gil_contention: the launching thread waits for the GIL held by another Python thread."""

    SECTION: ClassVar[str] = Klass.GIL_CONTENTION
    min_saving_share: float = 0.15
    """GPU captures: without the GIL waits the step would shrink by at least this share
    (~1.18x; the time model's predicted saving)."""
    min_cpu_wait_share: float = 0.15
    """CPU captures (no GPU activity, the suite's steps): the step thread's GIL waits cover at
    least this share of step time."""
    trace_domain: str = "GIL Trace"
    """NVTX domain in which nsys's ``--trace=python-gil`` (2024+) records the GIL."""
    wait_ranges: list[str] = field(default_factory=lambda: ["Waiting for GIL"])
    """Range names of that domain during which a thread waits to take the GIL."""
    hold_ranges: list[str] = field(default_factory=lambda: ["Holding GIL"])
    """Range names of that domain during which a thread holds the GIL."""
    wait_calls: list[str] = field(
        default_factory=lambda: ["pthread_cond_timedwait", "pthread_cond_clockwait"]
    )
    """Without a GIL trace: the OS-runtime calls in which CPython waits for the GIL (a timed
    condition wait of one switch interval per call; Python's queues and locks use semaphores)."""
    max_call_ms: float = 200.0
    """A wait call longer than this is not a GIL wait: CPython waits one switch interval (5 ms)
    per call before it asks the holder to let go, then waits again (on a CPU box shared with
    busy processes a call was seen to last 64 ms before the thread ran again)."""
    switch_interval_ms: float = 5.0
    """CPython's switch interval (``sys.getswitchinterval()``): a GIL wait that the holder does
    not end times out after it."""
    max_timeout_late_share: float = 1.0
    """A timed-out GIL wait returns after one interval plus the time its woken thread waits for
    a core: up to this share of an interval later still counts as timed out. On a loaded box
    that wait is most of an interval, and a tighter band reads the GIL's own timeouts as
    something else (docs/detectors.md, "Measurements behind the code")."""
    min_timeout_share: float = 0.2
    """Without a GIL trace, the thread's wait calls of at least 1 ms are GIL waits only if at
    least this share of them time out and wait again: last one switch interval (-2%, up to
    ``max_timeout_late_share`` later) and are followed by the thread's next wait call within
    ``max_rewait_us``. CPython's GIL waits
    do that while another thread holds the GIL; a peer's or a queue's waits (gloo's receive, a
    loader's queue) end when their data comes and the thread works before it waits again (0 of
    39 on a CPU pipeline capture, where 3 lasted one interval; 15 of 27 on the gil_contention
    baseline's)."""
    max_rewait_us: float = 200.0
    """A timed-out GIL wait is followed by the next wait call of its thread within this (6-16
    us on the CPU gil_contention baseline); a receive that happened to last one interval is
    followed by the step's compute (milliseconds)."""


@dataclass(kw_only=True)
class StageImbalanceThresholds(_Section):
    """stage_imbalance: one pipeline rank idles, waiting to receive, while the other computes."""

    SECTION: ClassVar[str] = Klass.STAGE_IMBALANCE
    min_saving_share: float = 0.15
    """Balancing the stages would save at least this share of the window (~1.18x)."""
    max_lockstep_share: float = 0.5
    """At most this share of the least busy rank's waits may end while the busiest rank waits
    too. A collective (DDP's all-reduce) ends for every rank at once, so ranks in lockstep wait
    together at its end (0.63-0.75 on CPU DDP captures); a pipeline receive ends when the peer
    sends, and the peer goes on computing (0.08-0.20 on the imbalanced corpus pipelines)."""
    lockstep_window_us: float = 300.0
    """How close to the end of a wait the busiest rank's own wait must be to count as one."""
    min_idle_us: float = 1000.0
    """Waits of the least busy rank shorter than this are not read for lockstep (hand-offs)."""
    wait_calls: list[str] = field(
        default_factory=lambda: [
            *("pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait"),
        ]
    )
    """CPU reports: OS-runtime calls of a rank's main thread that are waits for a peer
    (torch.distributed's gloo backend blocks in a condition variable in ``recv`` and ``wait()``)."""
    min_wait_us: float = 10.0
    """CPU reports: shorter waits are not read (a condition variable that was already set)."""
    min_waits: int = 4
    """CPU reports: a process is a rank only with at least this many waits in the window."""
    min_rank_busy_share: float = 0.10
    """CPU reports: a process computing less than this share of the window (a launcher such as
    torchrun's agent, or the suite's profile server waiting for the worker it forked) is no
    rank; a pipeline's light stage computes far more (tests/test_stage_imbalance.py)."""


@dataclass(kw_only=True)
class Fp32MathThresholds(_Section):
    """fp32_math: GEMMs and convolutions on the SIMT FMA pipe in fp32 (off the tensor cores) or
    in TF32 (at half their bf16 rate)."""

    SECTION: ClassVar[str] = Klass.FP32_MATH
    min_saving_share: float = 0.15
    """Running those GEMMs and convolutions at the bf16 tensor-core rate would save at least
    this share of the step (~1.18x), the same bar as the other classes."""
    tensor_rate: float = 0.0
    """How many times faster an fp32 FMA GEMM or convolution runs in bf16 on the tensor cores
    (the prediction's rate); 0: the GPU's own ratio (``_gpu_causes.TENSOR_OVER_FMA``, by the
    export's compute capability, ``default_tensor_rate`` where it names none)."""
    tensor_efficiency: float = 1.0
    """Of the GPU's peak ratio (bf16 tensor cores over fp32 FMA), the part a fix reaches."""
    default_tensor_rate: float = 12.0
    """The rate where the export names no GPU the table knows."""
    tf32_rate: float = 0.0
    """How many times faster a TF32 tensor-core GEMM or convolution runs in bf16 (the
    prediction's rate); 0: the GPU's own ratio (``_gpu_causes.BF16_OVER_TF32``, by the export's
    compute capability, ``default_tf32_rate`` where it names none)."""
    tf32_efficiency: float = 1.25
    """Of the GPU's peak ratio (bf16 over TF32 tensor cores), the part a fix reaches: above 1,
    since TF32 GEMMs move twice the operand bytes of bf16 ones and reach less of their peak
    at a model's sizes (docs/detectors.md, fp32_math, says where the figure comes from)."""
    default_tf32_rate: float = 2.0
    """The TF32 rate where the export names no GPU the table knows."""
    memory_rate: float = 1.0
    """How many times faster the fp32 memory-bound kernels (elementwise, reductions,
    normalisations, layout conversions) run under the fix: mixed precision moves the
    activations as bf16 (up to half the bytes; weights, gradients and the optimizer stay fp32).
    1 by default: the class is the GEMMs' rate, and a program whose fp32 and TF32 GEMMs are few
    (16-bit convolutions beside fp32 normalisations) must not fire on its memory-bound kernels
    alone."""


@dataclass(kw_only=True)
class UnfusedElementwiseThresholds(_Section):
    """unfused_elementwise: chains of memory-bound elementwise kernels over one tensor."""

    SECTION: ClassVar[str] = Klass.UNFUSED_ELEMENTWISE
    min_saving_share: float = 0.15
    """Moving each chain's bytes once (one fused kernel per chain) would save at least this
    share of the step (~1.18x), the same bar as the other classes."""
    min_window_share: float = 0.15
    """The chains' GPU time must hold at least this share of the steady window for the class
    to be a candidate: below it the GPU idles between short chains, and what fusing them saves
    is their launches, launch_bound's cause (a fused chain's launches go in the prediction, see
    ``fused_launches``)."""
    min_kernels: int = 3
    """A chain is at least this many memory-bound kernels in a row on one stream."""
    size_ratio: float = 8.0
    """An elementwise kernel launching more than this factor of threads over the chain's
    largest starts a new chain (a larger tensor; one tensor is read at several vector widths:
    bf16 8 a thread, fp32 4, scalar 1-2); smaller ones (a row's statistics) join it."""
    fused_kernels: float = 1.5
    """A chain, fused, takes this many passes over its tensor (the mean time of its full-size
    kernels): its bytes moved about once, plus what a fused kernel reads twice (a reduction's
    input, the backward's saved tensors); never more than the chain took. It keeps
    ``ceil(fused_kernels)`` of its kernels' launches."""
    fused_launches: bool = True
    """The fused-away kernels' launches go too (their calls and the dispatch before each): a
    fused kernel is one launch. False: only the GPU's time changes."""

    def _check(self) -> None:
        if self.size_ratio < 1.0:
            self._refuse(
                "size_ratio", ">= 1 (a larger tensor starts a chain, a smaller one joins it)"
            )


@dataclass(kw_only=True)
class LayoutTransposeThresholds(_Section):
    """layout_transpose: NCHW convolutions and their layout conversions."""

    SECTION: ClassVar[str] = Klass.LAYOUT_TRANSPOSE
    min_saving_share: float = 0.15
    """Running the convolutions in NHWC (no conversions, NHWC kernels) would save at least this
    share of the step (~1.18x), the same bar as the other classes."""
    nhwc_rate: float = 3.0
    """How many times faster a kernel over an NCHW tensor (``_gpu_kernels.NCHW``: depthwise,
    pooling, batch norm, cuDNN's NCHW convolutions) runs on the NHWC tensor channels_last
    gives; the conversions themselves go."""


@dataclass(kw_only=True)
class AllocatorChurnThresholds(_Section):
    """allocator_churn: device memory released and requested again in the loop
    (cudaMalloc/cudaFree and their driver and async forms on the loop's threads)."""

    SECTION: ClassVar[str] = Klass.ALLOCATOR_CHURN
    min_saving_share: float = 0.15
    """Serving every allocation from a warm cache (no cudaMalloc/cudaFree in the loop) would
    save at least this share of the step (~1.18x), the same bar as the other classes."""
    min_calls_per_step: float = 0.5
    """Device-memory calls per steady iteration (per s: ``min_calls_per_s``) at least this
    many make the class a candidate: a warm caching allocator makes none."""
    min_calls_per_s: float = 5.0
    min_call_share: float = 0.02
    """Device-memory calls taking at least this share of the window make the class a candidate
    however few they are (a capped cache that frees its segments and retries now and then)."""


@dataclass(kw_only=True)
class BlockingIoThresholds(_Section):
    """blocking_io: checkpoint and log writes on the training thread, and its waits for a save
    another thread writes."""

    SECTION: ClassVar[str] = Klass.BLOCKING_IO
    min_saving_share: float = 0.15
    """Moving the writes off the loop thread, their cost spread over the period's steps, would
    save at least this share of the step (~1.18x), the same bar as the other classes."""
    run_gap_ms: float = 15.0
    """File writes of the loop thread at most this far apart are one save (a write run): the
    pickling, checksumming and copies of one checkpoint between its chunks."""
    lead_ms: float = 30.0
    """A device-to-host copy whose call ends at most this long before a write run, and a host
    stretch in that lead, belong to the save (the tensor copied out before it is written)."""
    min_write_share: float = 0.005
    """Write runs covering less of the window than this share are no candidate (a log line
    now and then)."""
    min_stage_mb: float = 1.0
    """Where another thread of the process writes the files (an async checkpoint), a stretch
    of the loop thread's pageable device-to-host copies staging at least this many MB for it
    is the save's part on the loop (a ``.item()`` or a metric's copy stages bytes, not MB)."""
    wake_ms: float = 5.0
    """A wait of the loop thread that returns at most this long after another thread's file
    write ends, while the GPU idles, is a wait on that writer (the next save for the last)."""


@dataclass(kw_only=True)
class PredictConfig(_Section):
    """The time model behind each finding's predicted speedup (analysis/detect/timemodel/)."""

    SECTION: ClassVar[str] = "predict"
    enabled: bool = True
    """False: findings carry no prediction (saves the replays on a huge export); the classes
    the time model decides are then not judged on a GPU capture."""
    untraced: bool = True
    """Predict for the program as it runs without nsys: take ``trace_overhead_us`` off the host
    time of every traced CUDA call in both replays (False: predict for the traced run)."""
    trace_overhead_us: float = 7.0
    """Host time nsys adds to each traced CUDA call (CUPTI's callback and record), in us at
    the timed host's pace, where the program's untraced step is not known or cannot calibrate
    it (``calibrate``)."""
    trace_overhead_share: float = 0.0
    """Where > 0, nsys's cost is instead this share of each call's recorded host time (its
    dispatch gap, not a host stretch, and its own time): CUPTI's work in a call runs on the
    same host as the call and slows with it. It predicts removing a launch-bound loop's
    dispatch better than a fixed cost, but over-predicts removing the input of a loop whose
    calls a busy loader slowed, so it is not the default (docs/detectors.md, "Untraced" and
    "Measurements behind the code")."""
    calibrate: bool = True
    """Where the program's untraced mean step is known (``harness run``'s timing rounds,
    ``harness score``'s timing.csv, ``harness diagnose --step-ms``), fit both replays so that
    the one with nothing removed takes that step: nsys's cost per traced call in place of
    ``trace_overhead_us`` (it differs between loops: 6.9 us a call on kernel_flood, 18.5 on the
    corpus' batch-1 inference, and the trace alone cannot tell it), else the pace of the host's
    stretches. The calibrated prediction is then the number that decides. False: the trace
    alone."""
    calibrate_min_calls_per_ms: float = 5.0
    """Nsys's cost per call is fitted only where an iteration holds at least this many CUDA
    calls per ms of the measured step: there a gap between the traced and the measured step is
    nsys's cost per call; in a loop of few calls (a long input wait, a big copy) it is mostly
    the spread of the host's own work between steps and processes (5% of a step spread over its
    calls would read as 10 us a call), so the stretches' pace is fitted instead."""
    calibrate_max_probe: float = 4.0
    """... and only where the traced iteration is at most this many times the measured step
    and at least 1 / 2 of it: otherwise the iteration found is not the step that was measured
    (one layer of it, say). Not less: nsys's GIL trace alone can slow a loop whose threads
    trade the GIL more than threefold (docs/detectors.md)."""
    calibrate_max_overhead_us: float = 50.0
    """The largest cost per call the fit may find (nsys's measured cost: 6-21 us a call). With
    a calibration the speedup is over the measured step, whatever cost the fit reached."""
    calibrate_max_stretch_scale: float = 2.0
    """In a loop of fewer calls per ms than ``calibrate_min_calls_per_ms`` the replays are
    fitted to the measured step by scaling the host's own stretches (input and other host
    work, whose pace varies between steps and processes) instead, by at most this factor
    either way."""
    host_speed: bool = True
    """Where the timed processes' host speed relative to the profiled process's is known (the
    harness's host probes, ``harness diagnose --host-speed``), divide the profiled host's time
    by it in every replay, before nsys's cost is taken off: the prediction is then for the
    host the step was timed on, not for the moment the profiled process ran (False: as
    traced)."""
    max_host_speed: float = 2.0
    """A measured host speed outside 1 / this .. this is not used: a busy host slows a thread
    by less than that, so such a ratio is a probe misread (docs/detectors.md, "Measurements behind the code")."""
    host_speed_max_miss: float = 0.02
    """Where, with the measured host speed, the replay fitted to the measured step still misses
    it by more than this share at the fit's bounds, and as traced (speed 1) misses it by less,
    the speed is not used: the probes' host was not this step's (a step bound by copies or
    waits barely moves with the host's pace, while the probes do)."""
    clamp: bool = True
    """Raise a predicted step that goes below what no removal can beat (the busiest stream's
    remaining GPU work, the host's remaining work, and for an instant host the GPU busy time
    of the replay with nothing removed: ``_bounds``) to that floor; the finding's
    ``prediction_clamp`` says which, its note by how much. False: the replay's step as it is."""
    clamp_tolerance_share: float = 0.01
    """... only where the replay went below the floor by more than this share of it (the
    replay's first and last iteration may hold work of their neighbours)."""
    multi_step: float = 1.5
    """An iteration found holds several of the loop's steps where the median one launches at
    least this many times the items of the smallest (an anchor that recurs only every few
    steps): the measured step is then counted that many times in the fit."""
    multiple_tolerance: float = 0.25
    """... and each iteration launches a whole multiple of the smallest's items to within this
    share of one (steps whose kernel count changes with their shapes give no count: 1)."""
    concurrent_share: float = 0.1
    """A stream whose kernels ran beside the loop stream's for at most this share of their
    time, as recorded, runs in the loop stream's queue in the replay (cuDNN's side streams,
    serialised by events and by the SMs they fill)."""
    held_us: float = 10.0
    """An item that started this long after both its launch (plus the median latency) and its
    stream's previous item waited for something else ..."""
    wake_us: float = 20.0
    """... an item on another stream that ended at most this long before it started: the
    replay keeps that wait (an event a stream waits on)."""
    data_dispatch_percentile: float = 75.0
    """Removing the input work: every other gap of the host is capped at this percentile of the
    window's dispatch gaps. A busy input pipeline slows the loop's own host beyond its
    stretches (releasing the host batch before the first launch, waking a thread that slept
    through the load, cores and caches the loader took); a host freed from it dispatches at
    its usual pace."""
    graph_turn_share: float = 0.0
    """Removing the launches (one graph replay a step): the share of the GPU's turnaround
    between two stream-queued kernels (recorded in the trace, its median where a kernel was not
    queued) that is left between two kernels of a graph, where the trace recorded none. A
    graph's kernels follow each other faster than a stream's, but not back to back; 0 until the
    median is a sound base where a loop queues few kernels (docs/detectors.md: the graphs
    measured, and where 0.3 helps and where it does not)."""
    max_calls: int = 60_000
    """The replay takes the last steady iterations (furthest from the start-up) holding at most
    this many CUDA calls."""
    max_iterations: int = 30
    """... and at most this many of the suite's NVTX steps ..."""
    max_found_iterations: int = 1000
    """... or of iterations found in the GPU work, which may be one layer of a step, not the
    step (a DDP capture's 13-kernel repeats, 164 to a 54 ms step): a few dozen of them would be
    one part of a step (its optimizer's tail), not a sample of it."""
    min_iterations: int = 3
    """... but at least this many, whatever they hold."""
    bootstrap: int = 1000
    """Resamples of the iterations for the predicted speedup's 95% interval."""
    seed: int = 0
    """Seed of those resamples: the same report gives the same interval."""
    tolerance_share: float = 0.2
    """A prediction is within tolerance when |predicted / measured - 1| is at most this."""

    def _check(self) -> None:
        bounds = (
            (
                0.0 < self.data_dispatch_percentile <= 100.0,
                "data_dispatch_percentile",
                "in (0, 100]",
            ),
            (0.0 <= self.trace_overhead_share < 1.0, "trace_overhead_share", "in [0, 1)"),
            (0.0 <= self.graph_turn_share <= 1.0, "graph_turn_share", "in [0, 1]"),
            (self.max_host_speed >= 1.0, "max_host_speed", ">= 1"),
            (self.multi_step > 1.0, "multi_step", "> 1"),
            (0.0 <= self.multiple_tolerance < 0.5, "multiple_tolerance", "in [0, 0.5)"),
            (0.0 <= self.concurrent_share <= 1.0, "concurrent_share", "in [0, 1]"),
            (self.held_us >= 0.0 and self.wake_us >= 0.0, "held_us, wake_us", ">= 0"),
            (0.0 <= self.host_speed_max_miss < 1.0, "host_speed_max_miss", "in [0, 1)"),
            (0.0 <= self.clamp_tolerance_share < 1.0, "clamp_tolerance_share", "in [0, 1)"),
            (
                self.calibrate_max_probe >= 1.0,
                "calibrate_max_probe",
                ">= 1 (nsys never speeds a program up)",
            ),
        )
        for ok, key, bound in bounds:
            if not ok:
                value = getattr(self, key)
                raise ValueError(f"diagnosis.predict.{key} must be {bound}, got {value}")


@dataclass(kw_only=True)
class ExpertRulesConfig(_Section):
    """Not a detector: the cross-check with nsys's own expert rules (``nsys analyze``,
    analysis/expert_rules.py) at the end of ``harness run`` -> expert_rules.csv, crosscheck.csv."""

    SECTION: ClassVar[str] = "expert_rules"
    enabled: bool = True
    """False: skip it (no ``nsys analyze`` calls at all)."""
    timeout_s: float = 300.0
    """Per rule and report; a rule that takes longer is an ``error`` row."""
    budget_s: float = 900.0
    """For the whole run; reports after that get ``skipped`` rows."""
