"""stage_imbalance: ranks with unequal work: one waits for another while that one computes.

One class for every job whose ranks do different amounts of work per step: pipeline stages cut
unevenly, and a data-parallel rank that does more than the others (a straggler: a larger shard,
extra evaluation, an augmentation on its GPU). Either way the other ranks wait for it, and the
wait is neither their work nor communication. A report holding several ranks is read rank by
rank, each over the same window:

- GPU reports (kernels carry ``deviceId``): a rank is a GPU with compute in the window. Its NCCL
  kernels are split into waits and transfers by matching them across the ranks (:func:`~analysis.detect.view.charges`); a
  rank's *idle* is the part of its waits, not hidden by its own compute, during which the rank it
  waited for (the late one) was computing. A wait during which the late rank's GPU was idle is
  charged to that rank's host (its own class, not this one), and transfers are communication
  (``exposed_comm``): both count as the rank's own time, which a re-split keeps.
- CPU reports (no GPU activity; nsys's OS-runtime trace): a rank is a process whose main thread
  computes; it is idle in its condition-variable waits (``wait_calls``: how torch.distributed's
  gloo backend blocks in ``recv`` and in a collective's ``wait()``) and busy the rest of the
  time. A process that hardly computes (a launcher such as torchrun's agent) is no rank. A CPU
  capture cannot tell a rank the OS took off its core from one with more work, so there a rank's
  waits must also be a pipeline's, not a collective's: at most ``max_lockstep_share`` of the least
  busy rank's waits (those of ``min_idle_us`` or more) may end while the busiest rank waits too
  (``lockstep_share``): a collective ends for every rank at once, a pipeline receive ends when the
  peer sends, and the peer goes on computing.

With ``n`` ranks, ``busy_r`` each rank's busy time (the window ``S`` minus its idle) and ``W``
their sum, a split that gave every rank ``W / n`` would take ``T_bal = W / n + idle_H``: the work
spread evenly plus the busiest rank's own idle (its pipeline fill and drain), which a balanced
split keeps. That slightly flatters the balanced split (a balanced stage's fill and drain take
one micro-batch of a half, longer than one of the light stage today: ~6% at 8 micro-batches of a
3:1 split), and it is exact for a split that is balanced already (``T_bal = S``).
``balanced_share`` = T_bal / S; the prediction is that number: ``1 / balanced_share``, the work
re-split evenly, everything else kept. Rule: ``saving_share`` = 1 - balanced_share >=
``min_saving_share`` (and, on the CPU, the lockstep test). A balanced pipeline, whose ranks wait
only in the fill, the drain and the hand-offs, saves nothing: its busiest rank idles as much as
the others; data-parallel ranks with equal work save nothing either, however they drift.
impact = saving_share. Main metric ``stage_idle_share``: the window share the least busy rank
waits while another rank computes. Reports with fewer than two ranks are not judged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from analysis import trace as T
from analysis.detect import view as V
from analysis.detect.config import StageImbalanceThresholds
from analysis.findings import Finding, State
from bottlenecks import Klass

KLASS = Klass.STAGE_IMBALANCE

#: nsys global thread id: process id in bits 24-47, thread id in bits 0-23.
_ID_MASK = 0xFFFFFF


@dataclass(frozen=True)
class Ranks:
    """The ranks of a report over one window: each one's idle intervals (sorted, disjoint)."""

    lo: int
    hi: int
    names: list[str]
    """``gpu<deviceId>`` or ``pid<process id>``, in device or process-id order."""
    idle: list[tuple[np.ndarray, np.ndarray]]
    waits: list[tuple[np.ndarray, np.ndarray]]
    """CPU reports: the part of each rank's idle that is waiting (``wait_calls``), read for
    lockstep; GPU reports: empty (no lockstep test: the waits are matched to the late rank)."""
    source: str
    """What a rank is in this report and what its idle is, for the reason."""
    note: str
    """How the window was chosen."""
    others_busy: list[tuple[np.ndarray, np.ndarray]] | None = None
    """GPU reports: per rank, the union of the other ranks' compute (what a wait overlaps while
    another rank computes); None: the complement of the other ranks' idle."""

    @property
    def span_ns(self) -> int:
        return max(1, self.hi - self.lo)

    @property
    def lockstep_tested(self) -> bool:
        return bool(self.waits)

    def busy_ns(self, i: int) -> int:
        return self.span_ns - V.length(*self.idle[i])

    def busy(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return V.gaps(*self.idle[i], self.lo, self.hi)

    def others(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """The union of every other rank's busy time (or compute, on a GPU report)."""
        if self.others_busy is not None:
            return self.others_busy[i]
        n = len(self.names)
        return V.union(
            np.concatenate([self.busy(j)[0] for j in range(n) if j != i]),
            np.concatenate([self.busy(j)[1] for j in range(n) if j != i]),
        )


def detect(view: V.TraceView, th: StageImbalanceThresholds) -> Finding:
    trace, st = view.trace, view.steady()
    ranks = gpu_ranks(view, st) if view.has_gpu else cpu_ranks(view, st, th)
    if ranks is None or len(ranks.names) < 2:
        found = 0 if ranks is None else len(ranks.names)
        return Finding(
            KLASS,
            State.NOT_JUDGED,
            reason=f"{found} rank(s) in the report ({_what(trace)}): an imbalance between "
            "ranks needs two or more",
        )
    return _judge(trace, st, ranks, th)


def _what(trace: T.Trace) -> str:
    if V.has_gpu(trace):
        return "GPUs running compute kernels in the window"
    return "processes whose main thread computes and waits in condition variables"


def balanced_ns(busy: list[int], idle_busiest: int) -> float:
    """The window a split giving every rank the same work would take: the work spread evenly
    plus the busiest rank's own idle (fill, drain, message latency), which it keeps."""
    return sum(busy) / len(busy) + idle_busiest


def lockstep_share(ranks: Ranks, light: int, heavy: int, th: StageImbalanceThresholds) -> float:
    """Share of the least busy rank's idle stretches of ``min_idle_us`` or more whose last
    ``lockstep_window_us`` finds the busiest rank waiting too (0 when it has none)."""
    s, e = ranks.idle[light]
    long_ = e - s >= th.min_idle_us * 1000
    if not long_.any():
        return 0.0
    ends = e[long_]
    near = V.overlap_each(ends - int(th.lockstep_window_us * 1000), ends, *ranks.waits[heavy])
    return float((near > 0).mean())


def _judge(trace: T.Trace, st: V.Steady, ranks: Ranks, th: StageImbalanceThresholds) -> Finding:
    n = len(ranks.names)
    span = ranks.span_ns
    busy = [ranks.busy_ns(i) for i in range(n)]
    heavy, light = int(np.argmax(busy)), int(np.argmin(busy))
    t_bal = balanced_ns(busy, span - busy[heavy])
    others = ranks.others(light)
    on_peer = V.overlap_total(*ranks.idle[light], *others)
    metrics: dict[str, float] = {
        "stage_idle_share": on_peer / span,
        "busy_share_min": busy[light] / span,
        "busy_share_max": busy[heavy] / span,
        "balanced_share": min(1.0, t_bal / span),
        "ranks": float(n),
    }
    if ranks.lockstep_tested:
        metrics["lockstep_share"] = lockstep_share(ranks, light, heavy, th)
    metrics["saving_share"] = 1.0 - metrics["balanced_share"]
    for i, b in enumerate(busy):  # ranks in device or process-id order (torchrun's rank order)
        metrics[f"busy_share_rank{i}"] = b / span
    if st.mode == "nvtx" and st.per_step and (ranks.lo, ranks.hi) == (st.lo, st.hi):
        metrics["observed_step_ms"] = span / 1e6 / st.n_steps  # type: ignore[operator]
        metrics["balanced_step_ms"] = min(span, t_bal) / 1e6 / st.n_steps  # type: ignore[operator]
    piped = metrics.get("lockstep_share", 0.0) <= th.max_lockstep_share
    saves = metrics["saving_share"] >= th.min_saving_share
    ws, we = ranks.idle[light]
    on = V.overlap_each(ws, we, *others)
    evidence = [
        V.stamp(st, ws[i], we[i], rank=ranks.names[light], peer_busy_ns=int(on[i]))
        for i in V.top(on)
        if on[i] > 0
    ]
    finding = Finding(
        KLASS, piped and saves, metrics["saving_share"], metrics, evidence,
        _reason(ranks, metrics, light, piped, saves, th),
    )  # fmt: skip
    return _predicted(finding)


def _reason(
    ranks: Ranks,
    m: dict[str, float],
    light: int,
    piped: bool,
    saves: bool,
    th: StageImbalanceThresholds,
) -> str:
    lockstep = ""
    if ranks.lockstep_tested:
        lockstep = (
            f", and {m['lockstep_share']:.0%} of its waits end with the busiest rank waiting too "
            f"({'<=' if piped else '>'} {th.max_lockstep_share:.0%}: "
            f"{'pipeline hand-offs' if piped else 'ranks in lockstep, as in a collective'})"
        )
    return (
        f"{len(ranks.names)} ranks ({ranks.source}) busy {m['busy_share_min']:.1%} to "
        f"{m['busy_share_max']:.1%} of {ranks.span_ns / 1e6:.1f} ms; the least busy "
        f"({ranks.names[light]}) waits {m['stage_idle_share']:.1%} of the window while another "
        f"rank computes{lockstep}; an even split would take {m['balanced_share']:.1%} of the "
        f"window, saving {m['saving_share']:.1%} ({'>=' if saves else '<'} "
        f"{th.min_saving_share:.0%}); {ranks.note}"
    )


def _predicted(f: Finding) -> Finding:
    """``f`` with its prediction: the work re-split evenly, the window would take the balanced
    split's bound, all else kept (the number the rule compares, as ``1 / balanced_share``)."""
    share = float(f.metrics.get("balanced_share", 0.0))
    if share <= 0.0:
        return replace(f, prediction_note="no balanced bound: the ranks' busy times were not read")
    step = f.metrics.get("balanced_step_ms")
    return replace(
        f,
        predicted_speedup=round(1.0 / share, 4),
        predicted_step_ms=None if step is None else round(float(step), 4),
        prediction_note="the work re-split evenly over the ranks: the balanced split's bound",
    )


def gpu_ranks(view: V.TraceView, st: V.Steady) -> Ranks:
    """One rank per GPU with compute in the window: idle = its NCCL waits, not hidden by its own
    compute, on a late rank that computed or issued more work (:func:`V.charges`)."""
    act = V.gpu_activity(view.trace, st.lo, st.hi)
    compute = ~((act.kind == V.KIND_KERNEL) & act.nccl)
    devices = [int(d) for d in V.few_unique(act.device[compute & (act.kind == V.KIND_KERNEL)])]
    ch = V.charges(view, st)
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    idle, others = [], []
    for d in devices:
        idle.append(ch.union(d, "peer_compute", "peer_work") if d in ch.parts else empty)
        rest = [V.compute_union(act, o) for o in devices if o != d]
        others.append(_merge(rest))
    names = [f"gpu{d}" for d in devices]
    source = (
        "one per GPU; idle = its NCCL waits on a rank that computed or issued more work, matched "
        "across the GPUs"
    )
    return Ranks(st.lo, st.hi, names, idle, [], source, st.note, others_busy=others)


def _merge(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return V.union(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def _main_thread_calls(
    trace: T.Trace, st: V.Steady, th: StageImbalanceThresholds
) -> dict[str, Any]:
    """Every OS-runtime call of at least ``min_wait_us`` made by a process's main thread and
    overlapping the window (clipped to it): start, end, pid, and ``wait`` (one of
    ``wait_calls``)."""
    empty = np.zeros(0, np.int64)
    if not trace.has("OSRT_API"):
        return {"start": empty, "end": empty, "pid": empty, "wait": empty.astype(bool)}
    ids = V.id_list(V.name_ids(trace, list(th.wait_calls))) or "NULL"
    main = f"(t.globalTid & {_ID_MASK}) = ((t.globalTid >> 24) & {_ID_MASK})"
    where = f'{V.WINDOW} AND {main} AND t."end" - t.start >= :min'
    cols = {
        "start": "t.start",
        "end": 't."end"',
        "pid": f"(t.globalTid >> 24) & {_ID_MASK}",
        "wait": f"t.nameId IN ({ids})",
    }
    params = {"lo": st.lo, "hi": st.hi, "min": int(th.min_wait_us * 1000)}
    rows = T.int_columns(trace, "OSRT_API", cols, where, params)
    rows = V.by_start(rows)
    rows["start"] = np.clip(rows["start"], st.lo, st.hi)
    rows["end"] = np.clip(rows["end"], st.lo, st.hi)
    rows["wait"] = rows["wait"].astype(bool)
    return rows


def _loop_span(calls: dict[str, Any], pids: list[int], skip: float) -> tuple[int, int]:
    """Where the ranks pipeline, without the suite's window: from the first to the last wait
    every rank makes, after the longest stretch in its first half in which no rank waits
    (start-up work: imports, the first optimizer step), less ``skip`` of what is left."""
    waits = calls["wait"] & np.isin(calls["pid"], pids)
    lo = max(int(calls["start"][waits & (calls["pid"] == p)].min()) for p in pids)
    hi = min(int(calls["end"][waits & (calls["pid"] == p)].max()) for p in pids)
    s = calls["start"][waits]
    s = s[(s >= lo) & (s <= hi)]
    gap = np.diff(s)
    first_half = s[:-1] < lo + (hi - lo) // 2
    if gap.size and first_half.any():
        i = int(np.argmax(np.where(first_half, gap, -1)))
        lo = int(s[i + 1])
    return lo + int(skip * max(0, hi - lo)), hi


def cpu_ranks(view: V.TraceView, st: V.Steady, th: StageImbalanceThresholds) -> Ranks | None:
    """One rank per process whose main thread waits in ``wait_calls`` at least ``min_waits``
    times and computes (is in no OS-runtime call) at least ``min_rank_busy_share`` of the
    window; its idle is every OS-runtime call of its main thread. Without the suite's NVTX
    window, the window is narrowed to where the ranks pipeline (:func:`_loop_span`)."""
    trace = view.trace
    calls = _main_thread_calls(trace, st, th)
    pid, wait = calls["pid"], calls["wait"]
    pids = [int(p) for p in np.unique(pid[wait]) if (wait & (pid == p)).sum() >= th.min_waits]
    if len(pids) < 2:
        return Ranks(st.lo, st.hi, [f"pid{p}" for p in pids], [], [], "", st.note)
    lo, hi, note = st.lo, st.hi, st.note
    if st.mode != "nvtx":
        skip = view.config.window.startup_skip_share
        lo, hi = _loop_span(calls, pids, skip)
        if hi <= lo:
            return None
        note = (
            f"no NVTX steps: window = where every rank waits, after the longest stretch without "
            f"waits in its first half and {skip:.0%} more ({(hi - lo) / 1e6:.0f} ms)"
        )
    names, idle, waits = [], [], []
    for p in pids:
        mine = pid == p
        s, e = V.union(np.clip(calls["start"][mine], lo, hi), np.clip(calls["end"][mine], lo, hi))
        if 1.0 - V.length(s, e) / max(1, hi - lo) >= th.min_rank_busy_share:
            names.append(f"pid{p}")
            idle.append((s, e))
            w = mine & wait
            waits.append(
                V.union(np.clip(calls["start"][w], lo, hi), np.clip(calls["end"][w], lo, hi))
            )
    source = "one per process; idle = its main thread in an OS-runtime call"
    return Ranks(lo, hi, names, idle, waits, source, note)
