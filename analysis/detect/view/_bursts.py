"""The iterations of a loop whose GPU work varies from step to step, anchored on what repeats.

Variable-length batches (NLP buckets, detection, the last partial batch) change the kernels'
shapes, and with them cuBLAS's choice of kernel and their count, every step: no stretch of the
GPU timeline repeats with the same content, which :mod:`analysis.detect.view._steady` needs.
What does repeat is the loop's rhythm. A kernel the loop launches once per step, or in one
burst per step (a foreach/fused optimizer's ``multi_tensor_apply`` chunks: the parameters do
not change shape), marks the step: its *bursts*, occurrences at most ``burst_gap_items`` items
apart on its stream, recur with the same count, a similar number of GPU items between them
(``max_burst_spread``) and across most of the stream. Among the kernels that mark such a
rhythm, the one with the longest period is the step (a kernel of every layer marks layers).
Only kernels named like an optimizer's step anchor it for now: a layer's kernel pair recurring
between never-repeating work, or a few repeats of a layer inside a handful of long steps, mark
rhythms too, and the exact repeats' rule (they hold most of their stretch) keeps those out. Periodic work every N steps (a checkpoint, an eval) falls between two bursts and
stays in that iteration: only start-up before the first steady burst is left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis import trace as T
from analysis.detect.config import WindowThresholds
from analysis.detect.view import _steady as S

__all__ = ["OPTIMIZER_HINTS", "burst_iterations"]

#: Kernel-name substrings of an optimizer's step (hints for the anchor, never required).
OPTIMIZER_HINTS = ("multi_tensor_apply", "foreach", "adam", "sgd", "lamb", "optimizer")


@dataclass(frozen=True)
class _Rhythm:
    code: int
    starts: np.ndarray  # start (ns) of each burst's first item
    period: float  # median GPU items from one burst to the next
    cover: int  # items from the first burst to the last
    hinted: bool


def _rhythm(code: int, pos: np.ndarray, start: np.ndarray, w: WindowThresholds) -> _Rhythm | None:
    """The bursts of the kernel at positions ``pos`` of its stream as a rhythm, or None."""
    cut = np.flatnonzero(np.diff(pos) > w.burst_gap_items)
    first = np.concatenate([[0], cut + 1])
    size = np.diff(np.append(first, pos.size))
    sizes, counts = np.unique(size, return_counts=True)
    modal = sizes[np.argmax(counts)]
    keep = size == modal
    if keep.sum() < w.min_repeats + 1 or keep.mean() < 0.8:
        return None
    at = pos[first[keep]]
    d = np.diff(at).astype(float)
    if d.size == 0 or np.median(d) < 2 or d.std() > w.max_burst_spread * np.median(d):
        return None
    return _Rhythm(code, start[at], float(np.median(d)), int(at[-1] - at[0]), False)


def _stream_rhythms(trace: T.Trace, seq: dict[str, np.ndarray], w: WindowThresholds):
    """The rhythms of the busiest streams of the busiest device, with the streams' sizes."""
    devs, dcount = np.unique(seq["dev"], return_counts=True)
    on_dev = seq["dev"] == devs[np.argmax(dcount)]
    streams, scount = np.unique(seq["stream"][on_dev], return_counts=True)
    hinted = _hinted_codes(trace)
    out = []
    for stream in streams[np.argsort(-scount, kind="stable")][: w.streams]:
        mine = on_dev & (seq["stream"] == stream)
        codes, start = seq["code"][mine], seq["start"][mine]
        g = S.group_codes(codes)
        for u in np.flatnonzero((g.counts >= w.min_repeats + 1) & (g.uniq >= 0)):
            pos = g.by_code[g.bounds[u] : g.bounds[u + 1]]
            r = _rhythm(int(g.uniq[u]), pos, start, w)
            if r is None or r.cover < w.min_cover_share * codes.size:
                continue
            if r.code in hinted:
                out.append(_Rhythm(r.code, r.starts, r.period, r.cover, True))
    return out


def _hinted_codes(trace: T.Trace) -> set[int]:
    """Short-name ids of the kernels named like an optimizer's step."""
    if not trace.has("StringIds"):
        return set()
    like = " OR ".join(f"lower(value) LIKE '%{h}%'" for h in OPTIMIZER_HINTS)
    return {int(r[0]) for r in trace.query(f"SELECT id FROM StringIds WHERE {like}")[1]}


def burst_iterations(trace: T.Trace, w: WindowThresholds) -> S.Iterations | None:
    """Iterations anchored on the rhythm of a kernel's bursts (see the module's docstring), or
    None when no kernel marks one."""
    seq = S.gpu_sequence(trace)
    if seq["code"].size < 2 * w.min_repeats:
        return None
    found = _stream_rhythms(trace, seq, w)
    if not found:
        return None
    pool = [r for r in found if r.hinted] or found
    best = max(pool, key=lambda r: (r.period, r.cover))
    edges = best.starts[min(w.skip_iterations, max(0, best.starts.size - 1 - w.min_repeats)) :]
    edges = _after_loads(trace, _lead_trim(edges, w.outlier_factor), w.min_repeats)
    if edges.size < w.min_repeats + 1:
        return None
    what = "an optimizer-named kernel" if best.hinted else "a kernel"
    source = (
        f"the rhythm of {what}'s launches (one burst per iteration, ~{best.period:.0f} GPU items)"
    )
    return S.Iterations(edges, source, int(edges[0] - seq["start"][0]))


#: Driver calls that load code (a module's first use, lazy loading): start-up, never the loop.
LOAD_CALLS = ("cuLibraryLoad", "cuModuleLoad")


def _after_loads(trace: T.Trace, edges: np.ndarray, min_repeats: int) -> np.ndarray:
    """The iterations after the last one that loads code (a warm-up over every shape loads
    each new kernel's module on first use; the steady loop has them all), where at least
    ``min_repeats`` remain."""
    if not (trace.has("CUPTI_ACTIVITY_KIND_RUNTIME") and trace.has("StringIds")):
        return edges
    like = " OR ".join(f"s.value LIKE '{c}%'" for c in LOAD_CALLS)
    rows = trace.query(
        "SELECT MAX(r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
        f"ON s.id = r.nameId WHERE ({like}) AND r.start >= {int(edges[0])} "
        f"AND r.start < {int(edges[-1])}"
    )[1]
    last = rows[0][0] if rows else None
    if last is None:
        return edges
    later = edges[edges > last]
    return later if later.size >= min_repeats + 1 else edges


def _lead_trim(edges: np.ndarray, outlier: float) -> np.ndarray:
    """Drop leading iterations over ``outlier`` x the median (a compile or autotune in them);
    the later ones stay whatever they take (periodic work belongs in the mean step)."""
    dur = np.diff(edges)
    if dur.size == 0:
        return edges
    ok = dur <= outlier * max(float(np.median(dur)), 1.0)
    return edges[int(np.argmax(ok)) :] if ok.any() else edges
