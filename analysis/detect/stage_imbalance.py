"""stage_imbalance: one pipeline rank idles, waiting to receive, while another computes.

A report holding several ranks is read rank by rank, each over the same window:

- GPU reports (kernels carry ``deviceId``): a rank is a GPU; it is busy where its compute runs,
  the union of its non-NCCL kernels, copies and memsets. NCCL kernels (a send or receive that
  waits for its peer, or moves bytes) count as idle.
- CPU reports (no GPU activity; nsys's OS-runtime trace): a rank is a process whose main thread
  computes; it is idle in its condition-variable waits (``wait_calls``: how torch.distributed's
  gloo backend blocks in ``recv`` and in a collective's ``wait()``) and busy the rest of the
  time. A process that hardly computes (a launcher such as torchrun's agent) is no rank.

With ``n`` ranks, ``busy_r`` each rank's busy time in the window ``S`` and ``W`` their sum, a split
that gave every rank ``W / n`` would take ``T_bal = W / n + idle_H``: the work spread evenly plus
the busiest rank's own idle (its pipeline fill and drain, message latency), which a balanced
split keeps. That slightly flatters the balanced split (a balanced stage's fill and drain take
one micro-batch of a half, longer than one of the light stage today: ~6% at 8 micro-batches of a
3:1 split), and it is exact for a split that is balanced already (``T_bal = S``).
``balanced_share`` = T_bal / S; the predicted speedup is 1 / balanced_share.

Rule (fires when both hold):
- ``saving_share`` = 1 - balanced_share >= ``min_saving_share``. A balanced pipeline, whose ranks
  wait only in the fill, the drain and the hand-offs, saves nothing: its busiest rank idles as
  much as the others;
- the waits are a pipeline's, not a collective's: at most ``max_lockstep_share`` of the least
  busy rank's waits (those of ``min_idle_us`` or more) end while the busiest rank waits too
  (``lockstep_share``). A collective ends for every rank at once, so ranks in lockstep (DDP)
  are all waiting when it ends, even where one of them was slowed for a while and the others
  waited for it; a pipeline receive ends when the peer sends, and the peer goes on computing.
  The busiest rank waits in: CPU reports, its ``wait_calls`` (a send is an OS-runtime call but
  no wait); GPU reports, no compute kernel or copy running.
impact = saving_share. Main metric ``stage_idle_share``: the window share the least busy rank
waits while another rank computes. Reports with fewer than two ranks are not judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis import trace as T
from analysis.detect import _common as C
from analysis.findings import Finding, State

KLASS = "stage_imbalance"

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
    """The part of each rank's idle that is waiting (``wait_calls`` on the CPU, all of it on a
    GPU), read for lockstep."""
    source: str
    """What a rank is in this report and what its idle is, for the reason."""
    note: str
    """How the window was chosen."""

    @property
    def span_ns(self) -> int:
        return max(1, self.hi - self.lo)

    def busy_ns(self, i: int) -> int:
        return self.span_ns - C.length(*self.idle[i])

    def busy(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return C.gaps(*self.idle[i], self.lo, self.hi)


def detect(trace: T.Trace, thresholds: Mapping[str, Any]) -> Finding:
    th = thresholds[KLASS]
    st = C.steady(trace, thresholds)
    ranks = gpu_ranks(trace, st) if C.has_gpu(trace) else cpu_ranks(trace, st, thresholds)
    if ranks is None or len(ranks.names) < 2:
        found = 0 if ranks is None else len(ranks.names)
        return Finding(
            KLASS,
            State.NOT_JUDGED,
            reason=f"{found} rank(s) in the report ({_what(trace)}): an imbalance between "
            "pipeline stages needs two or more",
        )
    return _judge(trace, st, ranks, th)


def _what(trace: T.Trace) -> str:
    if C.has_gpu(trace):
        return "GPUs running compute kernels in the window"
    return "processes whose main thread computes and waits in condition variables"


def balanced_ns(busy: list[int], idle_busiest: int) -> float:
    """The window a split giving every rank the same work would take: the work spread evenly
    plus the busiest rank's own idle (fill, drain, message latency), which it keeps."""
    return sum(busy) / len(busy) + idle_busiest


def lockstep_share(ranks: Ranks, light: int, heavy: int, th: Mapping[str, Any]) -> float:
    """Share of the least busy rank's idle stretches of ``min_idle_us`` or more whose last
    ``lockstep_window_us`` finds the busiest rank waiting too (0 when it has none)."""
    s, e = ranks.idle[light]
    long_ = e - s >= th["min_idle_us"] * 1000
    if not long_.any():
        return 0.0
    ends = e[long_]
    near = C.overlap_each(ends - int(th["lockstep_window_us"] * 1000), ends, *ranks.waits[heavy])
    return float((near > 0).mean())


def _judge(trace: T.Trace, st: C.Steady, ranks: Ranks, th: Mapping[str, Any]) -> Finding:
    n = len(ranks.names)
    span = ranks.span_ns
    busy = [ranks.busy_ns(i) for i in range(n)]
    heavy, light = int(np.argmax(busy)), int(np.argmin(busy))
    t_bal = balanced_ns(busy, span - busy[heavy])
    others = C.union(
        np.concatenate([ranks.busy(i)[0] for i in range(n) if i != light]),
        np.concatenate([ranks.busy(i)[1] for i in range(n) if i != light]),
    )
    on_peer = C.overlap_total(*ranks.idle[light], *others)
    metrics: dict[str, float] = {
        "stage_idle_share": on_peer / span,
        "lockstep_share": lockstep_share(ranks, light, heavy, th),
        "busy_share_min": busy[light] / span,
        "busy_share_max": busy[heavy] / span,
        "balanced_share": min(1.0, t_bal / span),
        "ranks": float(n),
    }
    metrics["saving_share"] = 1.0 - metrics["balanced_share"]
    for i, b in enumerate(busy):  # ranks in device or process-id order (torchrun's rank order)
        metrics[f"busy_share_rank{i}"] = b / span
    if st.mode == "nvtx" and st.per_step and (ranks.lo, ranks.hi) == (st.lo, st.hi):
        metrics["observed_step_ms"] = span / 1e6 / st.n_steps  # type: ignore[operator]
        metrics["balanced_step_ms"] = min(span, t_bal) / 1e6 / st.n_steps  # type: ignore[operator]
    piped = metrics["lockstep_share"] <= th["max_lockstep_share"]
    saves = metrics["saving_share"] >= th["min_saving_share"]
    ws, we = ranks.idle[light]
    on = C.overlap_each(ws, we, *others)
    evidence = [
        C.stamp(st, ws[i], we[i], rank=ranks.names[light], peer_busy_ns=int(on[i]))
        for i in C.top(on)
        if on[i] > 0
    ]
    reason = (
        f"{n} ranks ({ranks.source}) busy {metrics['busy_share_min']:.1%} to "
        f"{metrics['busy_share_max']:.1%} of {span / 1e6:.1f} ms; the least busy "
        f"({ranks.names[light]}) waits {metrics['stage_idle_share']:.1%} of the window while "
        f"another rank computes, and {metrics['lockstep_share']:.0%} of its waits end with the "
        f"busiest rank waiting too ({'<=' if piped else '>'} {th['max_lockstep_share']:.0%}: "
        f"{'pipeline hand-offs' if piped else 'ranks in lockstep, as in a collective'}); an "
        f"even split would take {metrics['balanced_share']:.1%} of the window, saving "
        f"{metrics['saving_share']:.1%} ({'>=' if saves else '<'} "
        f"{th['min_saving_share']:.0%}); {ranks.note}"
    )
    return Finding(KLASS, piped and saves, metrics["saving_share"], metrics, evidence, reason)


def gpu_ranks(trace: T.Trace, st: C.Steady) -> Ranks:
    """One rank per GPU with compute in the window: idle = not covered by its own non-NCCL
    kernels, copies and memsets."""
    act = C.gpu_activity(trace, st.lo, st.hi)
    work = ~((act.kind == C.KIND_KERNEL) & act.nccl)
    devices = np.unique(act.device[work & (act.kind == C.KIND_KERNEL)])
    idle = []
    for d in devices:
        on = work & (act.device == d)
        idle.append(C.gaps(*C.union(act.start[on], act.end[on]), st.lo, st.hi))
    names = [f"gpu{int(d)}" for d in devices]
    source = "one per GPU; idle = no compute kernel or copy"
    return Ranks(st.lo, st.hi, names, idle, idle, source, st.note)


def _main_thread_calls(trace: T.Trace, st: C.Steady, th: Mapping[str, Any]) -> dict[str, Any]:
    """Every OS-runtime call of at least ``min_wait_us`` made by a process's main thread and
    overlapping the window (clipped to it): start, end, pid, and ``wait`` (one of
    ``wait_calls``)."""
    empty = np.zeros(0, np.int64)
    if not trace.has("OSRT_API"):
        return {"start": empty, "end": empty, "pid": empty, "wait": empty.astype(bool)}
    ids = C.id_list(C.name_ids(trace, list(th["wait_calls"]))) or "NULL"
    main = f"(t.globalTid & {_ID_MASK}) = ((t.globalTid >> 24) & {_ID_MASK})"
    where = f'{C.WINDOW} AND {main} AND t."end" - t.start >= :min'
    cols = {
        "start": "t.start",
        "end": 't."end"',
        "pid": f"(t.globalTid >> 24) & {_ID_MASK}",
        "wait": f"t.nameId IN ({ids})",
    }
    params = {"lo": st.lo, "hi": st.hi, "min": int(th["min_wait_us"] * 1000)}
    rows = T.int_columns(trace, "OSRT_API", cols, where, params)
    rows = C.by_start(rows)
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


def cpu_ranks(trace: T.Trace, st: C.Steady, cfg: Mapping[str, Any]) -> Ranks | None:
    """One rank per process whose main thread waits in ``wait_calls`` at least ``min_waits``
    times and computes (is in no OS-runtime call) at least ``min_rank_busy_share`` of the
    window; its idle is every OS-runtime call of its main thread. Without the suite's NVTX
    window, the window is narrowed to where the ranks pipeline (:func:`_loop_span`)."""
    th = cfg[KLASS]
    calls = _main_thread_calls(trace, st, th)
    pid, wait = calls["pid"], calls["wait"]
    pids = [int(p) for p in np.unique(pid[wait]) if (wait & (pid == p)).sum() >= th["min_waits"]]
    if len(pids) < 2:
        return Ranks(st.lo, st.hi, [f"pid{p}" for p in pids], [], [], "", st.note)
    lo, hi, note = st.lo, st.hi, st.note
    if st.mode != "nvtx":
        skip = float(cfg.get("window", {}).get("startup_skip_share", 0.2))
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
        s, e = C.union(np.clip(calls["start"][mine], lo, hi), np.clip(calls["end"][mine], lo, hi))
        if 1.0 - C.length(s, e) / max(1, hi - lo) >= th["min_rank_busy_share"]:
            names.append(f"pid{p}")
            idle.append((s, e))
            w = mine & wait
            waits.append(
                C.union(np.clip(calls["start"][w], lo, hi), np.clip(calls["end"][w], lo, hi))
            )
    source = "one per process; idle = its main thread in an OS-runtime call"
    return Ranks(lo, hi, names, idle, waits, source, note)
