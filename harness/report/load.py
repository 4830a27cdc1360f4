"""Reading a run folder for the report: its tables, manifest and state, and why a piece is absent.

The report never reopens the exports to recompute anything: the detectors' outcomes come from
``diagnosis.csv`` (``<class>_state``) and their metrics from ``findings.csv`` (one row per
scenario x variant x class x metric). A folder made before those columns or that table existed
is read as it is, and each section says what it lacks.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.findings import State
from harness.core import runfolder as rf

__all__ = [
    "CLEAR",
    "EITHER",
    "FALSE_POSITIVE",
    "FIRES",
    "NOT_CHECKED",
    "OUTSIDE",
    "SWEEP_MARKER",
    "TABLES",
    "UNCHECKED",
    "WITHIN",
    "RunFolder",
    "class_state",
    "find_run_folders",
    "is_run_folder",
    "marker_runs",
    "scenario_info",
    "truthy",
    "warn",
]

#: The values of diagnosis.csv's state columns the report reads: ``truth_state``
#: (harness.judge.truth.TruthState), ``<class>_off_target`` (OffTargetState) and ``prediction``
#: (harness.judge.predictions.Check). The judge defines them; the report imports harness.core
#: only (tests/test_imports.py), so it names them here, once, and tests/test_report_agrees.py
#: holds them equal to the judge's.
FIRES, CLEAR, EITHER = "fires", "clear", "either"
FALSE_POSITIVE, UNCHECKED = "false_positive", "unchecked"
WITHIN, OUTSIDE, NOT_CHECKED = "within", "outside", "not_checked"

#: Marker a ``harness run -m`` job leaves in its Hydra job folder: which run folder it made.
SWEEP_MARKER = "harness-run.json"

#: The tables the report reads, by file name (runfolder.table_path builds their paths).
TABLES = tuple(
    f"{n}.csv"
    for n in (
        "runs",
        "verdicts",
        "diagnosis",
        "findings",
        "confusion",
        "detector_scores",
    )
)

_WHAT = {
    "diagnosis.csv": "detector findings",
    "findings.csv": "detector metrics",
    "verdicts.csv": "verdicts",
    "confusion.csv": "confusion matrix",
    "detector_scores.csv": "detector scores",
}


def warn(msg: str) -> None:
    """A problem the report works around, on stderr (the report itself says it too)."""
    print(f"report: {msg}", file=sys.stderr)


def json_object(path: Path) -> tuple[dict[str, Any] | None, str]:
    """(the JSON object, "") or (None, why not): the run folder's one reader (``rf.read_json``),
    its errors as the report says them."""
    try:
        data = rf.read_json(path)
    except rf.CorruptFileError as exc:
        return None, str(exc)
    if data is None:
        return None, f"no {path.name}"
    return (data, "") if isinstance(data, dict) else (None, f"{path.name} is not a JSON object")


def _read_csv(path: Path, **opts: Any) -> tuple[pd.DataFrame | None, str]:
    if not path.is_file():
        return None, ""
    try:
        return pd.read_csv(path, **opts), ""
    except pd.errors.EmptyDataError:
        return pd.DataFrame(), ""
    except (OSError, ValueError) as exc:
        return None, f"{path.name} is unreadable: {exc}"


def _str_keys(df: pd.DataFrame | None) -> None:
    for col in ("scenario", "variant"):
        if df is not None and col in df:
            df[col] = df[col].astype(str)


def truthy(v: Any) -> bool:
    """A CSV boolean (True, "true", 1) as a bool; NaN and None are False."""
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes")
    try:
        return bool(v) and not pd.isna(v)
    except (TypeError, ValueError):
        return bool(v)


def class_state(row: Mapping[str, Any] | None, klass: str) -> State | None:
    """The state of ``klass``'s detector in one ``diagnosis.csv`` row; None without a column.

    Reads ``<class>_state``. A table made before that column existed has ``<class>_fired``
    only: fired is fired, anything else counts as not judged (such a table cannot tell a clear
    detector from one that could not judge, and its reason sentences are not parsed).
    """
    if row is None:
        return None
    state = row.get(f"{klass}_state")
    if isinstance(state, str) and state:
        try:
            return State(state)
        except ValueError:
            return State.NOT_JUDGED
    if f"{klass}_fired" not in row:
        return None
    return State.FIRED if truthy(row.get(f"{klass}_fired")) else State.NOT_JUDGED


@dataclass
class RunFolder:
    """What a run folder holds; each table is None when absent (``problems`` says why)."""

    path: Path
    manifest: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    tables: dict[str, pd.DataFrame | None] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> RunFolder:
        run = cls(Path(path))
        run.manifest, why = json_object(rf.manifest_path(run.path))
        if why:
            run.problems[rf.MANIFEST] = why
        run.state, _ = json_object(rf.state_path(run.path))
        for name in TABLES:
            df, why = _read_csv(rf.table_path(run.path, name.removesuffix(".csv")))
            run.tables[name] = df
            if why:
                run.problems[name] = why
        runs = run.tables["runs.csv"]
        if (
            runs is not None
            and not runs.empty
            and ("scenario" not in runs or "variant" not in runs)
        ):
            run.problems["runs.csv"] = "runs.csv has no scenario/variant columns"
            run.tables["runs.csv"] = None
        for df in run.tables.values():
            _str_keys(df)
        return run

    # --- what the manifest says --------------------------------------------------------------
    @property
    def runs(self) -> pd.DataFrame | None:
        return self.tables.get("runs.csv")

    @property
    def gpu(self) -> dict[str, Any]:
        return (self.manifest or {}).get("gpu") or {}

    @property
    def slug(self) -> str:
        return str(self.gpu.get("slug") or "unknown")

    @property
    def gpu_name(self) -> str:
        names = self.gpu.get("names") or []
        if names:
            n = len(names)
            return f"{names[0]}" + (f" x{n}" if n > 1 else "")
        device = (self.manifest or {}).get("device")
        return "CPU (no GPU)" if device == "cpu" or self.slug == "cpu" else "unknown GPU"

    @property
    def size(self) -> str:
        runs = self.runs
        if runs is not None and "size" in runs and runs["size"].notna().any():
            return str(runs["size"].dropna().iloc[0])
        return str((self.manifest or {}).get("size") or "?")

    @property
    def created(self) -> str:
        return str((self.manifest or {}).get("created_utc") or "")

    @property
    def state_name(self) -> str:
        return str((self.state or {}).get("state") or "unknown (no state.json)")

    @property
    def complete(self) -> bool:
        """The run finished (state.json says so)."""
        return self.state_name == rf.RunState.COMPLETE

    @property
    def label(self) -> str:
        return f"{self.slug} · {self.size}"

    def scenarios(self) -> list[str]:
        seen: list[str] = []
        for name in ("runs.csv", "verdicts.csv", "diagnosis.csv"):
            df = self.tables.get(name)
            if df is not None and "scenario" in df:
                seen += [str(s) for s in df["scenario"]]
        return list(dict.fromkeys(seen))

    # --- rows of the tables --------------------------------------------------------------------
    def diag_row(self, scenario: str, variant: str) -> dict[str, Any] | None:
        """The ``diagnosis.csv`` row of one variant, or None."""
        diag = self.tables.get("diagnosis.csv")
        if diag is None or diag.empty or not {"scenario", "variant"} <= set(diag.columns):
            return None
        sel = diag[(diag["scenario"] == scenario) & (diag["variant"] == variant)]
        return sel.iloc[0].to_dict() if not sel.empty else None

    def read(
        self, name: str, *, text: tuple[str, ...] = (), literal_na: bool = False
    ) -> pd.DataFrame | None:
        """Another table of the folder by name (``timings``, ``tools_calls``; a table the run
        folder's layout does not know yet, such as ``kernels``, by its file ``<name>.csv``),
        read as the others are; None where absent or unreadable. ``text``: columns read as
        text, "" where empty; ``literal_na``: cells such as ``n/a`` stay text."""
        path = (
            rf.table_path(self.path, name) if name in rf.TABLE_NAMES else self.path / f"{name}.csv"
        )
        opts = {"keep_default_na": False, "na_values": [""]} if literal_na else {}
        df, _ = _read_csv(path, **opts)
        _str_keys(df)
        for col in text:
            if df is not None and col in df:
                df[col] = df[col].fillna("").astype(str)
        return df

    def metric(self, scenario: str, variant: str, klass: str, metric: str) -> float:
        """One detector metric of one variant from ``findings.csv``; NaN where absent."""
        f = self.tables.get("findings.csv")
        need = {"scenario", "variant", "class", "metric", "value"}
        if f is None or f.empty or not need <= set(f.columns):
            return float("nan")
        sel = f[
            (f["scenario"] == scenario)
            & (f["variant"] == variant)
            & (f["class"].astype(str) == klass)
            & (f["metric"].astype(str) == metric)
        ]
        v = pd.to_numeric(sel["value"], errors="coerce").dropna()
        return float(v.iloc[0]) if not v.empty else float("nan")

    # --- files in the folder (the layout is harness.core.runfolder's) ---------------------------------
    def profile_file(self, scenario: str, variant: str, suffix: str) -> Path | None:
        """The variant's profile file ending in ``suffix`` (``.nsys-rep``, ``.sqlite``), or None."""
        return rf.profile_file(self.path, scenario, variant, suffix)

    def has_exports(self) -> bool:
        return rf.has_exports(self.path)

    def why_missing(self, name: str) -> str:
        """One sentence: why table ``name`` is not in this folder."""
        if name in self.problems:
            return self.problems[name]
        if name == "runs.csv":
            return (
                f"no runs.csv in {self.path}: the harness writes it as soon as a variant finishes, "
                "so this folder holds no finished variant (or is not a run folder)"
            )
        runs = self.runs
        what = _WHAT.get(name, name)
        if runs is None:
            return f"no {name} ({what}) and no runs.csv either"
        if name == "findings.csv" and self.tables.get("diagnosis.csv") is not None:
            return (
                "no findings.csv: this run folder was written before the harness kept the "
                "detectors' metrics (findings.csv, next to diagnosis.csv); the report does not "
                "reopen the exports to recompute them. Run the diagnosis again to get them"
            )
        if self.state_name in (rf.RunState.RUNNING, rf.RunState.INTERRUPTED):
            return (
                f"no {name}: the run is {self.state_name}; the {what} are written once every "
                "variant has finished (resume it with harness.resume=RUN_DIR)"
            )
        if (
            "profiled" in runs
            and not runs["profiled"].astype(str).isin(["True", "true", "1"]).any()
        ):
            return (
                f"no {name}: no variant was profiled (nsys.enabled=false, or no nsys found), so "
                f"there are no exports to derive {what} from"
            )
        if not self.has_exports():
            return (
                f"no {name}: this folder holds tables only (runs.csv, manifest.json) and none of "
                f"the SQLite exports the {what} are computed from; the run's {name} was not kept "
                "with it. Diagnose exports where they are with `python -m harness diagnose`"
            )
        return (
            f"no {name} although the exports are here: the diagnosis step failed or did not run "
            "(see the run's output); `python -m harness diagnose` reads the exports directly"
        )


# --- finding run folders -------------------------------------------------------------------------


def is_run_folder(path: Path) -> bool:
    return rf.manifest_path(path).is_file() or rf.table_path(path, "runs").is_file()


def _scan(folder: Path, depth: int) -> list[Path]:
    """Run folders at most ``depth`` levels below ``folder`` (not descending into run folders)."""
    found: list[Path] = []
    try:
        children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return found
    for child in children:
        if is_run_folder(child):
            found.append(child)
        elif depth > 1:
            found += _scan(child, depth - 1)
    return found


def marker_runs(folder: Path) -> list[Path]:
    """Run folders named by the ``harness-run.json`` markers of a ``harness run -m`` sweep."""
    out: list[Path] = []
    for marker in sorted(
        folder.glob(f"*/{SWEEP_MARKER}"), key=lambda p: (len(p.parent.name), p.parent.name)
    ):
        data, _ = json_object(marker)
        for entry in (data or {}).get("runs", []):
            rel, absolute = entry.get("relative"), entry.get("absolute")
            cands = [marker.parent / rel] if rel else []
            cands += [Path(absolute)] if absolute else []
            hit = next((c.resolve() for c in cands if is_run_folder(c)), None)
            if hit is not None:
                out.append(hit)
            else:
                warn(f"{marker}: run folder {absolute or rel} is gone; left out")
    return out


def find_run_folders(path: Path) -> list[Path]:
    """The run folders ``path`` stands for: itself, a sweep's runs, or the run folders under it."""
    path = Path(path)
    if is_run_folder(path):
        return [path]
    seen: dict[Path, None] = {}
    for p in marker_runs(path) + _scan(path, 2):
        seen.setdefault(p.resolve(), None)
    return list(seen)


def scenario_info() -> tuple[dict[str, Any], str]:
    """The scenarios this checkout knows (teaching texts, classes), and why none if it fails."""
    try:
        from harness.core.config import discover_scenarios

        return discover_scenarios(), ""
    except Exception as exc:  # a broken scenario module must not cost the report
        return {}, f"the scenario modules could not be imported ({type(exc).__name__}: {exc})"
