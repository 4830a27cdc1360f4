"""ncu's raw page as CSV (``--csv --page raw --print-units base``) to tidy frames.

(The details page, ``--page details``, one row per launch and metric, is read too, pivoted to
the same shape: the row asks for the raw page, the details page is what ``--import`` of a
report prints by default.)

The file holds one header row (``"ID","Process ID",...,"Kernel Name",...,"Block Size","Grid
Size",...`` then one column per collected metric), one row of units, and one row per profiled
launch; ncu's own messages (``==PROF==``, ``==WARNING==``) and anything else not in quotes are
skipped. Numbers may carry thousands separators (``"1,234.5"``); ``n/a`` reads as NaN.

:func:`read_raw` keeps every metric under its own name (values in base units: seconds, bytes,
per second, percent); :func:`kernel_metrics` picks the row's columns out of it, units in their
names, taking the first metric a chip has where names differ by architecture, and the busiest
of the tensor and FMA pipe readings.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

#: The launch's identity columns of the raw page, as ncu names them, and ours.
ID_COLUMNS = {
    "ID": "ncu_id",
    "Process ID": "pid",
    "Kernel Name": "ncu_kernel",
    "Context": "context",
    "Stream": "stream",
    "Block Size": "block",
    "Grid Size": "grid",
    "Device": "device",
    "CC": "cc",
}


def _pipe(names: str) -> tuple[tuple[str, ...], str, float]:
    """A pipe's FIELDS entry: the busiest of its readings (cycles active, instructions
    executed), on the active basis, else the elapsed one."""
    return (
        tuple(
            rf"re:^sm__({names})\.avg\.pct_of_peak_sustained_{basis}$"
            for basis in ("active", "elapsed")
        ),
        "max",
        1.0,
    )


#: Column -> (alternatives, first or max, factor from base units). Each alternative is a
#: metric name or a ``re:`` pattern; the first alternative the page has is read (``first``: its
#: first column, ``max``: the largest of its columns). A pipe is read on the active-cycles
#: basis the row asks for, else on the elapsed one the SpeedOfLight section's breakdown prints.
FIELDS: dict[str, tuple[tuple[str, ...], str, float]] = {
    "duration_us": (("gpu__time_duration.sum",), "first", 1e6),
    "sm_throughput_pct": (("sm__throughput.avg.pct_of_peak_sustained_elapsed",), "first", 1.0),
    "memory_throughput_pct": (
        ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",), "first", 1.0,
    ),
    "dram_throughput_pct": (
        (
            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
            "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        ),
        "first",
        1.0,
    ),
    "l1_throughput_pct": (("l1tex__throughput.avg.pct_of_peak_sustained_active",), "first", 1.0),
    "l2_throughput_pct": (("lts__throughput.avg.pct_of_peak_sustained_elapsed",), "first", 1.0),
    "tensor_pipe_pct": _pipe(r"pipe_tensor(_op_[a-z]+)?_cycles_active|inst_executed_pipe_tensor(_op_[a-z]+)?"),
    "fma_pipe_pct": _pipe("pipe_fma_cycles_active|inst_executed_pipe_fma"),
    "alu_pipe_pct": _pipe("pipe_alu_cycles_active|inst_executed_pipe_alu"),
    "fp64_pipe_pct": _pipe("pipe_fp64_cycles_active|inst_executed_pipe_fp64"),
    "xu_pipe_pct": _pipe("inst_executed_pipe_xu"),
    "achieved_occupancy_pct": (("sm__warps_active.avg.pct_of_peak_sustained_active",), "first", 1.0),
    "theoretical_occupancy_pct": (("sm__maximum_warps_per_active_cycle_pct",), "first", 1.0),
    "registers_per_thread": (("launch__registers_per_thread",), "first", 1.0),
    "grid_blocks": (("launch__grid_size",), "first", 1.0),
    "block_threads": (("launch__block_size",), "first", 1.0),
    "dram_bytes": (("dram__bytes.sum",), "first", 1.0),
    "dram_gbps": (("dram__bytes.sum.per_second",), "first", 1e-9),
    "sm_frequency_ghz": (("gpc__cycles_elapsed.avg.per_second",), "first", 1e-9),
    "elapsed_cycles": (("gpc__cycles_elapsed.max",), "first", 1.0),
    "passes": (("profiler__replayer_passes",), "first", 1.0),
    "backed_up_bytes": (("profiler__replayer_bytes_mem_backed_up.avg",), "first", 1.0),
}  # fmt: skip

#: Multipliers of unit prefixes, to base units.
_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "K": 1e3, "M": 1e6, "G": 1e9,
           "T": 1e12}  # fmt: skip
_TIME = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0, "ns": 1e-9,
         "us": 1e-6, "ms": 1e-3, "s": 1.0}  # fmt: skip


class NcuCsvError(ValueError):
    """The file is not ncu's raw CSV page (names the file and what is missing)."""


@dataclass(frozen=True)
class RawPage:
    """The raw page: one row per profiled launch, every metric in base units."""

    frame: pd.DataFrame
    """Identity columns (:data:`ID_COLUMNS`'s values) and one float column per metric."""
    units: dict[str, str]
    """Each metric's unit as ncu printed it."""


def unit_factor(unit: str) -> float:
    """The factor that turns a value in ``unit`` into base units (seconds, bytes, per
    second; percent, counts and unknown units stay as they are)."""
    unit = unit.strip()
    if "/" in unit:
        top, bottom = unit.split("/", 1)
        return unit_factor(top) / unit_factor(bottom)
    if unit in _TIME:
        return _TIME[unit]
    for base in ("byte", "hz", "Hz", "cycle", "inst", "warp", "sector", "request"):
        if unit.endswith(base) and unit[: -len(base)] in _PREFIX:
            return _PREFIX[unit[: -len(base)]]
    return 1.0


def number(text: str) -> float:
    """A metric value as ncu prints it: thousands separators dropped, ``n/a`` and text NaN."""
    cleaned = text.strip().replace(",", "")
    try:
        return float(cleaned)
    except ValueError:
        return math.nan


def _quoted_lines(text: str) -> list[str]:
    """The CSV lines: those that start with a quote (ncu's messages and the program's output
    do not)."""
    return [ln for ln in text.splitlines() if ln.startswith('"')]


def read_raw(source: str | Path) -> RawPage:
    """The raw page of an ncu CSV file (or its text). A file with no profiled launch (ncu says
    'No kernels were profiled') gives an empty frame; one without ncu's header raises
    :class:`NcuCsvError`."""
    text = Path(source).read_text(encoding="utf-8", errors="replace") if isinstance(
        source, Path) else source  # fmt: skip
    rows = list(csv.reader(io.StringIO("\n".join(_quoted_lines(text)))))
    start = next((i for i, r in enumerate(rows) if r[:1] == ["ID"]), None)
    if start is None:
        if "No kernels were profiled" in text or not rows:
            return RawPage(pd.DataFrame(columns=list(ID_COLUMNS.values())), {})
        raise NcuCsvError(f'{_name(source)}: no raw-page header (a row starting with "ID")')
    header = rows[start]
    missing = [c for c in ("ID", "Kernel Name") if c not in header]
    if missing:
        raise NcuCsvError(f"{_name(source)}: the header lacks {', '.join(missing)}")
    body = rows[start + 1 :]
    if "Metric Name" in header and "Metric Value" in header:
        return _long_frame(header, body)
    units_row = body[0] if body and body[0][:1] == [""] else [""] * len(header)
    launches = [r for r in body if r and r[0].strip().isdigit() and len(r) == len(header)]
    return _frame(header, units_row, launches)


def _frame(header: list[str], units_row: list[str], launches: list[list[str]]) -> RawPage:
    """Identity columns as text, metric columns as floats in base units."""
    data: dict[str, object] = {}
    units: dict[str, str] = {}
    for j, name in enumerate(header):
        values = [r[j] for r in launches]
        if name in ID_COLUMNS:
            data[ID_COLUMNS[name]] = values
            continue
        unit = units_row[j] if j < len(units_row) else ""
        parsed = np.array([number(v) for v in values], dtype=float)
        if values and np.isnan(parsed).all() and any(v.strip() not in ("", "n/a") for v in values):
            continue  # a text column of the page (Process Name, Host Name, ...)
        units[name] = unit
        data[name] = parsed * unit_factor(unit)
    frame = pd.DataFrame(data)
    if "ncu_id" in frame:
        frame["ncu_id"] = pd.to_numeric(frame["ncu_id"], errors="coerce").astype("Int64")
    return RawPage(frame, units)


#: The details page's labels of the speed-of-light metrics, by (section, label): the page
#: names a section's metrics by label, and two sections share the label "Memory Throughput".
DETAILS_LABELS = {
    ("GPU Speed Of Light Throughput", "Duration"): "gpu__time_duration.sum",
    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput"): (
        "sm__throughput.avg.pct_of_peak_sustained_elapsed"
    ),
    ("GPU Speed Of Light Throughput", "Memory Throughput"): (
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
    ),
    ("GPU Speed Of Light Throughput", "DRAM Throughput"): (
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
    ),
    ("GPU Speed Of Light Throughput", "L1/TEX Cache Throughput"): (
        "l1tex__throughput.avg.pct_of_peak_sustained_active"
    ),
    ("GPU Speed Of Light Throughput", "L2 Cache Throughput"): (
        "lts__throughput.avg.pct_of_peak_sustained_elapsed"
    ),
    ("GPU Speed Of Light Throughput", "SM Frequency"): "gpc__cycles_elapsed.avg.per_second",
    ("GPU Speed Of Light Throughput", "Elapsed Cycles"): "gpc__cycles_elapsed.max",
    ("Memory Workload Analysis", "Memory Throughput"): "dram__bytes.sum.per_second",
}


def _long_frame(header: list[str], body: list[list[str]]) -> RawPage:
    """The details page (one row per launch, section and metric) pivoted to the raw page's
    shape: a section's labels become their metric names (:data:`DETAILS_LABELS`), other
    names (``--metrics``'s, under "Command line profiler metrics") stay."""
    col = {name: j for j, name in enumerate(header)}
    launches: dict[str, dict[str, object]] = {}
    units: dict[str, str] = {}
    for r in body:
        if len(r) != len(header) or not r[col["ID"]].strip().isdigit():
            continue
        launch = launches.setdefault(r[col["ID"]], {
            ours: r[col[theirs]] for theirs, ours in ID_COLUMNS.items() if theirs in col
        })  # fmt: skip
        section = r[col["Section Name"]] if "Section Name" in col else ""
        label = r[col["Metric Name"]]
        metric = DETAILS_LABELS.get((section, label), label)
        unit = r[col["Metric Unit"]] if "Metric Unit" in col else ""
        units[metric] = unit
        launch[metric] = number(r[col["Metric Value"]]) * unit_factor(unit)
    frame = pd.DataFrame(list(launches.values()))
    if "ncu_id" in frame:
        frame["ncu_id"] = pd.to_numeric(frame["ncu_id"], errors="coerce").astype("Int64")
    return RawPage(frame, units)


def _name(source: str | Path) -> str:
    return str(source) if isinstance(source, Path) else "ncu output"


def _matching(columns: Iterable[str], wanted: tuple[str, ...]) -> list[str]:
    """The metric columns of the first alternative of ``wanted`` (names, or ``re:`` patterns)
    the page has."""
    cols = list(columns)
    for w in wanted:
        if w.startswith("re:"):
            pattern = re.compile(w[3:])
            found = [c for c in cols if pattern.search(c)]
        else:
            found = [w] if w in cols else []
        if found:
            return found
    return []


def kernel_metrics(page: RawPage) -> pd.DataFrame:
    """One row per profiled launch: the identity columns and :data:`FIELDS` (NaN where the
    chip or the collected sections have no such metric)."""
    frame = page.frame
    out = frame[[c for c in ID_COLUMNS.values() if c in frame]].copy()
    for column, (wanted, how, factor) in FIELDS.items():
        found = _matching(frame.columns, wanted)
        if not found:
            out[column] = np.nan
        elif how == "max":
            out[column] = frame[found].max(axis=1, skipna=True) * factor
        else:
            out[column] = frame[found[0]] * factor
    return out.reset_index(drop=True)


def dims_key(text: object) -> tuple[int, ...]:
    """A grid or block as integers, from ncu's ``(2, 66, 1)`` or the plan's same form."""
    return tuple(int(x) for x in re.findall(r"\d+", str(text)))
