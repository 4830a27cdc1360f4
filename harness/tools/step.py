"""The tools step at the end of ``harness run``: every adapter of ``tools.run`` on every
variant of the run, scored against the run's truth (:func:`harness.tools.truth.truth_table`),
written as ``tools_calls.csv``, ``tools_scores.csv`` and ``tools_f1.csv`` in the run folder.

A tool whose inputs the run lacks scores ``n/a`` with the reason (``hta`` without Kineto
traces: ``kineto.enabled=false``; the nsys readers without exports). ``nsys-rules`` and ``ours``
read what the diagnosis already did on the same exports (``expert_rules.csv``;
``diagnosis.csv`` and ``findings.csv``) rather than running ``nsys analyze`` and the detectors a
second time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import expert_rules as E
from analysis.detect.config import MAIN_METRIC
from analysis.findings import State
from bottlenecks import CLASSES
from harness.core import runfolder as rf
from harness.core.errors import InputError
from harness.core.folder import RunFolder
from harness.core.tools_config import ToolsConfig
from harness.tools.base import Call, Calls, Context, Flag, adapters
from harness.tools.hta import CACHED, cached_numbers
from harness.tools.table import f1_grid, tool_calls, tool_scores
from harness.tools.truth import items_of, truth_table

#: Traces.extra's key for the expert rules a run already ran on a report (nsys-rules reads it).
EXPERT_RULES = "expert_rules"
#: Traces.extra's key for the detectors' calls the run's diagnosis made (ours reads it).
FINDINGS = "findings"
#: diagnosis.csv's ``<class>_state`` values of a judged class.
FIRED, CLEAR = str(State.FIRED), str(State.CLEAR)


def recorded_rules(run_dir: Path) -> dict[str, list[E.RuleResult]]:
    """expert_rules.csv's rules per report (``scenario/variant``), as the rules returned them;
    empty without the table (nsys-rules then runs them itself)."""
    t = RunFolder(run_dir).table("expert_rules", columns=("scenario", "variant", "rule"))
    if t is None:
        return {}
    out: dict[str, list[E.RuleResult]] = {}
    for r in t.to_dict("records"):
        rows = pd.to_numeric(r.get("rows"), errors="coerce")
        res = E.RuleResult(
            rule=str(r["rule"]), canonical=str(r.get("rule_2024") or r["rule"]),
            klass=str(r.get("class") or ""), status=str(r["status"]),
            rows=None if pd.isna(rows) else int(rows), reason=str(r.get("reason") or ""),
            seconds=float(pd.to_numeric(r.get("seconds"), errors="coerce") or 0.0),
        )  # fmt: skip
        out.setdefault(f"{r['scenario']}/{r['variant']}", []).append(res)
    return out


def recorded_findings(run_dir: Path) -> dict[str, Calls]:
    """The detectors' calls per report from the run's diagnosis (diagnosis.csv's
    ``<class>_state``/``_impact``/``_reason``, findings.csv's main metric), as the ``ours``
    adapter makes them; empty without diagnosis.csv (``ours`` then runs the detectors)."""
    run = RunFolder(run_dir)
    diag = run.table("diagnosis", columns=("scenario", "variant"))
    if diag is None:
        return {}
    metric: dict[tuple[str, str], float] = {}
    f = run.table("findings", columns=("scenario", "variant", "class", "metric", "value"))
    if f is not None:
        main = f[f["metric"] == f["class"].map(MAIN_METRIC)]
        for r in main.to_dict("records"):
            metric[(f"{r['scenario']}/{r['variant']}", str(r["class"]))] = float(r["value"])
    out: dict[str, Calls] = {}
    for r in diag.to_dict("records"):
        name, calls = f"{r['scenario']}/{r['variant']}", {}
        for k in CLASSES:
            state = str(r.get(f"{k}_state"))
            if state not in (FIRED, CLEAR):
                calls[k] = Call(Flag.NA, str(r.get(f"{k}_reason") or "not judged"))
                continue
            parts = [f"{MAIN_METRIC[k]}={metric[(name, k)]:.3g}"] if (name, k) in metric else []
            if state == FIRED:
                parts.append(f"impact {float(r.get(f'{k}_impact') or 0):.2f}")
            calls[k] = Call(Flag.FLAGGED if state == FIRED else Flag.CLEAR, "; ".join(parts))
        out[name] = calls
    return out


def run_tools(
    run_dir: Path,
    cfg: ToolsConfig,
    thresholds: Mapping[str, Any] | None,
    say: Callable[[str], None],
) -> pd.DataFrame | None:
    """Every tool of ``cfg.run`` on the run's reports; writes the three tables and returns the
    scores (None when the run has no report a tool could read: said why)."""
    known = adapters()
    unknown = [n for n in cfg.run if n not in known]
    if unknown:
        say(f"tools.run names no adapter {', '.join(unknown)} (adapters: {', '.join(known)})")
    names = [n for n in cfg.run if n in known]
    if not names:
        return None
    try:
        items = items_of(run_dir)
    except InputError:
        if RunFolder(run_dir).has("diagnosis"):
            raise  # a table it cannot read: said, not read as an empty run
        items = []  # neither exports nor a diagnosis (a node of a multi-node run)
    if not items:
        say("tools: no nsys export nor Kineto trace in the run: no tool scored")
        return None
    extra = {EXPERT_RULES: recorded_rules(run_dir), FINDINGS: recorded_findings(run_dir),
             CACHED: cached_numbers(run_dir)}  # fmt: skip
    calls = tool_calls(run_dir, items, names, Context(tools=cfg, diagnosis=thresholds), extra)
    scores = tool_scores(calls, truth_table(run_dir, items))
    rf.write_frame(rf.table_path(run_dir, "tools_calls"), calls)
    rf.write_frame(rf.table_path(run_dir, "tools_scores"), scores)
    rf.write_frame(rf.table_path(run_dir, "tools_f1"), f1_grid(scores).reset_index())
    return scores
