"""pageable_copy: host-to-device copies from pageable memory eat step time.

The union of HtoD copies with a pageable host side inside the steady-state window, as a share of
it (``pageable_h2d_share``), is a metric: what the copies took. Copies outside the window (weight
uploads at start-up) are reported in ``pageable_h2d_bytes_outside_window`` but never count. The
class is always a candidate (the state this module returns on a GPU capture):
:func:`analysis.detect.diagnose` fires it when the saving the time model predicts for the
pageable copies removed (pinned and hidden, or resident), ``1 - 1 / predicted_speedup``, is at
least ``min_saving_share``, and that saving is the impact (``predict``).
"""

from __future__ import annotations

from analysis.detect import view as V
from analysis.detect.config import PageableCopyThresholds
from analysis.findings import Finding, missing
from bottlenecks import Klass

KLASS = Klass.PAGEABLE_COPY


def detect(view: V.TraceView, th: PageableCopyThresholds) -> Finding:
    """The candidate (always, on a GPU capture): ``th.min_saving_share`` is the decide step's."""
    del th
    trace = view.trace
    if not view.has_gpu:
        return missing(KLASS, V.MEMCPY, "CUDA memory copies")
    st, act = view.steady(), view.activity()
    pg = act.take((act.kind == V.KIND_MEMCPY) & (act.direction == V.HTOD) & act.pageable)
    s, e = V.union(pg.start, pg.end)
    share = V.length(s, e) / st.span_ns
    nbytes = float(pg.nbytes.sum())
    metrics: dict[str, float] = {"pageable_h2d_share": share}
    name, value = st.rate("pageable_h2d_bytes", nbytes)
    metrics[name] = value
    dur_each = pg.end - pg.start
    dur = float(dur_each.sum())
    metrics["pageable_h2d_gbps"] = nbytes / dur if dur > 0 else 0.0
    total = 0
    if trace.has(V.MEMCPY):
        htod = V.enum_ids(trace, "ENUM_CUDA_MEMCPY_OPER", "%HTOD")
        pageable = V.enum_ids(trace, "ENUM_CUDA_MEM_KIND", "%PAGEABLE")
        sql = f"""SELECT COALESCE(SUM(m.bytes), 0) FROM {V.MEMCPY} AS m
                  WHERE m.copyKind IN ({V.id_list(htod)}) AND m.srcKind IN ({V.id_list(pageable)})"""
        total = int(trace.query(sql)[1][0][0])
    metrics["pageable_h2d_bytes_outside_window"] = float(total - nbytes)
    top = V.top(dur_each)
    evidence = [
        V.stamp(
            st, pg.start[i], pg.end[i],
            bytes=int(pg.nbytes[i]),
            gbps=round(float(pg.nbytes[i]) / max(1, int(dur_each[i])), 2),
        )
        for i in top
    ]  # fmt: skip
    reason = (
        f"pageable HtoD copies take {share:.2%} of the window "
        f"({metrics['pageable_h2d_gbps']:.2f} GB/s); "
        f"{metrics['pageable_h2d_bytes_outside_window']:.0f} pageable bytes outside the window "
        f"not counted; {st.note}"
    )
    # a candidate: the decide step settles it on the predicted saving
    return Finding(KLASS, True, share, metrics, evidence, reason)
