"""An nsys-GUI-style timeline of 2-3 steady-state steps, drawn from the SQLite export alone.

Rows, top to bottom, as the nsys GUI nests them: for each host thread (main thread first) its NVTX
ranges stacked by nesting depth (``step``, then ``data_load``/``h2d``/``forward``...) and a row of
its CUDA API calls coloured by category (launch / sync / memcpy / other); then one row per GPU
stream with kernels (NCCL kernels in their own colour), memcpys (pageable HtoD in a colour of its
own) and memsets. Gaps in the union of all GPU activity, the "white space", are shaded, and
their share of the shown span is :attr:`TimelineData.idle_share`.

:func:`load_timeline` does the SQL and arithmetic, :func:`plot_timeline` draws one trace,
:func:`plot_pair` draws a baseline above a fix on the same time scale. Figures carry what they
show: ``fig.timelines`` (list of :class:`TimelineData`) and ``fig.idle_share`` (first panel's).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from analysis import trace as tr

__all__ = [
    "API_COLORS",
    "GPU_COLORS",
    "NVTX_COLORS",
    "TimelineData",
    "load_timeline",
    "plot_pair",
    "plot_timeline",
]

# --- colours -----------------------------------------------------------------------------------

NVTX_COLORS: dict[str, str] = {
    "step": "#b8c4d6",
    "data_load": "#f2a541",
    "h2d": "#b07cc6",
    "forward": "#5b8fd0",
    "backward": "#3fa796",
    "optimizer": "#8cc265",
    "measure": "#dddddd",
}
_NVTX_FALLBACK = ("#e6c36a", "#d98cb3", "#8fb3c9", "#c9a38f", "#a3c98f", "#b3a3d9")

API_COLORS: dict[str, str] = {
    "launch": "#4c72b0",
    "sync": "#c0392b",
    "memcpy": "#e67e22",
    "other": "#9e9e9e",
}
API_LABELS = {
    "launch": "API: kernel launch",
    "sync": "API: synchronize (host blocked)",
    "memcpy": "API: memcpy",
    "other": "API: other (memset, alloc, ...)",
}

GPU_COLORS: dict[str, str] = {
    "kernel": "#1f5fa8",
    "nccl": "#d6336c",
    "htod_pageable": "#ff2d2d",
    "htod": "#2ca02c",
    "dtoh": "#8e44ad",
    "copy_other": "#8c564b",
    "memset": "#7f7f7f",
}
GPU_LABELS = {
    "kernel": "GPU: kernel",
    "nccl": "GPU: NCCL kernel",
    "htod_pageable": "GPU: HtoD copy, pageable",
    "htod": "GPU: HtoD copy, pinned",
    "dtoh": "GPU: DtoH copy",
    "copy_other": "GPU: other copy (DtoD ...)",
    "memset": "GPU: memset",
}
IDLE_COLOR = "#ffd9d9"
IDLE_HATCH_COLOR = "#e8a0a0"


def nvtx_color(text: str) -> str:
    """The fixed colour of a harness phase, or a stable colour picked by the name's hash."""
    if text in NVTX_COLORS:
        return NVTX_COLORS[text]
    return _NVTX_FALLBACK[zlib.crc32(text.encode()) % len(_NVTX_FALLBACK)]


# --- data --------------------------------------------------------------------------------------


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


# --- drawing -----------------------------------------------------------------------------------

_ROW_IN = 0.32  # inches per row
_LEFT_IN = 2.3  # room for row labels
_FIG_W = 15.0
_LEGEND_COLS = 6


def _kind_color(kind: str) -> str:
    if kind.startswith("api:"):
        return API_COLORS[kind[4:]]
    return GPU_COLORS[kind]


def draw_timeline(
    data: TimelineData, ax: Axes, *, xlim_ms: float | None = None, title: str | None = None
) -> set[str]:
    """Draw ``data`` into ``ax``; returns the legend keys used (colour kinds and NVTX names)."""
    n = len(data.rows)
    xmax = xlim_ms if xlim_ms is not None else data.span_ms
    pad = xmax * 0.005
    ax.set_xlim(-pad, xmax + pad)
    ax.set_ylim(n - 0.5, -0.5)
    fig = ax.get_figure()
    width_px = ax.get_window_extent().width or fig.get_figwidth() * fig.dpi
    ms_per_px = (xmax + 2 * pad) / width_px
    min_w = ms_per_px * 0.8  # like the GUI: anything that happened stays at least a pixel wide
    used = legend_keys(data)
    h = 0.76

    # Shaded GPU idle time behind the GPU rows, plus a faint band over the whole height.
    gpu_rows = [i for i, g in enumerate(data.groups) if g == "gpu"]
    if gpu_rows and data.idle:
        y0, y1 = min(gpu_rows) - 0.5, max(gpu_rows) + 0.5
        spans = [(s, e - s) for s, e in data.idle]
        ax.broken_barh(
            spans,
            (y0, y1 - y0),
            facecolors=IDLE_COLOR,
            edgecolor=IDLE_HATCH_COLOR,
            hatch="////",
            linewidth=0,
            zorder=0,
        )
        # Over the host rows only the wide gaps, so the eye can follow them up to their cause.
        wide = [(s, w) for s, w in spans if w >= 4 * ms_per_px]
        ax.broken_barh(wide, (-0.5, y0 + 0.5), facecolors="#fff2f2", linewidth=0, zorder=0)

    bars = data.bars
    for (row, kind), grp in bars.groupby(["row", "kind"], sort=False):
        starts = grp["start_ms"].to_numpy(float)
        widths = np.maximum(grp["end_ms"].to_numpy(float) - starts, min_w)
        if kind == "nvtx":
            texts = grp["text"].astype(str).to_numpy()
            shown = grp["label"].fillna(grp["text"]).astype(str).to_numpy()
            for name in np.unique(texts):
                sel = texts == name
                ax.broken_barh(
                    list(zip(starts[sel], widths[sel], strict=True)),
                    (row - h / 2, h),
                    facecolors=nvtx_color(name),
                    edgecolor="white",
                    linewidth=0.6,
                    zorder=2,
                )
            for s, w, name in zip(starts, widths, shown, strict=True):
                text_px = len(name) * 6.2 + 6  # ~7.5 pt text at 100 dpi
                if w / ms_per_px >= text_px:
                    ax.text(
                        s + w / 2,
                        row,
                        name,
                        ha="center",
                        va="center",
                        fontsize=7.5,
                        color="#1a1a1a",
                        clip_on=True,
                        zorder=3,
                    )
        else:
            ax.broken_barh(
                list(zip(starts, widths, strict=True)),
                (row - h / 2, h),
                facecolors=_kind_color(str(kind)),
                linewidth=0,
                zorder=2,
            )

    if not data.has_gpu:
        ax.text(
            xmax / 2,
            n - 1,
            "no GPU activity recorded",
            ha="center",
            va="center",
            fontsize=9,
            style="italic",
            color="#666666",
        )

    for b in data.step_bounds_ms:
        ax.axvline(b, color="#555555", linestyle=(0, (2, 3)), linewidth=0.8, zorder=1)
    # Separators between the thread groups and the GPU block.
    for i in range(1, n):
        new_block = data.rows[i] != "" and (
            (data.groups[i] == "gpu" and data.groups[i - 1] != "gpu") or data.groups[i] == "nvtx"
        )
        ax.axhline(
            i - 0.5,
            color="#888888" if new_block else "#e3e3e3",
            linewidth=0.8 if new_block else 0.5,
            zorder=1,
        )

    ax.set_yticks(range(n))
    ax.set_yticklabels([_short(r) for r in data.rows], fontsize=8)
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=8)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    first = data.step_indices[0] if data.step_indices else None
    ax.set_xlabel(
        f"time since the start of step {first} (ms)"
        if first is not None
        else "time since the start of the measured window (ms)",
        fontsize=8,
    )
    ax.set_title(
        f"{title} — {data.describe()}" if title else data.describe(),
        fontsize=10,
        loc="left",
    )
    if data.idle_share is not None and gpu_rows:
        ax.text(
            1.002,
            (n - 1 - (min(gpu_rows) + max(gpu_rows)) / 2 + 0.5) / n,
            f"idle\n{100 * data.idle_share:.0f}%",
            transform=ax.transAxes,
            fontsize=8,
            color="#b03030",
            va="center",
            ha="left",
        )
    return used


_MAX_LABEL = 36  # characters of a row label that fit the left margin at 8 pt


def _short(label: str) -> str:
    """A row label cut to the margin: the thread name shortened, its tid and kind kept."""
    if len(label) <= _MAX_LABEL:
        return label
    head, sep, tail = label.rpartition(" (tid ")
    if sep:
        keep = _MAX_LABEL - len(sep + tail) - 1
        if keep >= 8:
            return head[:keep] + "…" + sep + tail
    return label[: _MAX_LABEL - 1] + "…"


def legend_keys(data: TimelineData) -> set[str]:
    """The legend entries a drawing of ``data`` needs: colour kinds, ``nvtx:<name>``, ``idle``."""
    b = data.bars
    keys = {str(k) for k in b.loc[b["kind"] != "nvtx", "kind"].unique()}
    keys |= {f"nvtx:{t}" for t in b.loc[b["kind"] == "nvtx", "text"].dropna().unique()}
    if data.idle and "gpu" in data.groups:
        keys.add("idle")
    return keys


#: Most NVTX names listed one by one in the legend; past this, names other than the harness'
#: phases (a library's own ranges: DALI, NCCL, PyTorch's per-operator ranges) share one entry.
_MAX_OTHER_NVTX = 6


def _nvtx_entries(used: set[str]) -> list[tuple[str, str]]:
    """(label, colour) legend entries for the NVTX names in ``used``."""
    names = [k[5:] for k in sorted(used) if k.startswith("nvtx:")]
    known = [n for n in NVTX_COLORS if n in names]
    others = sorted(set(names) - set(known))
    out = [(f"NVTX: {n}", nvtx_color(n)) for n in known]
    if len(others) <= _MAX_OTHER_NVTX:
        out += [(f"NVTX: {n}", nvtx_color(n)) for n in others]
    else:
        out.append(
            (
                f"NVTX: {len(others)} other range names (library threads; named in the bar)",
                _NVTX_FALLBACK[0],
            )
        )
    return out


def _legend_rows(used: set[str]) -> int:
    n = len([k for k in used if not k.startswith("nvtx:")]) + len(_nvtx_entries(used))
    return max(1, -(-n // _LEGEND_COLS))


def _legend(fig: Figure, used: set[str]) -> None:
    handles: list[Patch] = []
    for label, color in _nvtx_entries(used):
        handles.append(Patch(facecolor=color, label=label))
    for cat in API_COLORS:
        if f"api:{cat}" in used:
            handles.append(Patch(facecolor=API_COLORS[cat], label=API_LABELS[cat]))
    for kind in GPU_COLORS:
        if kind in used:
            handles.append(Patch(facecolor=GPU_COLORS[kind], label=GPU_LABELS[kind]))
    if "idle" in used:
        handles.append(
            Patch(facecolor=IDLE_COLOR, edgecolor=IDLE_HATCH_COLOR, hatch="////", label="GPU idle")
        )
    if handles:
        fig.legend(
            handles=handles,
            loc="lower center",
            ncol=min(_LEGEND_COLS, len(handles)),
            fontsize=8,
            frameon=False,
            bbox_to_anchor=(0.5, 0.0),
        )


def _figure(
    heights: list[int], n_legend_rows: int = 3, *, top_in: float = 0.45
) -> tuple[Figure, list[Axes]]:
    """A figure with one timeline axes per entry of ``heights`` (rows), margins in inches."""
    gap_in, bottom_in = 0.95, 0.75 + 0.2 * n_legend_rows
    axes_in = [max(r, 1) * _ROW_IN for r in heights]
    total = top_in + bottom_in + sum(axes_in) + gap_in * (len(heights) - 1)
    fig = Figure(figsize=(_FIG_W, total), dpi=100)
    axes, y = [], total - top_in
    for a in axes_in:
        y -= a
        axes.append(
            fig.add_axes((_LEFT_IN / _FIG_W, y / total, 1 - (_LEFT_IN + 0.5) / _FIG_W, a / total))
        )
        y -= gap_in
    return fig, axes


def plot_timeline(
    trace_or_path: tr.Trace | str | Path | TimelineData,
    *,
    steps: int = 2,
    ax: Axes | None = None,
    title: str | None = None,
    xlim_ms: float | None = None,
) -> Figure:
    """A timeline picture of ``steps`` steady-state steps of one nsys export.

    Draws into ``ax`` when given (its figure is returned, with no legend added), else into a new
    figure sized to the number of rows. The figure gets ``timelines`` (the drawn
    :class:`TimelineData`) and ``idle_share`` attributes.
    """
    data = (
        trace_or_path
        if isinstance(trace_or_path, TimelineData)
        else load_timeline(trace_or_path, steps=steps)
    )
    if ax is None:
        fig, (ax,) = _figure([len(data.rows)], _legend_rows(legend_keys(data)))
        own = True
    else:
        fig = ax.get_figure()
        own = False
    draw_timeline(data, ax, xlim_ms=xlim_ms, title=title)
    if own:
        _legend(fig, legend_keys(data))
    fig.timelines = [*getattr(fig, "timelines", []), data]
    fig.idle_share = fig.timelines[0].idle_share
    return fig


def plot_pair(
    baseline: tr.Trace | str | Path | TimelineData,
    fix: tr.Trace | str | Path | TimelineData,
    *,
    steps: int = 2,
    labels: tuple[str, str] = ("baseline", "fix"),
    title: str | None = None,
    zoom: bool = False,
    out: str | Path | None = None,
) -> Figure:
    """Baseline above the fix on the SAME time scale, so the fix's shorter steps show as such.

    With ``zoom`` a third panel repeats the fix on its own time scale, to read its detail.
    Saves to ``out`` (.png, .svg, ... by suffix) when given. ``fig.timelines`` holds the
    :class:`TimelineData` of the panels; ``fig.idle_share`` is the baseline's.
    """
    datas = [
        d if isinstance(d, TimelineData) else load_timeline(d, steps=steps) for d in (baseline, fix)
    ]
    b, f = datas
    panels = [(b, labels[0]), (f, f"{labels[1]} (same time scale)")]
    if zoom:
        panels.append((f, f"{labels[1]} (zoomed)"))
    used = legend_keys(b) | legend_keys(f)
    fig, axes = _figure(
        [len(d.rows) for d, _ in panels], _legend_rows(used), top_in=0.8 if title else 0.45
    )
    xmax = max(b.span_ms, f.span_ms)
    for i, (ax, (d, label)) in enumerate(zip(axes, panels, strict=True)):
        draw_timeline(d, ax, xlim_ms=xmax if i < 2 else None, title=label)
    if f.span_ms > 0 and b.span_ms > 0:
        ratio = b.span_ms / f.span_ms
        room = f.span_ms < 0.75 * xmax  # the note fits right of the fix's last step
        axes[1].annotate(
            f"{ratio:.1f}x shorter than {labels[0]}"
            if ratio >= 1
            else f"{1 / ratio:.1f}x longer than {labels[0]}",
            xy=(f.span_ms, 1 - 0.5 / len(f.rows)) if room else (1.0, 1.0),
            xycoords=("data", "axes fraction") if room else "axes fraction",
            xytext=(14, 0) if room else (0, 4),
            textcoords="offset points",
            fontsize=9,
            va="center" if room else "bottom",
            ha="left" if room else "right",
            color="#333333",
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.9},
            arrowprops={"arrowstyle": "-|>", "color": "#555555", "lw": 0.8} if room else None,
        )
    if title:
        fig.text(0.005, 1 - 0.1 / fig.get_figheight(), title, fontsize=13, va="top", weight="bold")
    _legend(fig, used)
    fig.timelines = datas
    fig.idle_share = b.idle_share
    if out is not None:
        fig.savefig(out)
    return fig
