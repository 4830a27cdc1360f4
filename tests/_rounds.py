"""Run folders for the judge's tests: timing rounds written as ``harness run`` leaves them
(``<scenario>/<variant>/timing-<r>/`` with status.json and result.json, the layout of
:mod:`harness.core.runfolder`), and committed exports copied in as the variant's profile."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.core import runfolder as rf


def write_round(
    run_dir: Path,
    scenario: str,
    variant: str,
    r: int,
    step_ms: Sequence[float],
    metrics: Mapping[str, float] | None = None,
    status: str = "ok",
) -> None:
    """Timing round ``r`` of a variant: its measured steps and metrics."""
    folder = rf.unit_dir(run_dir, scenario, variant, rf.timing_phase(r))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / rf.STATUS).write_text(json.dumps({"status": status}))
    result = {"step_ms": list(step_ms), "metrics": dict(metrics or {})}
    (folder / rf.RESULT).write_text(json.dumps(result))


def write_rounds(
    run_dir: Path,
    scenario: str,
    variant: str,
    rounds: Mapping[int, Sequence[float]],
    metrics: Mapping[str, float] | None = None,
) -> None:
    """Every timing round of a variant (the same metrics in each)."""
    for r, steps in rounds.items():
        write_round(run_dir, scenario, variant, r, steps, metrics)


def add_export(run_dir: Path, scenario: str, variant: str, export: Path) -> None:
    """A committed export as the variant's profile."""
    prof = rf.profile_dir(run_dir, scenario, variant)
    prof.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(export, prof / f"{scenario}__{variant}{rf.SQLITE_SUFFIX}")


def round_means(run_dir: Path, scenario: str, variant: str) -> dict[int, float]:
    """Mean step (ms) of each timing round that ended ``ok``, read straight from the files."""
    out = {}
    for res in sorted(Path(run_dir, scenario, variant).glob("timing-*/result.json")):
        status = json.loads((res.parent / "status.json").read_text())["status"]
        steps = json.loads(res.read_text()).get("step_ms") or []
        if status == "ok" and steps:
            out[int(res.parent.name.split("-")[1])] = sum(steps) / len(steps)
    return out


def saving_from_files(run_dir: Path, scenario: str, variant: str, removal: str) -> float:
    """1 - the geometric mean over the rounds both ran of t(removal) / t(variant): the point
    the judge must report, derived here without the harness."""
    mine, other = round_means(run_dir, scenario, variant), round_means(run_dir, scenario, removal)
    logs = [math.log(other[r] / mine[r]) for r in mine if r in other]
    return 1.0 - math.exp(sum(logs) / len(logs))
