"""``hta``: Holistic Trace Analysis (0.5.0) on the PyTorch Profiler's Kineto traces, one per rank.

HTA never reads nsys. It reports numbers, not causes; the rules that turn its numbers into
classes are the suite's, written down with their thresholds in ``tools.hta``
(:class:`harness.core.tools_config.HtaRules`), fixed on the suite's own runs and scored on the
corpus. Two steps, so each can be checked alone: :func:`hta_numbers` runs HTA's analyses (the
temporal and idle-time breakdowns, CUDA kernel launch statistics, queue length, comm-comp
overlap, potential stragglers) and keeps the numbers; :func:`hta_calls` applies the rules.

The GPU-side classes read HTA's kernel breakdown (``get_gpu_kernel_breakdown``: each
computation kernel's total time and mean, so its count), its kernel names read as the suite
reads them (:mod:`analysis.kernel_names`: GEMMs on the tensor cores or the FMA units,
elementwise and reduction kernels, layout conversions): GEMM time off the tensor cores
(``fp32_math``), an elementwise share with many elementwise launches per GEMM
(``unfused_elementwise``), a layout-conversion share (``layout_transpose``), each only on a
GPU busy computing (the temporal breakdown's compute share at least
``busy_min_compute_pct``).

What HTA cannot see is ``n/a``: the GIL (it reads no thread states), pageable copies (its
breakdowns do not tell a copy's memory kind), allocator calls and file writes (no analysis of
either), stage imbalance on one rank (no other rank to compare), and every class on a trace
without GPU kernels (a CPU-only trace: HTA's analyses are of GPU time).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import math
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from analysis import kernel_names as KN
from bottlenecks import Klass
from harness.core import runfolder as rf
from harness.core.tools_config import HtaRules
from harness.tools.base import Call, Calls, Context, Flag, Traces, all_na, not_installed, register

NO_GPU = "the trace has no GPU kernels: HTA's analyses are of GPU time"

#: Classes HTA has no analysis for, and why.
UNSEEN: dict[str, str] = {
    Klass.GIL_CONTENTION: "HTA reads no thread states or GIL waits",
    Klass.PAGEABLE_COPY: "HTA's breakdowns do not tell a copy's memory kind (pinned or pageable)",
    Klass.ALLOCATOR_CHURN: "HTA has no analysis of allocator calls (cudaMalloc/cudaFree)",
    Klass.BLOCKING_IO: "HTA has no analysis of file writes or of the copies before them",
}

#: The kernel breakdown's kinds of time (HtaNumbers.kernel_us keys): all computation kernels,
#: GEMMs by the pipe their names say, elementwise and reduction kernels, layout conversions.
ALL, ELEMENTWISE, LAYOUT = "all", "elementwise", "layout"
GEMM_PIPES = {KN.TENSOR: "gemm_tensor", KN.FMA: "gemm_fma", KN.UNKNOWN: "gemm_unknown"}
#: HtaNumbers.kernel_launches keys.
GEMM = "gemm"


@dataclass
class HtaNumbers:
    """What HTA's analyses said about one program (None: that analysis gave nothing)."""

    ranks: int = 0
    rank_ids: list[int] = field(default_factory=list)
    """The ranks HTA read (each trace's ``distributedInfo.rank``)."""
    profiler_steps: int = 0
    """``ProfilerStep#N`` ranges HTA found (its straggler analysis works per step)."""
    gpu_kernels: int = 0
    idle_pct: dict[int, float] = field(default_factory=dict)
    """Per rank, GPU idle share of the trace, % (temporal breakdown)."""
    compute_pct: dict[int, float] = field(default_factory=dict)
    """Per rank, GPU share of the trace in computation kernels, % (temporal breakdown; the
    rest is idle or copies and sets)."""
    host_wait_share: float | None = None
    """Share of the GPU idle time that is host wait (idle time breakdown, every rank)."""
    launches: int = 0
    short_launch_share: float | None = None
    """Share of launches whose GPU duration is below their CPU launch call's."""
    queue_p75: float | None = None
    """75th percentile of the busiest stream's queue length."""
    comm_overlap_pct: float | None = None
    """Communication overlapped with computation, % (mean over ranks; None: no communication)."""
    stragglers: list[int] = field(default_factory=list)
    kernel_us: dict[str, float] = field(default_factory=dict)
    """Computation kernel time, us, by kind (:data:`ALL`, :data:`GEMM_PIPES`' values,
    :data:`ELEMENTWISE`, :data:`LAYOUT`), from the kernel breakdown; empty: no breakdown (or
    numbers cached before it was read)."""
    kernel_launches: dict[str, int] = field(default_factory=dict)
    """Launches of GEMM (:data:`GEMM`) and elementwise kernels in the breakdown."""
    errors: dict[str, str] = field(default_factory=dict)
    """Per analysis that raised, its message."""

    @property
    def mean_idle_pct(self) -> float | None:
        """GPU idle share of the trace, %, mean over ranks (None: no temporal breakdown)."""
        return sum(self.idle_pct.values()) / len(self.idle_pct) if self.idle_pct else None

    @property
    def idle_spread_pct(self) -> float | None:
        """Points between the most and the least idle rank (None: fewer than two ranks)."""
        if len(self.idle_pct) < 2:
            return None
        return max(self.idle_pct.values()) - min(self.idle_pct.values())


#: A corpus's HTA numbers, computed from its Kineto traces (``python -m harness.tools.hta
#: CORPUS``) and committed where the traces are too big to be: ``<corpus>/hta_numbers.json``.
CACHE = "hta_numbers.json"
#: Traces.extra's key for an entry's cached numbers (:func:`cached_numbers`).
CACHED = "hta_numbers"


def numbers_from_dict(d: dict[str, Any]) -> HtaNumbers:
    """An :class:`HtaNumbers` from its JSON form (JSON keys are strings: ranks back to int)."""
    d = dict(d)
    for key in ("idle_pct", "compute_pct"):
        d[key] = {int(k): float(v) for k, v in (d.get(key) or {}).items()}
    return HtaNumbers(**d)


def cached_numbers(root: Path) -> dict[str, HtaNumbers]:
    """A corpus's cached HTA numbers by entry (empty without ``hta_numbers.json``; a
    CorruptFileError names one that is not JSON or not the cache's shape)."""
    path = root / CACHE
    doc = rf.read_json(path)
    if doc is None:
        return {}
    try:
        return {name: numbers_from_dict(e["numbers"]) for name, e in doc["entries"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise rf.CorruptFileError(path, f"not an HTA numbers cache ({exc!r})") from None


def write_cache(root: Path, entries: dict[str, tuple[tuple[Path, ...], HtaNumbers]]) -> Path:
    """``<root>/hta_numbers.json``: per entry, HTA's numbers and the traces they came from
    (name, bytes, sha256), so a reader can tell which capture they describe."""
    from importlib.metadata import version

    from harness.core.atomic import write_text

    def trace(p: Path) -> dict[str, Any]:
        data = p.read_bytes()
        return {"name": p.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    doc = {
        "hta": version("holistictraceanalysis"),
        "entries": {
            name: {"traces": [trace(p) for p in paths], "numbers": asdict(n)}
            for name, (paths, n) in sorted(entries.items())
        },
    }
    out = root / CACHE
    write_text(out, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return out


def _analyses(t: Any, n: HtaNumbers) -> None:
    """Fill ``n`` from each analysis, recording the ones that raise."""

    def run(name: str, fn: Any) -> Any:
        try:  # HTA's own warnings (e.g. a 0/0 in comm overlap without communication) are noise
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return fn()
        except Exception as exc:  # HTA raises IndexError/ValueError on what it cannot analyse
            n.errors[name] = f"{type(exc).__name__}: {exc}"
            return None

    ranks = sorted(t.t.traces) if hasattr(t.t, "traces") else [0]
    temporal = run("temporal_breakdown", lambda: t.get_temporal_breakdown(visualize=False))
    if temporal is not None and not temporal.empty:
        n.idle_pct = {int(r.rank): float(r.idle_time_pctg) for r in temporal.itertuples()}
        n.compute_pct = {int(r.rank): float(r.compute_time_pctg) for r in temporal.itertuples()}
    idle = run("idle_time_breakdown",
               lambda: t.get_idle_time_breakdown(ranks=ranks, visualize=False)[0])  # fmt: skip
    if idle is not None and not idle.empty and idle["idle_time"].sum() > 0:
        host = idle["idle_category"].astype(str).isin(["0", "host_wait", "IdleTimeType.HOST_WAIT"])
        n.host_wait_share = float(idle.loc[host, "idle_time"].sum() / idle["idle_time"].sum())
    stats = run("cuda_kernel_launch_stats",
                lambda: t.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False))  # fmt: skip
    if stats:
        rows = [df for df in stats.values() if df is not None and not df.empty]
        n.launches = sum(len(df) for df in rows)
        if n.launches:
            short = sum(int((df["gpu_duration"] < df["cpu_duration"]).sum()) for df in rows)
            n.short_launch_share = short / n.launches
    queue = run("queue_length_summary", lambda: t.get_queue_length_summary(ranks=ranks))
    if queue is not None and not queue.empty:
        busiest = queue.sort_values(("queue_length", "count")).iloc[-1]
        n.queue_p75 = float(busiest[("queue_length", "75%")])
    overlap = run("comm_comp_overlap", lambda: t.get_comm_comp_overlap(visualize=False))
    if overlap is not None and not overlap.empty:
        vals = [float(v) for v in overlap["comp_comm_overlap_pctg"] if not math.isnan(float(v))]
        n.comm_overlap_pct = sum(vals) / len(vals) if vals else None
    if len(ranks) > 1:
        n.stragglers = list(run("potential_stragglers", t.get_potential_stragglers) or [])
    breakdown = run("gpu_kernel_breakdown",
                    lambda: t.get_gpu_kernel_breakdown(visualize=False, duration_ratio=1.0,
                                                       num_kernels=1 << 30)[1])  # fmt: skip
    if breakdown is not None and not breakdown.empty:
        _kernel_kinds(breakdown, n)


def _kernel_kinds(breakdown: Any, n: HtaNumbers) -> None:
    """Fill ``n.kernel_us`` and ``n.kernel_launches`` from the breakdown's per-kernel rows
    (every rank's COMPUTATION kernels: name, ``sum (us)``, ``mean (us)``)."""
    rows = breakdown[breakdown["kernel_type"].astype(str) == "COMPUTATION"]
    us: dict[str, float] = {ALL: 0.0, ELEMENTWISE: 0.0, LAYOUT: 0.0}
    us.update(dict.fromkeys(GEMM_PIPES.values(), 0.0))
    launches = {GEMM: 0, ELEMENTWISE: 0}
    for name, total, mean in zip(rows["name"].astype(str), rows["sum (us)"], rows["mean (us)"],
                                 strict=True):  # fmt: skip
        total, mean = float(total), float(mean)
        count = round(total / mean) if mean > 0 else 0
        family = KN.family_of(name)
        us[ALL] += total
        if family == "matmul":
            us[GEMM_PIPES[KN.gemm_pipe(name)]] += total
            launches[GEMM] += count
        elif family in (ELEMENTWISE, LAYOUT):
            us[family] += total
            launches[ELEMENTWISE] += count if family == ELEMENTWISE else 0
    n.kernel_us, n.kernel_launches = us, launches


def hta_numbers(kineto: tuple[Path, ...]) -> HtaNumbers:
    """Run HTA's analyses on the traces (one per rank; the rank is the trace's
    ``distributedInfo.rank``, as HTA reads it)."""
    from hta.trace_analysis import TraceAnalysis

    n = HtaNumbers(ranks=len(kineto))
    with tempfile.TemporaryDirectory(prefix="bottleneck-hta-") as tmp:
        for i, p in enumerate(kineto):
            (Path(tmp) / f"{i}-{p.name}").symlink_to(p.resolve())
        logging.getLogger("hta").setLevel(logging.ERROR)
        with contextlib.redirect_stdout(io.StringIO()):
            t = _serial_analysis(TraceAnalysis, tmp)
        n.rank_ids = sorted(int(r) for r in t.t.traces)
        with contextlib.suppress(Exception):  # HTA raises where a trace has no steps
            n.profiler_steps = len(t.get_profiler_steps())
        n.gpu_kernels = sum(_gpu_kernels(t, r) for r in t.t.traces)
        if n.gpu_kernels:
            _analyses(t, n)
    return n


def _pandas3_shim() -> None:
    """HTA 0.5.0 on pandas >= 3: its correlation index (``transform_correlation_to_index``)
    starts as a copy of the ``correlation`` column, which HTA's parser has downcast (int16 on a
    short trace), then stores row numbers in it; pandas 3 refuses an assignment that would
    upcast a column (pandas 2 warned and upcast). The shim widens the column first, so HTA
    computes what it computes on pandas 2. Applied once, before a trace is parsed."""
    import hta.common.trace as ht

    original = ht.transform_correlation_to_index
    if getattr(original, "_bottleneck_shim", False):
        return

    def widened(df: Any, symbol_table: Any) -> Any:
        if "correlation" in df.columns:
            df["correlation"] = df["correlation"].astype("int64")
        return original(df, symbol_table)

    widened._bottleneck_shim = True  # type: ignore[attr-defined]
    ht.transform_correlation_to_index = widened


def _serial_analysis(cls: Any, trace_dir: str) -> Any:
    """``TraceAnalysis(trace_dir=...)`` with the ranks parsed in this process: HTA 0.5.0 parses
    several ranks in a forked pool and ends it with SIGTERM, which the children of ``harness
    run`` (its tools step) would meet with the harness's own handler (a traceback per child)."""
    from hta.common.trace import Trace

    _pandas3_shim()
    t = cls.__new__(cls)
    t.t = Trace(trace_dir=trace_dir)
    t.t.load_traces(include_last_profiler_step=False, use_multiprocessing=False)
    return t


def _gpu_kernels(t: Any, rank: int) -> int:
    """GPU kernels, copies and sets in one rank's trace (HTA's own ``stream`` column: >= 0 on
    the GPU, -1 on the CPU)."""
    df = t.t.get_trace(rank)
    return int((df["stream"] >= 0).sum()) if "stream" in df else 0


def hta_calls(n: HtaNumbers, rules: HtaRules) -> Calls:
    """The classes HTA's numbers point at, by the rules of ``tools.hta``."""
    if n.gpu_kernels == 0:
        return all_na(NO_GPU)
    idle = n.mean_idle_pct
    idle_s = "n/a" if idle is None else f"{idle:.1f}%"
    out: Calls = {k: Call(Flag.NA, why) for k, why in UNSEEN.items()}
    launch = _launch(n, idle, rules)
    out[Klass.LAUNCH_BOUND] = launch
    if idle is None or n.host_wait_share is None:
        out[Klass.DATA_STALL] = Call(Flag.NA, "HTA gave no idle time breakdown")
    else:
        stall = (idle >= rules.stall_min_idle_pct
                 and n.host_wait_share >= rules.stall_min_host_wait_share
                 and launch.flag is not Flag.FLAGGED)  # fmt: skip
        out[Klass.DATA_STALL] = Call(Flag.FLAGGED if stall else Flag.CLEAR,
                                 f"GPU idle {idle_s}, host wait {n.host_wait_share:.0%} of it")  # fmt: skip
    if idle is None or n.queue_p75 is None:
        out[Klass.HOST_SYNC] = Call(Flag.NA, "HTA gave no queue length")
    else:
        sync = idle >= rules.min_idle_pct and n.queue_p75 <= rules.sync_max_queue_p75
        out[Klass.HOST_SYNC] = Call(Flag.FLAGGED if sync else Flag.CLEAR,
                                f"queue length p75 {n.queue_p75:g}, GPU idle {idle_s}")  # fmt: skip
    if n.comm_overlap_pct is None:
        out[Klass.EXPOSED_COMM] = Call(Flag.CLEAR, "no communication kernels")
    else:
        exposed = n.comm_overlap_pct <= rules.comm_max_overlap_pct
        out[Klass.EXPOSED_COMM] = Call(Flag.FLAGGED if exposed else Flag.CLEAR,
                                   f"comm-comp overlap {n.comm_overlap_pct:.1f}%")  # fmt: skip
    out[Klass.STAGE_IMBALANCE] = _imbalance(n, rules)
    out.update(_gpu_side(n, rules))
    return out


def _gpu_side(n: HtaNumbers, rules: HtaRules) -> Calls:
    """fp32_math, unfused_elementwise and layout_transpose from the kernel breakdown, on a
    GPU busy computing only."""
    classes = (Klass.FP32_MATH, Klass.UNFUSED_ELEMENTWISE, Klass.LAYOUT_TRANSPOSE)
    total = n.kernel_us.get(ALL, 0.0)
    compute = sum(n.compute_pct.values()) / len(n.compute_pct) if n.compute_pct else None
    if not total or compute is None:
        why = "HTA gave no kernel breakdown" if not total else "HTA gave no temporal breakdown"
        return {k: Call(Flag.NA, why) for k in classes}
    busy = compute >= rules.busy_min_compute_pct
    fma = n.kernel_us.get(GEMM_PIPES[KN.FMA], 0.0) / total
    tensor = n.kernel_us.get(GEMM_PIPES[KN.TENSOR], 0.0) / total
    ew = n.kernel_us.get(ELEMENTWISE, 0.0) / total
    per_gemm = n.kernel_launches.get(ELEMENTWISE, 0) / max(n.kernel_launches.get(GEMM, 0), 1)
    layout = n.kernel_us.get(LAYOUT, 0.0) / total
    gpu = f"GPU computing {compute:.1f}% of the trace"

    def call(hit: bool, text: str) -> Call:
        return Call(Flag.FLAGGED if busy and hit else Flag.CLEAR, f"{text}; {gpu}")

    return {
        Klass.FP32_MATH: call(fma >= rules.fp32_min_gemm_share,
                              f"GEMMs off tensor cores {fma:.0%} of kernel time (on them "
                              f"{tensor:.0%})"),
        Klass.UNFUSED_ELEMENTWISE: call(ew >= rules.elementwise_min_share
                                        and per_gemm >= rules.elementwise_min_per_gemm,
                                        f"elementwise {ew:.0%} of kernel time, {per_gemm:.1f} "
                                        f"launches per GEMM"),
        Klass.LAYOUT_TRANSPOSE: call(layout >= rules.layout_min_share,
                                     f"layout conversions {layout:.0%} of kernel time"),
    }  # fmt: skip


def _launch(n: HtaNumbers, idle: float | None, rules: HtaRules) -> Call:
    if n.short_launch_share is None or idle is None:
        return Call(Flag.NA, "HTA gave no kernel launch statistics")
    hit = idle >= rules.min_idle_pct and n.short_launch_share >= rules.launch_min_short_share
    return Call(Flag.FLAGGED if hit else Flag.CLEAR,
                f"{n.short_launch_share:.0%} of {n.launches} launches shorter on the GPU than on "
                f"the CPU, GPU idle {idle:.1f}%")  # fmt: skip


def _imbalance(n: HtaNumbers, rules: HtaRules) -> Call:
    spread = n.idle_spread_pct
    if spread is None:
        return Call(Flag.NA, "one rank: nothing to compare")
    hit = spread >= rules.imbalance_min_idle_spread_pct
    text = f"idle spread {spread:.1f} points across {len(n.idle_pct)} ranks"
    if n.stragglers:
        text += f"; potential stragglers: ranks {', '.join(map(str, n.stragglers))}"
    return Call(Flag.FLAGGED if hit else Flag.CLEAR, text)


@register
class Hta:
    """HTA's numbers, read as classes by the rules of ``tools.hta``."""

    name = "hta"
    reads = "kineto"

    def missing(self) -> str | None:
        return not_installed("hta.trace_analysis", "HTA")

    def judge(self, traces: Traces, ctx: Context) -> Calls:
        cached = traces.extra.get(CACHED)
        if not traces.kineto and isinstance(cached, HtaNumbers):  # HTA ran on it at ingest
            return hta_calls(cached, ctx.tools.hta)
        why = self.missing()
        if why:
            return all_na(why)
        if not traces.kineto:
            return all_na("no Kineto trace (harness run kineto.enabled=true)")
        try:
            n = hta_numbers(traces.kineto)
        except Exception as exc:  # HTA's parser on a trace it cannot read
            return all_na(f"HTA could not read the traces: {type(exc).__name__}: {exc}")
        return hta_calls(n, ctx.tools.hta)


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.tools.hta CORPUS``: HTA's numbers for every entry with Kineto traces
    (``CORPUS/kineto/<entry>/``), written to ``CORPUS/hta_numbers.json``."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m harness.tools.hta CORPUS_DIR", file=sys.stderr)
        return 2
    root = Path(args[0])
    entries = {}
    for folder in sorted(p for p in (root / "kineto").glob("*") if p.is_dir()):
        paths = tuple(sorted(folder.glob("*.pt.trace.json*")))
        if paths:
            n = hta_numbers(paths)
            entries[folder.name] = (paths, n)
            print(f"{folder.name}: {n.gpu_kernels} GPU events, idle {n.idle_pct}", flush=True)
    print(f"wrote {write_cache(root, entries)} ({len(entries)} entries)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
