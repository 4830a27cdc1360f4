"""What a timeline shows, gathered from one nsys SQLite export: which steps, the rows (per host
thread its NVTX ranges and CUDA API calls, then one per GPU stream), the bars in them and the
GPU's idle time. No drawing here: :mod:`analysis.plots.timeline` draws a :class:`TimelineData`.

The host runs ahead of the GPU: a step's NVTX range on the host ends when its work is launched,
and the GPU runs that work later (a CUDA graph replay many steps later). So the GPU rows show
the work launched inside the shown steps, wherever it runs, as nsys's ``nvtx_gpu_proj_trace``
projects a range onto the GPU: every kernel, copy, memset and graph replay whose correlation id
is that of a CUDA API call the steps' process made inside one of the steps. The GPU's span of
the steps runs from the end of the previous step's work (or the first step's start, where that
is later) to the end of the last step's work; its idle time is the gaps in the union of the
steps' work over that span, the same sum ``gpu_work.csv`` takes over the measured window.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import trace as tr
from analysis.plots.numbers import g3, share_fine
from bottlenecks import MEASURE

__all__ = ["GRAPH_TRACE", "TimelineData", "gpu_activity", "load_timeline", "merge"]

#: nsys's table of CUDA graph replays traced as one item each (its default graph tracing): the
#: replay's span is where the graph's kernels run.
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"

#: Columns of :attr:`TimelineData.bars`.
BAR_COLUMNS = ["row", "start_ms", "end_ms", "kind", "text", "label"]

#: The row groups: a thread's NVTX ranges, its CUDA API calls, a GPU stream, and the union of
#: every stream (shown where there are several; it carries the idle time).
NVTX, API, GPU, GPU_ALL = "nvtx", "api", "gpu", "gpu_all"


@dataclass
class TimelineData:
    """What a timeline shows, in ms relative to the first shown step's start on the host.

    ``rows`` are the row labels top to bottom and ``groups`` their kind (:data:`NVTX`,
    :data:`API`, :data:`GPU`, :data:`GPU_ALL`); ``bars`` has one row per interval
    (:data:`BAR_COLUMNS`): ``row`` (index into ``rows``), ``start_ms``, ``end_ms``, ``kind``
    (colour key: ``nvtx``, ``api:<category>``, a ``GPU_COLORS`` key, or ``busy`` for the union
    row), ``text`` (NVTX range name, else NA) and ``label`` (``step 3`` for steps, the range name
    otherwise). Host rows hold the shown steps (``t0_ns`` to ``host_t1_ns``); GPU rows the work
    launched inside them, from ``gpu_t0_ns`` to ``gpu_t1_ns`` (None: no GPU work). ``idle``
    lists the gaps in that work over the GPU span, ``idle_share`` their share of it (None when
    the export recorded no GPU activity at all); ``lag_ms`` how long after its launch call the
    steps' GPU work began, in median (how far the host runs ahead).
    """

    path: Path
    t0_ns: int
    t1_ns: int
    step_indices: list[int]
    host_t1_ns: int = 0
    gpu_t0_ns: int | None = None
    gpu_t1_ns: int | None = None
    lag_ms: float | None = None
    rows: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    bars: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=BAR_COLUMNS))
    step_bounds_ms: list[float] = field(default_factory=list)
    gpu_bounds_ms: list[float] = field(default_factory=list)
    idle: list[tuple[float, float]] = field(default_factory=list)
    idle_share: float | None = None
    has_gpu: bool = False

    @property
    def span_ms(self) -> float:
        """The drawn span: the host's steps and the GPU work they launched."""
        return (self.t1_ns - self.t0_ns) / 1e6

    @property
    def host_ms(self) -> float:
        return (self.host_t1_ns - self.t0_ns) / 1e6

    @property
    def gpu_ms(self) -> float | None:
        """The GPU's span of the steps' work (None: no GPU work in them)."""
        if self.gpu_t0_ns is None or self.gpu_t1_ns is None:
            return None
        return (self.gpu_t1_ns - self.gpu_t0_ns) / 1e6

    @property
    def gpu_range_ms(self) -> tuple[float, float] | None:
        """(start, end) of the GPU span in the drawing's ms."""
        if self.gpu_t0_ns is None or self.gpu_t1_ns is None:
            return None
        return (self.gpu_t0_ns - self.t0_ns) / 1e6, (self.gpu_t1_ns - self.t0_ns) / 1e6

    def describe(self) -> str:
        """One line: which steps, how long on the host and on the GPU, how idle the GPU was
        (the one place these numbers are written: the panel's title and the report's caption)."""
        if not self.step_indices:
            steps = "measured window"
        elif len(self.step_indices) == 1:
            steps = f"step {self.step_indices[0]}"
        else:
            steps = f"steps {self.step_indices[0]}-{self.step_indices[-1]}"
        text = f"{steps} · host {g3(self.host_ms)} ms"
        if self.idle_share is None:
            return f"{text} · no GPU activity recorded"
        gpu = self.gpu_ms
        if gpu is None:
            return f"{text} · no GPU work launched in them"
        text += f" · their GPU work {g3(gpu)} ms"
        lag = self.lag_ms or 0.0
        if lag >= max(1.0, 0.1 * self.host_ms):
            text += f", run {g3(lag)} ms after launch (median)"
        return f"{text} · GPU idle {share_fine(self.idle_share)}"


@dataclass(frozen=True)
class _Steps:
    """The shown steps (host ranges, in order) and the one before them, if any."""

    starts: np.ndarray
    ends: np.ndarray
    indices: list[int]
    pid: int | None
    main_tid: object
    prev: tuple[int, int] | None


def _pick_steps(trace: tr.Trace, steps: int) -> _Steps:
    """``steps`` consecutive completed steps from the middle of ``measure`` (the process with
    the most steps: one per rank under DDP, in lockstep); without steps the measured window."""
    try:
        w0, w1 = tr.window(trace, MEASURE)
    except tr.TraceError:
        w0, w1 = None, None
    st = tr.step_ranges(trace)
    st = st[st["end_ns"].notna()]
    if st.empty:
        if w0 is None:
            raise tr.TraceError(f"{trace.path}: no steps and no recorded activity to draw")
        return _Steps(np.array([w0]), np.array([w1]), [], None, None, None)
    pid = st.groupby("pid", dropna=False).size().idxmax()
    st = (st[st["pid"] == pid] if pd.notna(pid) else st).sort_values("start_ns")
    inside = st
    if w0 is not None:
        inside = st[(st["start_ns"] >= w0) & (st["end_ns"].astype("int64") <= w1)]
    if inside.empty:
        inside = st
    k = max(1, min(steps, len(inside)))
    i0 = (len(inside) - k + 1) // 2  # middle, leaning late (past warm-up effects)
    chosen = inside.iloc[i0 : i0 + k]
    before = st[st["start_ns"] < int(chosen["start_ns"].iloc[0])]
    prev = None
    if not before.empty:
        prev = (int(before["start_ns"].iloc[-1]), int(before["end_ns"].astype("int64").iloc[-1]))
    return _Steps(
        chosen["start_ns"].to_numpy("int64"),
        chosen["end_ns"].astype("int64").to_numpy("int64"),
        [int(i) for i in chosen["step_index"]],
        int(pid) if pd.notna(pid) else None,
        chosen["global_tid"].iloc[0],
        prev,
    )


def _gpu_kind_copy(direction: object, pageable: object) -> str:
    d = str(direction) if pd.notna(direction) else ""
    if d == "HtoD":
        return "htod_pageable" if pd.notna(pageable) and bool(pageable) else "htod"
    return "dtoh" if d == "DtoH" else "copy_other"


def _graph_replays(trace: tr.Trace) -> pd.DataFrame:
    """CUDA graph replays traced as one item each (:data:`GRAPH_TRACE`), where the export has
    them: start, end, device, stream, correlation id, pid."""
    cols = ["start_ns", "end_ns", "device_id", "stream_id", "correlation_id", "pid"]
    if not trace.has(GRAPH_TRACE):
        return pd.DataFrame(columns=cols)
    _, rows = trace.query(
        f'SELECT start, "end", deviceId, streamId, correlationId, '
        f"(globalPid >> 24) & 16777215 FROM {GRAPH_TRACE}"
    )
    return pd.DataFrame(rows, columns=cols)


def gpu_activity(trace: tr.Trace) -> pd.DataFrame:
    """Every kernel, copy, memset and graph replay of the export, one row each: ``start_ns``,
    ``end_ns``, ``device_id``, ``stream_id``, ``correlation_id``, ``pid`` and ``kind`` (a
    ``GPU_COLORS`` key of :mod:`analysis.plots.timeline`)."""
    cols = ["start_ns", "end_ns", "device_id", "stream_id", "correlation_id", "pid"]
    k = tr.kernels(trace)
    nccl = k["name"].astype(str).str.lower().str.contains("nccl", regex=False)
    c = tr.memcpy(trace)
    parts = [
        k[cols].assign(kind=np.where(nccl, "nccl", "kernel")),
        c[cols].assign(
            kind=[_gpu_kind_copy(d, p) for d, p in zip(c["direction"], c["pageable"], strict=True)]
        ),
        tr.memset(trace)[cols].assign(kind="memset"),
        _graph_replays(trace).assign(kind="graph"),
    ]
    parts = [p.astype({c: "float64" for c in cols}) for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame({**{c: pd.Series(dtype="float64") for c in cols},
                             "kind": pd.Series(dtype=object)})  # fmt: skip
    return pd.concat(parts, ignore_index=True).sort_values("start_ns", kind="stable")


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as sorted, disjoint (starts, ends)."""
    if not len(starts):
        return np.asarray(starts, float), np.asarray(ends, float)
    order = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts, float)[order], np.asarray(ends, float)[order]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]
    return s[new], np.maximum.reduceat(e, np.flatnonzero(new))


def _project(api: pd.DataFrame, gpu: pd.DataFrame, steps: _Steps) -> tuple[pd.DataFrame, dict]:
    """The GPU work launched inside each step (and the step before the shown ones, number -1):
    ``gpu`` rows with a ``step`` column (0.. for the shown steps), and per step the end of its
    work (``{step: end_ns}``)."""
    starts, ends = steps.starts, steps.ends
    if steps.prev is not None:
        starts, ends = np.r_[steps.prev[0], starts], np.r_[steps.prev[1], ends]
    calls = api if steps.pid is None else api[api["pid"] == steps.pid]
    t = calls["start_ns"].to_numpy("int64")
    i = np.searchsorted(starts, t, side="right") - 1
    inside = (i >= 0) & (t <= ends[np.clip(i, 0, None)])
    first = -1 if steps.prev is not None else 0
    step_of = pd.DataFrame({"correlation_id": calls["correlation_id"].to_numpy(float)[inside],
                            "step": i[inside] + first, "launch_ns": t[inside]})  # fmt: skip
    step_of = step_of.dropna().drop_duplicates("correlation_id")
    mine = gpu if steps.pid is None else gpu[gpu["pid"] == steps.pid]
    work = mine.merge(step_of, on="correlation_id", how="inner")
    ends_by_step = work.groupby("step")["end_ns"].max().to_dict()
    return work[work["step"] >= 0], ends_by_step


def _gpu_span(work: pd.DataFrame, ends: dict, steps: _Steps) -> tuple[int, int] | None:
    """(start, end) of the shown steps' GPU span: from the end of the previous step's work (the
    first step's start where that is later) to the end of the last step's work."""
    if work.empty:
        return None
    t0 = int(steps.starts[0])
    if -1 in ends:
        t0 = max(t0, int(ends[-1]))
    return t0, int(work["end_ns"].max())


def load_timeline(trace_or_path: tr.Trace | str | Path, *, steps: int = 2) -> TimelineData:
    """Gather the rows, bars and GPU idle time of ``steps`` steady-state steps of one export.

    Steps are consecutive NVTX ``step`` ranges inside the ``measure`` window, taken from its
    middle; without step ranges the whole measured window is shown.
    """
    if isinstance(trace_or_path, tr.Trace):
        return _load(trace_or_path, steps)
    with tr.open_trace(trace_or_path) as trace:
        return _load(trace, steps)


def _load(trace: tr.Trace, steps: int) -> TimelineData:
    pick = _pick_steps(trace, steps)
    t0, host_t1 = int(pick.starts[0]), int(pick.ends[-1])
    api = tr.cuda_api(trace)
    gpu = gpu_activity(trace)
    work, ends = _project(api, gpu, pick)
    span = _gpu_span(work, ends, pick)
    data = TimelineData(path=trace.path, t0_ns=t0, t1_ns=max(host_t1, span[1] if span else 0),
                        step_indices=pick.indices, host_t1_ns=host_t1)  # fmt: skip
    data.has_gpu = not gpu.empty
    bounds = sorted({*pick.starts.tolist(), *pick.ends.tolist()}) if pick.indices else []
    data.step_bounds_ms = [(b - t0) / 1e6 for b in bounds]
    _host_rows(data, trace, pick, api)
    if span is not None:
        data.gpu_t0_ns, data.gpu_t1_ns = span
        data.lag_ms = float((work["start_ns"] - work["launch_ns"]).median()) / 1e6
        data.gpu_bounds_ms = [(span[0] - t0) / 1e6] + [
            (ends[k] - t0) / 1e6 for k in sorted(ends) if k >= 0
        ]
    _gpu_rows(data, work)
    return data


def _lanes(starts: np.ndarray, ends: np.ndarray) -> list[int]:
    """Greedy interval packing: the first lane whose last range has ended (for non-nesting ranges)."""
    lane_end: list[int] = []
    out = []
    for s, e in zip(starts, ends, strict=True):
        for i, le in enumerate(lane_end):
            if le <= s:
                lane_end[i] = e
                out.append(i)
                break
        else:
            lane_end.append(e)
            out.append(len(lane_end) - 1)
    return out


def _clip(df: pd.DataFrame, t0: int, t1: int) -> pd.DataFrame:
    """The rows overlapping [t0, t1], with a known end."""
    df = df[df["end_ns"].notna()]
    return df[(df["start_ns"] < t1) & (df["end_ns"].astype("int64") > t0)]


def _add(data: TimelineData, frame: pd.DataFrame, row: int, kind: object, text: object = None,
         label: object = None, lo: int | None = None, hi: int | None = None) -> None:  # fmt: skip
    """Append ``frame``'s intervals to row ``row`` of the bars, clipped to [lo, hi]."""
    s = frame["start_ns"].to_numpy("float64")
    e = frame["end_ns"].to_numpy("float64")
    if lo is not None:
        s, e = np.maximum(s, lo), np.minimum(e, hi)
    part = pd.DataFrame({
        "row": row, "start_ms": (s - data.t0_ns) / 1e6, "end_ms": (e - data.t0_ns) / 1e6,
        "kind": kind if isinstance(kind, str) else np.asarray(kind, dtype=object),
        "text": pd.NA if text is None else np.asarray(text, dtype=object),
        "label": pd.NA if label is None else np.asarray(label, dtype=object),
    })  # fmt: skip
    data.bars = part if data.bars.empty else pd.concat([data.bars, part], ignore_index=True)


def _thread_label(names: dict, gtid: object, main_tid: object) -> str:
    name, tid = names.get(gtid, (None, None))
    if (tid is None or pd.isna(tid)) and pd.notna(gtid):
        tid = int(gtid) & 0xFFFFFF
    who = "main thread" if gtid == main_tid else (name if isinstance(name, str) else "thread")
    return f"{who} (tid {tid})" if tid is not None and pd.notna(tid) else who


def _host_rows(data: TimelineData, trace: tr.Trace, pick: _Steps, api: pd.DataFrame) -> None:
    """Per host thread (the steps' thread first, then by first activity) its NVTX ranges,
    stacked by depth, and a row of its CUDA API calls; all clipped to the shown steps."""
    t0, t1 = data.t0_ns, data.host_t1_ns
    nvtx = _clip(tr.nvtx_ranges(trace), t0, t1)
    nvtx = nvtx[nvtx["text"].notna() & (nvtx["text"] != MEASURE)]
    st = tr.step_ranges(trace)
    st = st[st["step_index"].isin(pick.indices) & ((st["pid"] == pick.pid) if pick.pid else True)]
    step_no = dict(
        zip(zip(st["global_tid"], st["start_ns"], strict=True), st["step_index"], strict=True)
    )
    shown = [f"{t} {step_no[(g, s)]}" if (g, s) in step_no else t
             for g, s, t in zip(nvtx["global_tid"], nvtx["start_ns"], nvtx["text"], strict=True)]  # fmt: skip
    nvtx = nvtx.assign(shown=pd.Series(shown, index=nvtx.index, dtype=object))
    calls = _clip(api, t0, t1)
    names = {r.global_tid: (r.thread_name, r.tid) for r in tr.threads(trace).itertuples()
             if pd.notna(r.global_tid)}  # fmt: skip
    first: dict[object, int] = {}
    for df in (nvtx, calls):
        for gtid, s in df.groupby("global_tid", dropna=False)["start_ns"].min().items():
            first[gtid] = min(first.get(gtid, s), s)
    for gtid in sorted(first, key=lambda g: (g != pick.main_tid, first[g])):
        label = _thread_label(names, gtid, pick.main_tid)
        if pd.notna(gtid):
            _nvtx_rows(data, nvtx[nvtx["global_tid"] == gtid], label)
            mine = calls[calls["global_tid"] == gtid]
            if not mine.empty:
                data.rows.append(f"CUDA API · {'main' if gtid == pick.main_tid else label}")
                data.groups.append(API)
                cat = mine["category"].where(mine["category"].isin(["launch", "sync", "memcpy"]))
                _add(data, mine, len(data.rows) - 1, "api:" + cat.fillna("other").astype(str),
                     lo=t0, hi=t1)  # fmt: skip


def _nvtx_rows(data: TimelineData, ranges: pd.DataFrame, label: str) -> None:
    """One thread's NVTX ranges: a row per nesting depth, then lanes for unnested ranges."""
    if ranges.empty:
        return
    t0, t1 = data.t0_ns, data.host_t1_ns
    nested = ranges[ranges["depth"].notna()]
    levels = {d: i for i, d in enumerate(sorted(nested["depth"].astype(int).unique()))}
    flat = ranges[ranges["depth"].isna()].sort_values("start_ns")
    flat_lane = _lanes(flat["start_ns"].to_numpy("int64"), flat["end_ns"].to_numpy("int64"))
    base = len(data.rows)
    for i in range(len(levels) + (max(flat_lane) + 1 if flat_lane else 0)):
        data.rows.append(f"{label} · NVTX" if i == 0 else "")
        data.groups.append(NVTX)
    for d, lvl in levels.items():
        part = nested[nested["depth"].astype(int) == d]
        _add(data, part, base + lvl, "nvtx", part["text"], part["shown"], t0, t1)
    for lane in set(flat_lane):
        part = flat[np.array(flat_lane) == lane]
        _add(data, part, base + len(levels) + lane, "nvtx", part["text"], part["shown"], t0, t1)


def _gpu_rows(data: TimelineData, work: pd.DataFrame) -> None:
    """One row per GPU stream with the steps' work, a row of their union where there are
    several streams, and the idle gaps of that union over the GPU span."""
    if not data.has_gpu:
        data.rows.append("GPU")
        data.groups.append(GPU)
        return
    if data.gpu_t0_ns is None:
        data.rows.append("GPU (no work launched in these steps)")
        data.groups.append(GPU)
        data.idle_share = 1.0
        return
    lo, hi = data.gpu_t0_ns, data.gpu_t1_ns
    work = work[work["end_ns"] > lo]
    keys = work[["device_id", "stream_id"]].drop_duplicates().fillna(-1)
    keys = keys.sort_values(["device_id", "stream_id"])
    bs, be = merge(np.maximum(work["start_ns"].to_numpy(float), lo), work["end_ns"].to_numpy(float))
    if len(keys) > 1:
        data.rows.append("GPU · all streams")
        data.groups.append(GPU_ALL)
        _add(data, pd.DataFrame({"start_ns": bs, "end_ns": be}), len(data.rows) - 1, "busy")
    for dev, stream in keys.itertuples(index=False):
        part = work[
            (work["device_id"].fillna(-1) == dev) & (work["stream_id"].fillna(-1) == stream)
        ]
        nccl = " · NCCL" if (part["kind"] == "nccl").sum() * 2 > len(part) else ""
        dev_s, str_s = ("?" if v < 0 else int(v) for v in (dev, stream))
        data.rows.append(f"GPU {dev_s} · stream {str_s}{nccl}")
        data.groups.append(GPU)
        _add(data, part, len(data.rows) - 1, part["kind"], lo=lo, hi=hi)
    gap_s, gap_e = np.r_[lo, be], np.r_[bs, hi]
    keep = gap_e > gap_s
    data.idle = [((s - data.t0_ns) / 1e6, (e - data.t0_ns) / 1e6)
                 for s, e in zip(gap_s[keep], gap_e[keep], strict=True)]  # fmt: skip
    data.idle_share = float((gap_e[keep] - gap_s[keep]).sum()) / (hi - lo) if hi > lo else 0.0
