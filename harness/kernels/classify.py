"""Per kernel: its bound from the speed-of-light shares, the pipe its arithmetic ran on, what
family its name belongs to and, where its name says, the data type.

- ``bound``: ``latency`` when both the compute (SM) and the memory shares are below
  ``bound_min_pct`` (neither unit is near its peak: the kernel waits, on too few warps or on
  dependent instructions); else ``compute`` or ``memory``, whichever share is higher.
- ``pipe``: the busiest arithmetic pipe (tensor, FMA, ALU, fp64, the transcendental unit) when
  it is active at least ``pipe_min_pct`` of the SM's active cycles, else ``none``: a kernel
  whose pipes idle under that floor spends its time on memory or latency, and naming a pipe
  that is busy a few percent of the time (a bf16 elementwise kernel's 5% on the tensor pipe,
  its conversions) would say something the kernel did not do. A matrix kernel (``family``
  ``matmul``) is on the larger of its tensor and FMA pipes, whatever the share: its
  multiply-adds run on one of the two, which is the question for a GEMM (tensor cores or the
  SIMT units); a small GEMM that is latency-bound still says which. NaN readings (ncu
  collected none) give ``unknown``.
- ``family``: ``matmul`` (GEMM and convolution families: cuBLAS's xmma/nvjet/sgemm, CUTLASS and
  cuDNN's implicit GEMMs, convolution passes), ``layout`` (layout conversions), ``elementwise``
  (elementwise and reduction kernels) or ``other``, from the name: a hint about what the
  kernel is; the pipe and bound columns say what it did. ``matmul`` is the family as a flag.
- ``dtype``: the operand type a kernel's name spells (``bf16``, ``tf32``, ``f32f32``,
  ``sgemm``, ``c10::Half``...); empty where it names none.

The name readings (``family``, ``dtype``) are :mod:`analysis.kernel_names`'s, which the
detectors and the tool adapters read too.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from analysis.kernel_names import DTYPES, ELEMENTWISE, LAYOUT, MATMUL, dtype, family_of, is_matmul
from harness.core.kernels_config import KernelsConfig
from harness.kernels.tables import ARITHMETIC_PIPES, Bound, Family, Pipe

__all__ = [
    "DTYPES",
    "ELEMENTWISE",
    "LAYOUT",
    "MATMUL",
    "Bound",
    "Family",
    "Pipe",
    "bound",
    "classify",
    "dtype",
    "family",
    "is_matmul",
    "pipe",
]

#: A matrix kernel's pipe needs this much of its larger pipe (percent): below it neither ran
#: (a GEMM that did no multiply-adds: an empty shape, a zero-size epilogue).
MATMUL_FLOOR_PCT = 1.0

#: kernels.csv's pipe reading columns, by pipe.
PIPE_COLUMNS: dict[Pipe, str] = {p: f"{p.value}_pipe_pct" for p in ARITHMETIC_PIPES}


def bound(sm_pct: float, memory_pct: float, min_pct: float) -> Bound:
    """The bound of one kernel from its two shares (percent of peak)."""
    if np.isnan(sm_pct) and np.isnan(memory_pct):
        return Bound.UNKNOWN
    sm = 0.0 if np.isnan(sm_pct) else sm_pct
    mem = 0.0 if np.isnan(memory_pct) else memory_pct
    if max(sm, mem) < min_pct:
        return Bound.LATENCY
    return Bound.COMPUTE if sm >= mem else Bound.MEMORY


def pipe(readings: Mapping[Pipe, float], matmul: bool, min_pct: float) -> tuple[Pipe, float]:
    """The pipe a kernel's arithmetic ran on and that pipe's reading (percent of the SM's
    active cycles; NaN for ``unknown``), from its pipes' readings (see the module's
    docstring)."""
    known = {p: float(v) for p, v in readings.items() if v is not None and not np.isnan(v)}
    pool = {p: known[p] for p in (Pipe.TENSOR, Pipe.FMA) if p in known} if matmul else known
    if not pool:
        return Pipe.UNKNOWN, float("nan")
    order = [p for p in ARITHMETIC_PIPES if p in pool]
    best = max(order, key=lambda p: pool[p])  # the first of equals, in ARITHMETIC_PIPES' order
    floor = MATMUL_FLOOR_PCT if matmul else min_pct
    return (best if pool[best] >= floor else Pipe.NONE), pool[best]


def family(name: str) -> Family:
    """What ``name`` belongs to (see the module's docstring; the reading is
    :func:`analysis.kernel_names.family_of`, shared with the detectors and the tools)."""
    return Family(family_of(name))


def classify(rows: pd.DataFrame, cfg: KernelsConfig) -> pd.DataFrame:
    """``rows`` (:func:`harness.kernels.parse.kernel_metrics`'s columns, with ``demangled``
    where known) with ``sol_pct`` (the higher share), ``bound``, ``family``, ``matmul``,
    ``pipe``, ``pipe_pct`` (that pipe's reading) and ``dtype`` added."""
    out = rows.copy()
    sm = _floats(out, "sm_throughput_pct")
    mem = _floats(out, "memory_throughput_pct")
    out["sol_pct"] = np.fmax(sm, mem)
    out["bound"] = [bound(s, m, cfg.bound_min_pct).value for s, m in zip(sm, mem, strict=True)]
    names = _names(out)
    families = [family(n) for n in names]
    out["family"] = [f.value for f in families]
    out["matmul"] = [f is Family.MATMUL for f in families]
    readings = {p: _floats(out, col) for p, col in PIPE_COLUMNS.items()}
    pipes = [
        pipe({p: float(v[i]) for p, v in readings.items()}, f is Family.MATMUL, cfg.pipe_min_pct)
        for i, f in enumerate(families)
    ]
    out["pipe"] = [p.value for p, _ in pipes]
    out["pipe_pct"] = [v for _, v in pipes]
    out["dtype"] = [dtype(n) for n in names]
    return out


def _floats(rows: pd.DataFrame, col: str) -> np.ndarray:
    if col not in rows:
        return np.full(len(rows), np.nan)
    return pd.to_numeric(rows[col], errors="coerce").to_numpy(float)


def _names(rows: pd.DataFrame) -> list[str]:
    """The most telling name of each row: demangled (templates spell the types), else what
    ncu printed."""
    demangled = rows["demangled"] if "demangled" in rows else pd.Series([""] * len(rows))
    printed = rows["ncu_kernel"] if "ncu_kernel" in rows else pd.Series([""] * len(rows))
    return [
        str(d) if isinstance(d, str) and d else str(p if isinstance(p, str) else "")
        for d, p in zip(demangled.tolist(), printed.tolist(), strict=True)
    ]
