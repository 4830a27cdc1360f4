"""nsys's own expert rules (``nsys analyze``) on a report, mapped to the suite's bottleneck classes.

The cross-check runs the rules that the nsys at hand offers on the same exports the detectors
read, and scores them against the same ground truth (``harness.judge.crosscheck.crosscheck``). A rule
*fires* when it returns any row, which is what the rules do at their defaults (no options are
passed, so the default row limit of 50 also caps ``rows``). A rule that nsys skips because the
report lacks its data (a CPU export has no CUDA tables: "does not contain the required CUDA
data") is ``not_applicable``, never "did not fire".

nsys renamed the rules in 2024; both spellings map to one class. Which rules stand for which
class, what fires each at its defaults and why the mapping is loose, is each class's
``ClassSpec.nsys_rules`` (bottlenecks/classes.py); :data:`RULES` is derived from them, in the
classes' order. Most rules are loose: ``gpu_gaps`` (data_stall) fires on any long stall,
``gpu_time_util`` (launch_bound) on low utilisation of any cause, ``cuda_api_sync``
(host_sync) on a single synchronize call. ``dx12-mem-op`` / ``dx12_mem_ops`` (DirectX 12)
map to no class and are not run; a class no rule stands for is n/a in the cross-check. The
rules judge the whole report, not the detectors' steady-state window.
"""

from __future__ import annotations

import csv
import functools
import re
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bottlenecks import SPECS

__all__ = [
    "RULES",
    "ExpertRulesUnavailable",
    "RuleResult",
    "RuleSpec",
    "available_rules",
    "class_votes",
    "parse_rule_list",
    "run_rule",
    "run_rules",
    "runnable_rules",
    "spec_for",
]


@dataclass(frozen=True)
class RuleSpec:
    """One expert rule under all its names, the class it stands for, and what it flags."""

    names: tuple[str, ...]  # nsys 2022.4 spelling first, 2024+ spelling last
    klass: str
    flags: str
    loose: str = ""  # what else fires it ('' if nothing)

    @property
    def canonical(self) -> str:
        """The current (2024+) name, so results of different nsys versions line up."""
        return self.names[-1]


#: Every rule that stands for a class, from the class specs (``ClassSpec.nsys_rules``).
RULES: tuple[RuleSpec, ...] = tuple(
    RuleSpec(rule.names, spec.name, rule.flags, rule.loose)
    for spec in SPECS
    for rule in spec.nsys_rules
)

#: RuleResult.status values.
FIRED, SILENT, NOT_APPLICABLE, ERROR = "fired", "silent", "not_applicable", "error"

#: ``name[:options...] -- title`` (2022.4) and ``name[:<option>[:<option>]...] -- title`` (2025.3).
_RULE_LINE = re.compile(r"^\s*([A-Za-z0-9_.-]+)(?:\[\S*)?\s+--\s+(.+?)\s*$")


class ExpertRulesUnavailable(RuntimeError):
    """The nsys at hand cannot run expert rules (no ``analyze`` command, or no known rule)."""


@dataclass(frozen=True)
class RuleResult:
    """One rule on one report. ``rows`` is None unless the rule ran (fired or silent)."""

    rule: str
    canonical: str
    klass: str
    status: str
    rows: int | None
    reason: str
    seconds: float

    @property
    def fired(self) -> bool | None:
        """True/False when the rule ran; None when it was not applicable or failed."""
        if self.status in (FIRED, SILENT):
            return self.status == FIRED
        return None

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["class"] = d.pop("klass")
        d["fired"] = self.fired
        return d


def spec_for(rule: str) -> RuleSpec | None:
    """The spec of a rule by any of its names."""
    return next((s for s in RULES if rule in s.names), None)


def _run(cmd: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)


def available_rules(nsys: str, timeout_s: float = 120) -> dict[str, str]:
    """Rules this nsys offers (name -> title), from ``nsys analyze --help-rules``.

    Raises :class:`ExpertRulesUnavailable` when the binary has no ``analyze`` command.
    """
    try:
        proc = _run([nsys, "analyze", "--help-rules"], timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ExpertRulesUnavailable(f"{nsys} analyze --help-rules did not run: {exc}") from exc
    return parse_rule_list(proc.stdout + proc.stderr, nsys, proc.returncode)


def parse_rule_list(text: str, nsys: str = "nsys", returncode: int = 0) -> dict[str, str]:
    """Rule name -> title from the text of ``nsys analyze --help-rules``, whatever its exit code
    (2022.4 and 2025.3 both print the list and exit 1) and layout: ``name -- title`` lines, and
    any line that starts with one of the mapped rules' names (2025.3 lists them indented, the
    title on the same or the next line)."""
    found: dict[str, str] = {}
    lines = text.splitlines()
    for line in lines:
        m = _RULE_LINE.match(line)
        if m and not m.group(1).startswith("-"):
            found[m.group(1)] = m.group(2)
    for i, line in enumerate(lines):
        for name in (n for spec in RULES for n in spec.names if n not in found):
            m = re.match(rf"^\s*{re.escape(name)}(?:\[[^\]]*\])?(?:\s+(?:--\s*)?(.*))?$", line)
            if m:
                title = (m.group(1) or "").strip()
                if not title and i + 1 < len(lines):
                    title = lines[i + 1].strip()
                found[name] = title
    if not found:
        raise ExpertRulesUnavailable(
            f"{nsys} offers no expert rules (`nsys analyze --help-rules` exit "
            f"{returncode}: {text.strip()[-300:]})"
        )
    return found


def runnable_rules(nsys: str) -> list[str]:
    """The rules of :data:`RULES` this nsys offers, under its own names, in RULES order. Asked
    of each nsys binary once per process: ``run_rules`` on every report of a corpus asked it
    again for each (one ``nsys analyze`` start in eight)."""
    return list(_runnable_rules(nsys))


@functools.cache
def _runnable_rules(nsys: str) -> tuple[str, ...]:
    offered = available_rules(nsys)
    names = tuple(n for spec in RULES for n in spec.names if n in offered)
    if not names:
        raise ExpertRulesUnavailable(
            f"{nsys} offers none of the mapped rules (it offers: {', '.join(sorted(offered))})"
        )
    return names


def _data_rows(path: Path) -> int:
    with path.open(newline="", encoding="utf-8", errors="replace") as fh:
        rows = [r for r in csv.reader(fh) if any(cell.strip() for cell in r)]
    return max(0, len(rows) - 1)  # the first line is the header


def run_rule(nsys: str, report: Path, rule: str, *, timeout_s: float = 300) -> RuleResult:
    """Run one rule on ``report`` (.sqlite or .nsys-rep) at its defaults, CSV to a temp folder.

    ``fired`` when the CSV has a data row; ``not_applicable`` when nsys skips the rule because
    the report lacks its data; ``error`` when nsys fails, times out or writes no CSV.
    """
    t0 = time.perf_counter()

    def result(status: str, rows: int | None, reason: str) -> RuleResult:
        return _result(rule, status, rows, reason, time.perf_counter() - t0)

    with tempfile.TemporaryDirectory(prefix="bottleneck-analyze-") as tmp:
        try:
            proc = _run(_analyze_command(nsys, report, [rule], Path(tmp) / "r"), timeout_s)
        except subprocess.TimeoutExpired:
            return result(ERROR, None, f"nsys analyze timed out after {timeout_s:g} s")
        except OSError as exc:
            return result(ERROR, None, f"nsys analyze did not run: {exc}")
        said = (proc.stdout + "\n" + proc.stderr).strip()
        skipped = _skipped(said, report)
        if skipped is not None:
            return result(NOT_APPLICABLE, None, skipped)
        if proc.returncode != 0:
            return result(ERROR, None, f"nsys analyze exit {proc.returncode}: {said[-300:]}")
        csvs = sorted(Path(tmp).glob("*.csv"))
        if not csvs:
            return result(ERROR, None, f"nsys analyze wrote no CSV: {said[-300:]}")
        rows = sum(_data_rows(p) for p in csvs)
    return _ran(rule, rows, time.perf_counter() - t0)


def _analyze_command(nsys: str, report: Path, rules: list[str], output: Path) -> list[str]:
    return [
        nsys, "analyze", *(f"--rule={r}" for r in rules), "--format=csv", f"--output={output}",
        "--force-overwrite=true", str(report),
    ]  # fmt: skip


def _result(rule: str, status: str, rows: int | None, reason: str, seconds: float) -> RuleResult:
    spec = spec_for(rule)
    klass, canonical = (spec.klass, spec.canonical) if spec else ("", rule)
    return RuleResult(rule, canonical, klass, status, rows, reason, round(seconds, 3))


def _ran(rule: str, rows: int, seconds: float) -> RuleResult:
    """The result of a rule that ran and listed ``rows`` rows."""
    if rows:
        return _result(rule, FIRED, rows, f"{rows} row(s) (default row limit 50)", seconds)
    return _result(rule, SILENT, 0, "no rows", seconds)


def _skipped(said: str, report: Path) -> str | None:
    """Why nsys skipped the rule (what it said after ``SKIPPED:``), else None."""
    skipped = re.search(r"SKIPPED:\s*(.+)", said)
    return skipped.group(1).strip().replace(str(report), report.name) if skipped else None


#: What ``nsys analyze`` (2022.4) says as it starts each rule: the rule's script and its CSV.
_PROCESSING = re.compile(r"Processing \[.*?\] with \[(?:[^\]]*/)?([^/\]]+)\.py\] to \[([^\]]+)\]")


def run_rules(
    nsys: str, report: Path, rules: list[str] | None = None, *, timeout_s: float = 300
) -> list[RuleResult]:
    """Every mapped rule this nsys offers (or ``rules``) on ``report``. One ``nsys analyze``
    runs them all (each start of nsys's analysis costs about as much as a rule on a small
    report: six starts per report were most of the cross-check's time); a rule whose outcome
    that call does not tell apart (it failed, or its output reads otherwise than expected) runs
    again on its own, as :func:`run_rule`. Each rule's ``seconds`` is its share of the call."""
    names = list(rules or runnable_rules(nsys))
    together = _run_together(nsys, report, names, timeout_s) if len(names) > 1 else {}
    return [together.get(r) or run_rule(nsys, report, r, timeout_s=timeout_s) for r in names]


def _run_together(
    nsys: str, report: Path, rules: list[str], timeout_s: float
) -> dict[str, RuleResult]:
    """The rules' results from one ``nsys analyze`` of them all, by rule; those it did not
    tell apart are left out."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bottleneck-analyze-") as tmp:
        try:
            cmd = _analyze_command(nsys, report, rules, Path(tmp) / "r")
            proc = _run(cmd, timeout_s * len(rules))
        except (OSError, subprocess.TimeoutExpired):
            return {}
        if proc.returncode != 0 or "SKIPPED" in proc.stderr:  # skips told apart on stdout only
            return {}
        said = proc.stdout
        share = (time.perf_counter() - t0) / len(rules)
        starts = list(_PROCESSING.finditer(said))
        out: dict[str, RuleResult] = {}
        for i, m in enumerate(starts):
            rule, csv_path = m.group(1), Path(m.group(2))
            if rule not in rules or rule in out:
                continue
            end = starts[i + 1].start() if i + 1 < len(starts) else len(said)
            skipped = _skipped(said[m.start() : end], report)
            if skipped is not None:
                out[rule] = _result(rule, NOT_APPLICABLE, None, skipped, share)
            elif csv_path.is_file() and csv_path.parent == Path(tmp):
                out[rule] = _ran(rule, _data_rows(csv_path), share)
    return out


def class_votes(results: list[RuleResult]) -> dict[str, bool | None]:
    """Per class: True when one of its rules fired, False when its rules ran and none fired,
    None when none of them could judge the report (not applicable or failed)."""
    votes: dict[str, bool | None] = {}
    for r in results:
        if not r.klass:
            continue
        fired = r.fired
        prev = votes.get(r.klass)
        if fired is None:
            votes.setdefault(r.klass, None)
        else:
            votes[r.klass] = bool(prev) or fired
    return votes
