"""The second witness: what the Nsight Compute row (``kernels.csv``) shows of a variant's
mechanism, set against its measured truth.

The measured truth (:mod:`harness.judge.truth`) says whether a variant's class costs it the
bar's share of its step. For a class whose mechanism is the kernels themselves, the row shows
it directly, on the variant's profiled kernels weighted by their nsys time per step
(:data:`RULES`):

- ``fp32_math``: most of the GEMM time in fp32 math: on the FMA pipe (SIMT, tensor pipe idle)
  or tf32 on the tensor pipe (half bf16's rate); gone when the GEMMs run 16-bit tensor math;
- ``unfused_elementwise``: elementwise kernels, memory-bound at a high DRAM share, hold
  :data:`CHAIN_MIN_SHARE` of the kernel time (fusing such a chain moves its bytes once: at
  that share removing half its traffic reaches the class's usual 15% bar);
- ``layout_transpose``: layout conversions hold :data:`LAYOUT_MIN_SHARE` of the kernel time;
- ``launch_bound``: the kernels are latency-bound (:data:`LATENCY_MIN_SHARE` of the time):
  small kernels the GPU finishes faster than the host launches them. Only a variant that
  should fire is held to it: removing launch overhead (graphs, fusion by a compiler) may keep
  the same small kernels.

Per variant (:class:`Witness`): ``confirms`` (the row shows the mechanism where the truth says
it costs, and not where it says it does not), ``contradicts`` (the other way), ``absent`` (no
row for the variant: the step did not run, or not for it, with the reason), ``unjudged`` (a
row, but nothing to set against: the truth is undecided, or the class has no kernel-level
signature). diagnosis.csv carries it (``witness``, ``witness_reason``).

The verdict (:func:`apply_verdicts`): a witness that contradicts makes a ``confirmed``
scenario ``inconclusive``, its reason first; it never turns a ``refuted`` one into anything
else, nor makes any verdict better. verdicts.csv keeps the truth's own verdict
(``verdict_by_truth``) and the witness's clause (``witness``, ``witness_reason``), so the
witness can be brought up to date after the kernels step (:func:`rewitness`) without judging
the exports again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from bottlenecks import Klass
from harness.core import runfolder as rf
from harness.core.enums import StrEnum
from harness.judge.truth import TruthState, pct
from harness.kernels.tables import (
    KERNELS_CSV,
    LIMITS_CSV,
    RUN_JSON,
    Bound,
    Family,
    Pipe,
    RowState,
    StepState,
)

__all__ = [
    "NOT_READ",
    "RULES",
    "VERDICT_COLUMNS",
    "KernelTables",
    "Witness",
    "WitnessState",
    "apply_verdicts",
    "read_tables",
    "rewitness",
    "witness_of",
]

#: Share of the GEMM time in fp32 math above which the fp32 mechanism shows.
FP32_MIN_SHARE = 0.5
#: Share of the kernel time in memory-bound elementwise kernels above which a chain shows.
CHAIN_MIN_SHARE = 0.3
#: DRAM throughput (percent of peak) a memory-bound elementwise kernel needs to count.
CHAIN_MIN_DRAM_PCT = 60.0
#: Share of the kernel time in layout conversions above which they show.
LAYOUT_MIN_SHARE = 0.1
#: Share of the kernel time in latency-bound kernels above which a launch-bound step shows.
LATENCY_MIN_SHARE = 0.5


class WitnessState(StrEnum):
    """What the row says of a variant's measured truth (diagnosis.csv's ``witness``)."""

    CONFIRMS = "confirms"
    CONTRADICTS = "contradicts"
    ABSENT = "absent"
    UNJUDGED = "unjudged"


@dataclass(frozen=True)
class Witness:
    """The row's witness of one variant."""

    state: WitnessState
    reason: str


#: The witness of a variant judged without reading the row.
NOT_READ = Witness(WitnessState.ABSENT, "the kernels row was not read")


@dataclass(frozen=True)
class Shown:
    """What a rule reads in a variant's kernels."""

    present: bool | None
    """The mechanism shows (True), is gone (False), or cannot be read (None)."""
    text: str


@dataclass(frozen=True)
class KernelTables:
    """The row's tables of a run (empty frames where absent) and why they are missing."""

    kernels: pd.DataFrame
    limits: pd.DataFrame
    missing: str = ""
    """Why the run has no row ('' when it has one)."""

    def rows(self, scenario: str, variant: str) -> pd.DataFrame:
        """A variant's profiled kernels that the plan timed."""
        k = self.kernels
        if k.empty:
            return k
        mine = k[(k["scenario"] == scenario) & (k["variant"] == variant)]
        return mine[mine["planned"].astype(str).str.lower() == "true"]

    def limit(self, scenario: str, variant: str) -> Mapping[str, Any] | None:
        lim = self.limits
        if lim.empty:
            return None
        hit = lim[(lim["scenario"] == scenario) & (lim["variant"] == variant)]
        return None if hit.empty else hit.iloc[0].to_dict()


def read_tables(run_dir: Path) -> KernelTables:
    """kernels.csv and kernel_limits.csv of a run folder; where they are missing, why
    (kernels_run.json's reason when the step ran and skipped)."""
    run_dir = Path(run_dir)
    empty = pd.DataFrame()
    try:
        kernels = pd.read_csv(run_dir / KERNELS_CSV)
        limits = pd.read_csv(run_dir / LIMITS_CSV)
    except (OSError, ValueError):
        return KernelTables(empty, empty, _missing(run_dir))
    return KernelTables(kernels, limits)


def _missing(run_dir: Path) -> str:
    try:
        record = json.loads((run_dir / RUN_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "no kernels.csv: the kernels row has not run on this folder"
    if record.get("state") == StepState.DONE.value:
        return "no kernels.csv, though kernels_run.json says the row ran: its tables are lost"
    reason = record.get("reason") or record.get("state") or "no reason recorded"
    return f"the kernels row did not run: {reason}"


def _ms(rows: pd.DataFrame, mask: Any = None) -> float:
    ms = pd.to_numeric(rows["kernel_ms_per_step"], errors="coerce").fillna(0.0)
    return float(ms.sum() if mask is None else ms[mask].sum())


def _n(mask: pd.Series) -> str:
    n = int(mask.sum())
    return f"{n} kernel" if n == 1 else f"{n} kernels"


def _fp32(rows: pd.DataFrame) -> Shown:
    gemm = rows[rows["family"] == Family.MATMUL.value]
    total = _ms(gemm)
    if total <= 0:
        return Shown(None, "no GEMM among the profiled kernels")
    fma = gemm["pipe"] == Pipe.FMA.value
    tf32 = (gemm["pipe"] == Pipe.TENSOR.value) & (gemm["dtype"].astype(str) == "tf32")
    parts = {
        "on the FMA pipe": _ms(gemm, fma) / total,
        "tf32 on the tensor pipe": _ms(gemm, tf32) / total,
        "16-bit on the tensor pipe": _ms(gemm, ~fma & ~tf32) / total,
    }
    said = ", ".join(f"{pct(v)} {k}" for k, v in parts.items() if v > 0)
    tensor = pd.to_numeric(gemm.loc[fma, "tensor_pipe_pct"], errors="coerce").max()
    if fma.any() and not tensor >= 1.0:
        said += " (tensor pipe idle)"
    compute = _ms(gemm, gemm["bound"] == Bound.COMPUTE.value) / total
    share = parts["on the FMA pipe"] + parts["tf32 on the tensor pipe"]
    text = f"GEMMs {total:.3g} ms/step: {said}; {pct(compute)} compute-bound"
    return Shown(share >= FP32_MIN_SHARE, text)


def _share_shown(
    rows: pd.DataFrame,
    pick: Callable[[pd.DataFrame], pd.Series],
    bar: float,
    say: Callable[[float, float, pd.Series], str],
) -> Shown:
    """Shown where the kernels ``pick`` selects take ``bar`` of the profiled kernel time or
    more; ``say(share, total ms, picked)`` words it. Not judged without a timed kernel."""
    total = _ms(rows)
    if total <= 0:
        return Shown(None, "no timed kernel profiled")
    picked = pick(rows)
    share = _ms(rows, picked) / total
    return Shown(share >= bar, say(share, total, picked))


def _chain_kernels(rows: pd.DataFrame) -> pd.Series:
    dram = pd.to_numeric(rows["dram_throughput_pct"], errors="coerce").fillna(0.0)
    return (
        (rows["family"] == Family.ELEMENTWISE.value)
        & (rows["bound"] == Bound.MEMORY.value)
        & (dram >= CHAIN_MIN_DRAM_PCT)
    )


def _chain(rows: pd.DataFrame) -> Shown:
    def say(share: float, total: float, chain: pd.Series) -> str:
        return (
            f"memory-bound elementwise kernels at >= {CHAIN_MIN_DRAM_PCT:.0f}% DRAM: {pct(share)} "
            f"of {total:.3g} ms/step of profiled kernel time ({_n(chain)})"
        )

    return _share_shown(rows, _chain_kernels, CHAIN_MIN_SHARE, say)


def _layout(rows: pd.DataFrame) -> Shown:
    def say(share: float, total: float, conv: pd.Series) -> str:
        return f"layout conversions: {pct(share)} of {total:.3g} ms/step ({_n(conv)})"

    return _share_shown(rows, lambda r: r["family"] == Family.LAYOUT.value, LAYOUT_MIN_SHARE, say)


def _latency(rows: pd.DataFrame) -> Shown:
    return _share_shown(
        rows,
        lambda r: r["bound"] == Bound.LATENCY.value,
        LATENCY_MIN_SHARE,
        lambda share, _total, _picked: f"latency-bound kernels: {pct(share)} of the time",
    )


@dataclass(frozen=True)
class Rule:
    """A class's kernel-level signature."""

    read: Callable[[pd.DataFrame], Shown]
    judges_clear: bool = True
    """Whether a variant that should not fire is held to the signature being gone."""


#: Per witnessed class, its rule (the classes are harness.kernels.tables.WITNESSED).
RULES: dict[str, Rule] = {
    Klass.FP32_MATH.value: Rule(_fp32),
    Klass.UNFUSED_ELEMENTWISE.value: Rule(_chain),
    Klass.LAYOUT_TRANSPOSE.value: Rule(_layout),
    Klass.LAUNCH_BOUND.value: Rule(_latency, judges_clear=False),
}


def witness_of(
    klass: str, state: str, tables: KernelTables, scenario: str, variant: str
) -> Witness:
    """The row's witness of one variant whose scenario's class is ``klass`` and whose measured
    truth is ``state`` (a :class:`TruthState` value)."""
    if tables.missing:
        return Witness(WitnessState.ABSENT, tables.missing)
    limit = tables.limit(scenario, variant)
    if limit is None:
        return Witness(WitnessState.ABSENT, "the kernels row has no row for this variant")
    if str(limit.get("state")) != RowState.OK.value:
        why = limit.get("reason")
        text = f"{limit.get('state')}" + (f": {why}" if isinstance(why, str) and why else "")
        return Witness(WitnessState.ABSENT, text)
    rule = RULES.get(klass)
    if rule is None:
        return Witness(WitnessState.UNJUDGED, f"the row has no kernel-level signature for {klass}")
    shown = rule.read(tables.rows(scenario, variant))
    if shown.present is None:
        return Witness(WitnessState.UNJUDGED, shown.text)
    should = {TruthState.FIRES.value: True, TruthState.CLEAR.value: False}.get(str(state))
    if should is None or (should is False and not rule.judges_clear):
        return Witness(WitnessState.UNJUDGED, f"{shown.text} ({klass} {state}: not judged)")
    agrees = shown.present == should
    verb = "shows" if shown.present else "does not show"
    text = f"{shown.text}: {verb} {klass}, measured {state}"
    return Witness(WitnessState.CONFIRMS if agrees else WitnessState.CONTRADICTS, text)


#: The columns :func:`apply_verdicts` adds to verdicts.csv, after the judge's own.
VERDICT_COLUMNS: tuple[str, ...] = ("verdict_by_truth", "witness", "witness_reason")

_ORDER = (WitnessState.CONTRADICTS, WitnessState.CONFIRMS, WitnessState.UNJUDGED)


def _scenario_clause(mine: Mapping[str, Witness]) -> tuple[WitnessState, str]:
    """A scenario's witness (the first of contradicts, confirms, unjudged that a variant has;
    else absent) and its clause for the verdict's reason ('' when no variant has a row)."""
    state = next((s for s in _ORDER if any(w.state is s for w in mine.values())),
                 WitnessState.ABSENT)  # fmt: skip
    said = [f"{v} {w.state} ({w.reason})" for v, w in mine.items()
            if w.state in (WitnessState.CONTRADICTS, WitnessState.CONFIRMS)]  # fmt: skip
    if not said:
        return state, ""
    rest = [f"{v} {w.state}" for v, w in mine.items()
            if w.state not in (WitnessState.CONTRADICTS, WitnessState.CONFIRMS)]  # fmt: skip
    tail = f"; {', '.join(rest)}" if rest else ""
    return state, "kernels row (Nsight Compute): " + "; ".join(said) + tail


def apply_verdicts(
    frame: pd.DataFrame, witnesses: Mapping[tuple[str, str], Witness]
) -> pd.DataFrame:
    """verdicts.csv with the witness: ``frame`` as the judge wrote it (or as a previous call
    left it: its own clause is taken out first), ``witnesses`` by (scenario, variant)."""
    out = frame.copy()
    for col in VERDICT_COLUMNS:
        if col not in out:
            out[col] = ""
    out[list(VERDICT_COLUMNS)] = out[list(VERDICT_COLUMNS)].astype(object)
    for i, r in out.iterrows():
        base_verdict, base_reason = _base(r)
        mine = {v: w for (s, v), w in witnesses.items() if s == r["scenario"]}
        state, clause = _scenario_clause(mine)
        verdict, reason = base_verdict, base_reason
        if clause and state is WitnessState.CONTRADICTS and base_verdict == "confirmed":
            verdict, reason = "inconclusive", f"{clause}; {base_reason}"
        elif clause:
            reason = f"{base_reason}; {clause}"
        out.at[i, "verdict"], out.at[i, "reason"] = verdict, reason
        out.at[i, "verdict_by_truth"] = base_verdict
        out.at[i, "witness"], out.at[i, "witness_reason"] = state.value, clause
    return out


def _base(r: pd.Series) -> tuple[str, str]:
    """A verdicts.csv row's verdict and reason before the witness (a previous clause taken
    out where it is there: first when it changed the verdict, else last)."""
    verdict, reason = str(r["verdict"]), str(r["reason"]) if pd.notna(r["reason"]) else ""
    before = r.get("verdict_by_truth")
    clause = r.get("witness_reason")
    if not isinstance(before, str) or not before:
        return verdict, reason
    if isinstance(clause, str) and clause:
        if verdict != before and reason.startswith(clause + "; "):
            reason = reason[len(clause) + 2 :]
        elif reason.endswith("; " + clause):
            reason = reason[: -len(clause) - 2]
    return before, reason


def rewitness(run_dir: Path) -> bool:
    """Bring the witness of a judged run up to date from its kernels tables, in place
    (diagnosis.csv's two columns, verdicts.csv's verdict, reason and the three columns; every
    other cell's text as it was); False where the run has no diagnosis.csv or verdicts.csv, or
    tables without the columns a witness needs (a run judged before there were truth states)."""
    run_dir = Path(run_dir)
    diag_path = rf.table_path(run_dir, "diagnosis")
    verdict_path = rf.table_path(run_dir, "verdicts")
    if not diag_path.is_file() or not verdict_path.is_file():
        return False
    text = {"dtype": str, "keep_default_na": False}
    diag, verdicts = pd.read_csv(diag_path, **text), pd.read_csv(verdict_path, **text)
    if not {"scenario", "variant", "truth_state"} <= set(diag) or not {
        "scenario",
        "bottleneck",
    } <= set(verdicts):
        return False
    klass = dict(zip(verdicts["scenario"], verdicts["bottleneck"], strict=True))
    tables = read_tables(run_dir)
    keys = list(zip(diag["scenario"], diag["variant"], strict=True))
    found = {
        (s, v): witness_of(klass.get(s, ""), t, tables, s, v)
        for (s, v), t in zip(keys, diag["truth_state"], strict=True)
    }
    diag["witness"] = [found[k].state.value for k in keys]
    diag["witness_reason"] = [found[k].reason for k in keys]
    rf.write_frame(diag_path, diag)
    rf.write_frame(verdict_path, apply_verdicts(verdicts, found))
    return True
