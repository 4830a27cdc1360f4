"""What a timeline shows, gathered from one nsys SQLite export: which steps, the rows (per host
thread its NVTX ranges and CUDA API calls, then one per GPU stream), the bars in them and the
GPU's idle gaps. No drawing here: :mod:`analysis.plots.timeline` draws a :class:`TimelineData`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import trace as tr

__all__ = ["TimelineData", "load_timeline"]


@dataclass
class TimelineData:
    """What a timeline shows, in ms relative to the first shown step's start.

    ``rows`` are the row labels top to bottom and ``groups`` their kind (``nvtx``, ``api``,
    ``gpu``); ``bars`` has one row per drawn interval: ``row`` (index into ``rows``),
    ``start_ms``, ``end_ms``, ``kind`` (colour key: ``nvtx``, ``api:<category>`` or a
    :data:`GPU_COLORS` key), ``text`` (NVTX range name, else NA) and ``label`` (what the bar
    says: ``step 3`` for steps, the range name otherwise). ``idle`` lists the gaps in
    the union of GPU activity over the span; ``idle_share`` is their total over ``span_ms``
    (None when the export recorded no GPU activity at all).
    """

    path: Path
    t0_ns: int
    t1_ns: int
    step_indices: list[int]
    rows: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    bars: pd.DataFrame = field(default_factory=pd.DataFrame)
    step_bounds_ms: list[float] = field(default_factory=list)
    idle: list[tuple[float, float]] = field(default_factory=list)
    idle_share: float | None = None
    has_gpu: bool = False

    @property
    def span_ms(self) -> float:
        return (self.t1_ns - self.t0_ns) / 1e6

    def describe(self) -> str:
        """One line: which steps, how long, how idle the GPU was."""
        if not self.step_indices:
            steps = "measured window"
        elif len(self.step_indices) == 1:
            steps = f"step {self.step_indices[0]}"
        else:
            steps = f"steps {self.step_indices[0]}-{self.step_indices[-1]}"
        idle = (
            f"GPU idle {100 * self.idle_share:.1f}%"
            if self.idle_share is not None
            else "no GPU activity recorded"
        )
        return f"{steps} · {self.span_ms:,.1f} ms · {idle}"


def _pick_steps(trace: tr.Trace, steps: int) -> tuple[int, int, list[int]]:
    """(t0, t1, step indices): ``steps`` consecutive completed steps from the middle of measure."""
    try:
        w0, w1 = tr.window(trace)
    except tr.TraceError:
        w0, w1 = None, None
    st = tr.step_ranges(trace)
    st = st[st["end_ns"].notna()]
    if not st.empty:
        # The process with the most steps (one per rank under DDP; they run in lockstep).
        pid = st.groupby("pid", dropna=False).size().idxmax()
        st = st[st["pid"] == pid] if pd.notna(pid) else st
        inside = st
        if w0 is not None:
            inside = st[(st["start_ns"] >= w0) & (st["end_ns"].astype("int64") <= w1)]
        if inside.empty:
            inside = st
        inside = inside.sort_values("start_ns")
        k = max(1, min(steps, len(inside)))
        i0 = (len(inside) - k + 1) // 2  # middle, leaning late (past warm-up effects)
        chosen = inside.iloc[i0 : i0 + k]
        return (
            int(chosen["start_ns"].min()),
            int(chosen["end_ns"].astype("int64").max()),
            [int(i) for i in chosen["step_index"]],
        )
    if w0 is None:
        raise tr.TraceError(f"{trace.path}: no steps and no recorded activity to draw")
    return w0, w1, []


def _overlapping(df: pd.DataFrame, t0: int, t1: int) -> pd.DataFrame:
    df = df[df["end_ns"].notna()]
    return df[(df["start_ns"] < t1) & (df["end_ns"].astype("int64") > t0)]


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


def _gpu_kind_kernel(name: object) -> str:
    return "nccl" if isinstance(name, str) and "nccl" in name.lower() else "kernel"


def _gpu_kind_copy(row: pd.Series) -> str:
    d = str(row["direction"]) if pd.notna(row["direction"]) else ""
    if d == "HtoD":
        return "htod_pageable" if row["pageable"] is True else "htod"
    if d == "DtoH":
        return "dtoh"
    return "copy_other"


def _merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def load_timeline(trace_or_path: tr.Trace | str | Path, *, steps: int = 2) -> TimelineData:
    """Gather the rows, bars and GPU idle gaps of ``steps`` steady-state steps of one export.

    Steps are consecutive NVTX ``step`` ranges inside the ``measure`` window, taken from its
    middle; without step ranges the whole measured window is shown.
    """
    if isinstance(trace_or_path, tr.Trace):
        return _load(trace_or_path, steps)
    with tr.open_trace(trace_or_path) as trace:
        return _load(trace, steps)


def _load(trace: tr.Trace, steps: int) -> TimelineData:
    t0, t1, idx = _pick_steps(trace, steps)
    data = TimelineData(path=trace.path, t0_ns=t0, t1_ns=t1, step_indices=idx)

    def ms(ns: pd.Series | int) -> pd.Series | float:
        return (ns - t0) / 1e6

    st = tr.step_ranges(trace)
    st = st[st["step_index"].isin(idx)] if idx else st.iloc[0:0]
    bounds = sorted({*st["start_ns"].astype("int64"), *st["end_ns"].astype("int64")})
    data.step_bounds_ms = [float(ms(b)) for b in bounds]
    main_tid = st["global_tid"].iloc[0] if not st.empty else None

    nvtx = _overlapping(tr.nvtx_ranges(trace), t0, t1)
    nvtx = nvtx[nvtx["text"].notna() & (nvtx["text"] != "measure")]
    # Shown text: "step 3" for the step ranges, the range name otherwise.
    step_no = {
        (g, s): i
        for g, s, i in zip(st["global_tid"], st["start_ns"], st["step_index"], strict=True)
    }
    shown = [
        f"{t} {step_no[(g, s)]}" if (g, s) in step_no else t
        for g, s, t in zip(nvtx["global_tid"], nvtx["start_ns"], nvtx["text"], strict=True)
    ]
    nvtx = nvtx.assign(shown=pd.Series(shown, index=nvtx.index, dtype=object))
    api = _overlapping(tr.cuda_api(trace), t0, t1)
    thread_names = {
        r.global_tid: (r.thread_name, r.tid, r.pid)
        for r in tr.threads(trace).itertuples()
        if pd.notna(r.global_tid)
    }

    # Thread order: main thread first, then the others by when they first show activity.
    first: dict[object, int] = {}
    for df in (nvtx, api):
        for gtid, s in df.groupby("global_tid", dropna=False)["start_ns"].min().items():
            first[gtid] = min(first.get(gtid, s), s)
    order = sorted(first, key=lambda g: (g != main_tid, first[g]))

    def thread_label(gtid: object) -> str:
        name, tid, _ = thread_names.get(gtid, (None, None, None))
        if (tid is None or pd.isna(tid)) and pd.notna(gtid):
            tid = int(gtid) & 0xFFFFFF
        who = "main thread" if gtid == main_tid else (name if isinstance(name, str) else "thread")
        return f"{who} (tid {tid})" if tid is not None and pd.notna(tid) else who

    bars: list[pd.DataFrame] = []

    def add(
        frame: pd.DataFrame,
        row: int,
        kind: pd.Series | str,
        text: pd.Series | None,
        label: pd.Series | None = None,
    ) -> None:
        s = np.maximum(frame["start_ns"].astype("int64"), t0)
        e = np.minimum(frame["end_ns"].astype("int64"), t1)
        bars.append(
            pd.DataFrame(
                {
                    "row": row,
                    "start_ms": ms(s).to_numpy(float),
                    "end_ms": ms(e).to_numpy(float),
                    "kind": kind if isinstance(kind, str) else kind.to_numpy(object),
                    "text": pd.NA if text is None else text.to_numpy(object),
                    "label": pd.NA if label is None else label.to_numpy(object),
                }
            )
        )

    for gtid in order:
        label = thread_label(gtid)
        ranges = nvtx[nvtx["global_tid"] == gtid] if pd.notna(gtid) else nvtx.iloc[0:0]
        if not ranges.empty:
            nested = ranges[ranges["depth"].notna()]
            levels = {d: i for i, d in enumerate(sorted(nested["depth"].astype(int).unique()))}
            n_nested = len(levels)
            flat = ranges[ranges["depth"].isna()].sort_values("start_ns")
            flat_lane = _lanes(flat["start_ns"].to_numpy("int64"), flat["end_ns"].to_numpy("int64"))
            n_rows = n_nested + (max(flat_lane) + 1 if flat_lane else 0)
            base = len(data.rows)
            for i in range(n_rows):
                data.rows.append(f"{label} · NVTX" if i == 0 else "")
                data.groups.append("nvtx")
            for d, lvl in levels.items():
                part = nested[nested["depth"].astype(int) == d]
                add(part, base + lvl, "nvtx", part["text"], part["shown"])
            for lane in set(flat_lane):
                part = flat[np.array(flat_lane) == lane]
                add(part, base + n_nested + lane, "nvtx", part["text"], part["shown"])
        calls = api[api["global_tid"] == gtid] if pd.notna(gtid) else api.iloc[0:0]
        if not calls.empty:
            row = len(data.rows)
            who = "main" if gtid == main_tid else label
            data.rows.append(f"CUDA API · {who}")
            data.groups.append("api")
            cat = calls["category"].where(calls["category"].isin(["launch", "sync", "memcpy"]))
            add(calls, row, "api:" + cat.fillna("other").astype(str), None)

    kern = tr.kernels(trace)
    copies = tr.memcpy(trace)
    sets = tr.memset(trace)
    data.has_gpu = not (kern.empty and copies.empty and sets.empty)
    gpu_parts = []
    k = _overlapping(kern, t0, t1)
    gpu_parts.append(k.assign(_kind=k["name"].map(_gpu_kind_kernel)))
    c = _overlapping(copies, t0, t1)
    gpu_parts.append(
        c.assign(_kind=c.apply(_gpu_kind_copy, axis=1) if not c.empty else pd.Series(dtype=object))
    )
    m = _overlapping(sets, t0, t1)
    gpu_parts.append(m.assign(_kind="memset"))
    cols = ["start_ns", "end_ns", "device_id", "stream_id", "_kind"]
    nonempty = [p[cols].astype(object) for p in gpu_parts if not p.empty]
    gpu = pd.concat(nonempty, ignore_index=True) if nonempty else pd.DataFrame(columns=cols)
    if data.has_gpu:
        if gpu.empty:
            data.rows.append("GPU (idle in these steps)")
            data.groups.append("gpu")
        else:
            keys = gpu[["device_id", "stream_id"]].drop_duplicates()
            keys = keys.sort_values(["device_id", "stream_id"], key=lambda s: s.fillna(-1))
            for dev, stream in keys.itertuples(index=False):
                part = gpu[
                    (gpu["device_id"].fillna(-1) == (-1 if pd.isna(dev) else dev))
                    & (gpu["stream_id"].fillna(-1) == (-1 if pd.isna(stream) else stream))
                ]
                row = len(data.rows)
                dev_s = "?" if pd.isna(dev) else int(dev)
                str_s = "?" if pd.isna(stream) else int(stream)
                # A stream that mostly runs NCCL kernels is the communication stream: say so.
                kinds = part["_kind"].astype(str)
                nccl = " · NCCL" if (kinds == "nccl").sum() * 2 > len(kinds) else ""
                data.rows.append(f"GPU {dev_s} · stream {str_s}{nccl}")
                data.groups.append("gpu")
                add(part, row, part["_kind"].astype(str), None)
        busy = _merge(
            [
                (max(int(s), t0), min(int(e), t1))
                for s, e in zip(gpu.get("start_ns", []), gpu.get("end_ns", []), strict=True)
            ]
        )
        gaps, cursor = [], t0
        for s, e in busy:
            if s > cursor:
                gaps.append((cursor, s))
            cursor = max(cursor, e)
        if cursor < t1:
            gaps.append((cursor, t1))
        data.idle = [(float(ms(s)), float(ms(e))) for s, e in gaps]
        span = t1 - t0
        data.idle_share = sum(e - s for s, e in gaps) / span if span > 0 else 0.0
    else:
        data.rows.append("GPU")
        data.groups.append("gpu")

    data.bars = (
        pd.concat(bars, ignore_index=True)
        if bars
        else pd.DataFrame(columns=["row", "start_ms", "end_ms", "kind", "text", "label"])
    )
    return data
