"""Every bottleneck class, specified once: one :class:`ClassSpec` per class in :data:`SPECS`.

A class used to be registered in seven hand-kept tables that drifted apart (the keyword adapter
had no words for two of the classes). Each of them is now derived from :data:`SPECS`:

- ``bottlenecks.Klass`` and ``bottlenecks.CLASSES`` (the enum, and the order reports list the
  classes in; ``scenarios.BOTTLENECK_CLASSES`` and ``analysis.findings.CLASSES`` re-export it);
- ``analysis.detect.REGISTRY`` (class -> detector, from :attr:`ClassSpec.detector`);
- ``analysis.detect.config.MAIN_METRIC`` (:attr:`ClassSpec.main_metric`, the default of
  ``diagnosis.main_metric``) and the check that :attr:`ClassSpec.thresholds` is a section of
  ``DiagnosisConfig``;
- ``analysis.detect._model.CAUSE_OF`` (:attr:`ClassSpec.replay_cause`);
- ``analysis.expert_rules.RULES`` (:attr:`ClassSpec.nsys_rules`);
- ``harness.judge.score.TOOL_WORDS`` (:attr:`ClassSpec.tool_words`, the ``--tool`` adapter);
- the report's list of the classes and what each means (:attr:`ClassSpec.means`).

Everything else that is per class iterates ``CLASSES`` and follows on its own: diagnosis.csv's
``<class>_*`` columns (``harness.judge.diagnosis_table``), the scores and confusion matrix
(``harness.judge.scoring``, ``crosscheck``), the report's tables and the diagnosis figure, the
scenarios' check of the class they inject (``scenarios/_base.py``). Each detector module's
``KLASS`` must equal its spec's name (checked where the registry is built).

Adding a class is one entry here, plus the two pieces that are code of their own: the detector
module (``analysis/detect/<class>.py``) and its threshold section (a ``_Section`` dataclass in
``analysis/detect/thresholds.py`` and a ``DiagnosisConfig`` field in ``analysis/detect/config.py``,
which Hydra's ConfigStore reads).
A spec names them as strings, since this package imports neither ``analysis`` nor ``harness``;
importing ``analysis.detect`` fails with a :class:`ClassSpecError` naming the class and the
missing piece. ``tests/test_class_specs.py`` holds that one entry reaches every consumer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SPECS", "ClassSpec", "ClassSpecError", "NsysRule", "check_specs"]


class ClassSpecError(ValueError):
    """A class spec is malformed, or a piece it names (detector, threshold section) is missing;
    the message names the class and the piece."""


@dataclass(frozen=True, kw_only=True)
class NsysRule:
    """One of nsys's expert rules (``nsys analyze``) that speaks to a class."""

    names: tuple[str, ...]
    """The rule's names: nsys 2022.4's spelling first, 2024+'s last (nsys renamed them)."""
    flags: str
    """What fires it at its defaults (no options are passed)."""
    loose: str = ""
    """Why the rule stands for the class only loosely: what else fires it ('' if nothing)."""

    def __post_init__(self) -> None:
        if not self.names or not all(isinstance(n, str) and n.strip() for n in self.names):
            raise ClassSpecError(f"an nsys rule needs its names, got {self.names!r}")
        if not self.flags.strip():
            raise ClassSpecError(f"nsys rule {self.names[-1]}: say what it flags")


@dataclass(frozen=True, kw_only=True)
class ClassSpec:
    """What is really per class, in one place (see the module's docstring for who reads it)."""

    name: str
    """The class's name: the ``Klass`` value, the ``<class>_*`` column prefix in diagnosis.csv,
    the key of every per-class table."""
    main_metric: str
    """The key of the Finding's ``metrics`` that reports plot and rank the class on (the
    default of ``diagnosis.main_metric.<class>``)."""
    means: str
    """One line for people: what the bottleneck is (the report lists it beside the class)."""
    tool_words: tuple[str, ...]
    """Lower-case words and phrases a profiler tool's text uses for the class (nsys's rules and
    reports, HTA, the PyTorch profiler): the ``harness score --tool`` adapter flags the class
    when any of them occurs in the tool's lower-cased output."""
    detector: str
    """The detector, as ``'module:function'`` (``detect(trace, thresholds) -> Finding``)."""
    thresholds: str
    """The detector's section of the ``diagnosis`` config (a field of
    ``analysis.detect.config.DiagnosisConfig``)."""
    replay_cause: str | None = None
    """The cause the time model removes to predict the class's speedup (a ``cause`` of
    ``analysis.detect._model.removal``); None: the model does not replay the class."""
    nsys_rules: tuple[NsysRule, ...] = ()
    """nsys's expert rules that stand for the class in the cross-check (none for most)."""
    loop_asleep: bool = False
    """The class's cost is time the step loop spends asleep (blocked on a lock, never on a
    CPU or waiting for one). Removing its cause can then save only sleep, so the measured
    truth counts the loop's extra CPU time beside its extra wait for a core as another
    mechanism (a loaded host's slower core: :func:`harness.judge.truth.oversubscribed`).
    False where the class's cost may be the loop's own CPU work (loading in the loop,
    launching, spinning in a sync)."""

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise ClassSpecError(f"class name {self.name!r}: a lower-case identifier")
        if not self.main_metric.isidentifier():
            raise ClassSpecError(f"class {self.name}: main_metric {self.main_metric!r}")
        if not self.means.strip():
            raise ClassSpecError(f"class {self.name}: say what it means (ClassSpec.means)")
        if not self.tool_words or any(w != w.lower() or not w.strip() for w in self.tool_words):
            raise ClassSpecError(
                f"class {self.name}: tool_words must be non-empty lower-case words (they are "
                f"matched against lower-cased output), got {self.tool_words!r}"
            )
        module, sep, func = self.detector.partition(":")
        if not (sep and module and func.isidentifier()):
            raise ClassSpecError(
                f"class {self.name}: detector {self.detector!r} is not 'module:function'"
            )
        if not self.thresholds.isidentifier():
            raise ClassSpecError(f"class {self.name}: thresholds {self.thresholds!r}")
        if self.replay_cause is not None and not self.replay_cause.isidentifier():
            raise ClassSpecError(f"class {self.name}: replay_cause {self.replay_cause!r}")


_GPU_GAPS_LOOSE = "any long stall (input, syncs, compilation) fires it, not only data loading"

#: Every class, in the order reports list them.
SPECS: tuple[ClassSpec, ...] = (
    ClassSpec(
        name="data_stall",
        main_metric="data_load_share",
        means="the GPU waits while the host loads and prepares the next batch",
        tool_words=(
            *("data_stall", "data stall", "dataloader", "data loading", "starv"),
            *("input pipeline", "gpu gaps", "input-bound", "io-bound"),
        ),
        detector="analysis.detect.data_stall:detect",
        thresholds="data_stall",
        replay_cause="data",
        nsys_rules=(
            NsysRule(
                names=("gpu-starv", "gpu_gaps"),
                flags="GPU idle for 500 ms or more between its first and last operation",
                loose=_GPU_GAPS_LOOSE,
            ),
        ),
    ),
    ClassSpec(
        name="pageable_copy",
        main_metric="pageable_h2d_share",
        means="host-to-device copies from pageable (unpinned) memory, which the host stages "
        "and waits for",
        tool_words=("pageable", "unpinned", "non-pinned", "pin_memory"),
        detector="analysis.detect.pageable_copy:detect",
        thresholds="pageable_copy",
        replay_cause="pageable",
        nsys_rules=(
            NsysRule(
                names=("cuda-async-memcpy", "cuda_memcpy_async"),
                flags="asynchronous memcpy calls whose host memory is pageable (they run "
                "synchronously)",
                loose="any size and count: a 12-byte scalar upload fires it (a plain "
                "cudaMemcpy from pageable memory does not)",
            ),
        ),
    ),
    ClassSpec(
        name="launch_bound",
        main_metric="host_bound_share",
        means="the host cannot issue GPU work as fast as the GPU finishes it (kernels too "
        "short for their launch cost)",
        tool_words=(
            *("launch_bound", "launch overhead", "launch-bound", "launch bound"),
            *("cpu-bound", "cpu bound", "host-bound", "host bound", "low util"),
            *("gpu time util", "launch latency", "short kernels", "waiting for the host"),
        ),
        detector="analysis.detect.launch_bound:detect",
        thresholds="launch_bound",
        replay_cause="launch",
        nsys_rules=(
            NsysRule(
                names=("gpu-low-util", "gpu_time_util"),
                flags="chunks (1/30) of the GPU's active span with less than 50% in use",
                loose="low time-utilisation of any cause (data, syncs, launch overhead)",
            ),
        ),
    ),
    ClassSpec(
        name="host_sync",
        main_metric="sync_exposed_share",
        means="the host blocks on the GPU inside the step (.item(), .cpu(), synchronize), so "
        "its work stops overlapping the GPU's",
        tool_words=(
            *("host_sync", "synchroniz", "sync api", "blocking sync", "synchronous api"),
            *("synchronous memcpy", "synchronous memset", "_local_scalar_dense"),
        ),
        detector="analysis.detect.host_sync:detect",
        thresholds="host_sync",
        replay_cause="sync",
        nsys_rules=(
            NsysRule(
                names=("cuda-sync-memcpy", "cuda_memcpy_sync"),
                flags="synchronous memcpy calls (not DtoD, not HtoD of 64 KB or less)",
                loose="a blocking pageable copy (pageable_copy) fires it too",
            ),
            NsysRule(
                names=("cuda-sync-memset", "cuda_memset_sync"),
                flags="synchronous memsets to pinned or managed memory",
            ),
            NsysRule(
                names=("cuda-sync-api", "cuda_api_sync"),
                flags="cudaDeviceSynchronize / cudaStreamSynchronize calls",
                loose="one call is enough (the harness syncs at its window's edges)",
            ),
        ),
    ),
    ClassSpec(
        name="exposed_comm",
        main_metric="nccl_exposed_share",
        means="collective communication (NCCL) that no compute overlaps",
        tool_words=(
            *("exposed_comm", "nccl", "communication", "exposed comm"),
            *("comm comp overlap", "all-reduce", "allreduce"),
        ),
        detector="analysis.detect.exposed_comm:detect",
        thresholds="exposed_comm",
    ),
    ClassSpec(
        name="gil_contention",
        main_metric="gil_wait_share",
        means="the launching thread waits for the GIL while another Python thread of the "
        "process holds it",
        tool_words=(
            *("gil_contention", "gil contention", "global interpreter lock"),
            *("waiting for gil", "waiting for the gil", "gil wait", "holding the gil"),
            *("gil-bound", "gil bound"),
        ),
        detector="analysis.detect.gil_contention:detect",
        thresholds="gil_contention",
        replay_cause="gil",
        loop_asleep=True,  # CPython's GIL wait is a condition-variable sleep
    ),
    ClassSpec(
        name="stage_imbalance",
        main_metric="stage_idle_share",
        means="one pipeline stage (rank) idles, waiting to receive, while a slower one computes",
        tool_words=(
            *("stage_imbalance", "stage imbalance", "imbalanced stage", "unbalanced stage"),
            *("pipeline bubble", "bubble", "straggler", "load imbalance"),
        ),
        detector="analysis.detect.stage_imbalance:detect",
        thresholds="stage_imbalance",
    ),
    ClassSpec(
        name="fp32_math",
        main_metric="fp32_math_share",
        means="GEMMs or convolutions run in fp32 on the SIMT FMA units (or in TF32) where bf16 "
        "tensor cores would run them many times faster",
        tool_words=(
            *("fp32_math", "tensor core", "tensor-core", "tensor_core", "tensorcore"),
            *("mixed precision", "mixed-precision", "tf32", "sgemm", "fp32 gemm", "fp32 matmul"),
            *("ffma", "autocast", "float32_matmul_precision"),
        ),
        detector="analysis.detect.fp32_math:detect",
        thresholds="fp32_math",
        replay_cause="fp32",
    ),
    ClassSpec(
        name="unfused_elementwise",
        main_metric="unfused_elementwise_share",
        means="chains of memory-bound elementwise and reduction kernels over same-sized tensors, "
        "each reading and writing the whole tensor, where one fused kernel would move it once",
        tool_words=(
            # not a bare "elementwise": every PyTorch program's kernel list has
            # vectorized_elementwise_kernel, fused or not
            *("unfused_elementwise", "unfused", "elementwise chain", "chain of elementwise"),
            *("kernel fusion", "operator fusion", "fusion opportunit", "fuse elementwise"),
            *("memory-bound elementwise", "elementwise fusion", "fusible"),
        ),
        detector="analysis.detect.unfused_elementwise:detect",
        thresholds="unfused_elementwise",
        replay_cause="unfused",
    ),
    ClassSpec(
        name="layout_transpose",
        main_metric="layout_transpose_share",
        means="convolutions in NCHW under bf16/fp16: cuDNN converts layouts around them and runs "
        "slower kernels than in channels_last (NHWC)",
        tool_words=(
            # not a bare "nchw"/"nhwc": every cuDNN convolution's name spells its layout, the
            # channels_last fix's too; the conversion kernels' names are the mechanism
            *("layout_transpose", "channels_last", "channels last", "channels-last"),
            *("nchwtonhwc", "nhwctonchw", "nchw2nhwc", "nhwc2nchw", "nchw to nhwc"),
            *("layout conversion", "layout transform", "memory format", "memory_format"),
        ),
        detector="analysis.detect.layout_transpose:detect",
        thresholds="layout_transpose",
        replay_cause="layout",
    ),
    ClassSpec(
        name="allocator_churn",
        main_metric="allocator_churn_share",
        means="the caching allocator gives device memory back and asks for it again inside the "
        "loop (empty_cache, fragmentation): cudaMalloc/cudaFree block the host and cudaFree "
        "synchronises the device",
        tool_words=(
            # not the bare API names: every CUDA program's API summary lists cudaMalloc and
            # cudaFree (start-up and exit); a tool that blames them says more
            *("allocator_churn", "empty_cache", "caching allocator", "fragmentation"),
            *("alloc_retries", "allocation churn", "allocation stall", "expandable_segments"),
            *("cudafree calls", "cudamalloc calls", "memory allocation stall"),
        ),
        detector="analysis.detect.allocator_churn:detect",
        thresholds="allocator_churn",
        replay_cause="alloc",
    ),
    ClassSpec(
        name="blocking_io",
        main_metric="blocking_io_share",
        means="checkpoint or log writes on the training thread: the device-to-host copy, the "
        "serialisation and the file writes stop the loop",
        tool_words=(
            *("blocking_io", "blocking i/o", "blocking io", "checkpoint", "torch.save"),
            *("file write", "fsync", "pwrite", "disk write"),
        ),
        detector="analysis.detect.blocking_io:detect",
        thresholds="blocking_io",
        replay_cause="io",
    ),
)


def check_specs(specs: Sequence[ClassSpec]) -> None:
    """Raise :class:`ClassSpecError` unless the names are unique and each nsys rule name
    stands for one class only (a rule's result is filed under one class)."""
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ClassSpecError(f"class {twice[0]!r} is specified twice")
    owner: dict[str, str] = {}
    for s in specs:
        for name in (n for r in s.nsys_rules for n in r.names):
            if owner.setdefault(name, s.name) != s.name:
                raise ClassSpecError(
                    f"nsys rule {name} stands for both {owner[name]} and {s.name}: one class only"
                )
