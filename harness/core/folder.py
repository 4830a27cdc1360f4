"""The one reader of a run folder: :class:`RunFolder` (the manifest, the state, a variant's
results, any table), returning typed rows.

Why one reader: judge, tools, scripts, collect and report all read the same files, and each
once read them with rules of its own (a missing table an error here, empty there; a corrupt
manifest a traceback). Here the rules are said once:

- a JSON file: :func:`harness.core.runfolder.read_json` (None when missing, a
  :class:`~harness.core.runfolder.CorruptFileError` naming it when it cannot be parsed);
- a table: :meth:`RunFolder.table`, None when the run has not written it, a
  :class:`TableError` naming the file when it is empty, unreadable, not CSV or lacks a column
  the caller needs;
- a variant's result.json files: :func:`harness.core.results.read_variant`;
- rows: :meth:`RunFolder.runs` (runs.csv) and :meth:`RunFolder.diagnosis` (diagnosis.csv)
  as frozen dataclasses whose states are enums.

The layout (paths, names, states) stays :mod:`harness.core.runfolder`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core import runfolder as rf
from harness.core.errors import InputError
from harness.core.runfolder import OffTargetState, RunState, Status, TruthState

if TYPE_CHECKING:
    import pandas as pd

    from harness.core.results import VariantResults

__all__ = ["DiagnosisRow", "RunFolder", "RunRow", "TableError", "number"]


class TableError(InputError):
    """A run table that exists but cannot be used (``str()``: ``FILE: WHY``)."""


def number(value: Any) -> float | None:
    """A table cell as a finite float, or None (empty, NaN, text, inf)."""
    if isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _text(value: Any) -> str:
    """A table cell as text; "" for an empty one (NaN)."""
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _enum(kind: type, value: Any) -> Any:
    """``kind(value)``, or None for an empty cell or a value the enum does not hold (a table
    written by an older harness)."""
    try:
        return kind(_text(value)) if _text(value) else None
    except ValueError:
        return None


@dataclass(frozen=True)
class RunRow:
    """One runs.csv row: the columns its readers key on, typed; every column in ``cells``."""

    scenario: str
    variant: str
    kind: str
    """``baseline``, ``fix``, ``ideal`` (the variant's role in its scenario)."""
    bottleneck: str
    """The scenario's class."""
    status: Status | None
    step_ms_mean: float | None
    """The mean step over every timed round (ms); None where nothing was timed."""
    cells: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        """``scenario/variant``: how reports name it."""
        return f"{self.scenario}/{self.variant}"


@dataclass(frozen=True)
class DiagnosisRow:
    """One diagnosis.csv row (one profiled variant): its expectation and measured truth."""

    scenario: str
    variant: str
    expected: str
    """The class it should show (``expected``; ``injected`` in older tables)."""
    truth_state: TruthState | None
    """The measured truth for its scenario's class; None in tables made before it existed."""
    off_target: Mapping[str, OffTargetState] = field(default_factory=dict)
    """``<class>_off_target`` per class that has one."""
    cells: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return f"{self.scenario}/{self.variant}"


class RunFolder:
    """A run folder of ``harness run`` (``results/<utc-time>_<gpu>/``), read through one object.

    Nothing is read until asked; every reader returns None for a file the run has not written
    and raises an :class:`~harness.core.errors.InputError` (one line, naming the file) for one
    it cannot read.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    # -- what it is ------------------------------------------------------------------------
    def is_run(self) -> bool:
        """A folder with a manifest.json or a runs.csv (what ``harness run`` writes first)."""
        return rf.manifest_path(self.path).is_file() or self.has("runs")

    def has(self, name: str) -> bool:
        """The run has written table ``name`` (one of ``runfolder.TABLE_NAMES``)."""
        return rf.table_path(self.path, name).is_file()

    # -- JSON ------------------------------------------------------------------------------
    def manifest(self) -> dict[str, Any] | None:
        """manifest.json (GPU, versions, the config, the overrides), or None."""
        return self._object(rf.manifest_path(self.path))

    def state(self) -> RunState | None:
        """state.json's state, or None (no state.json, or a state this harness does not know)."""
        data = self._object(rf.state_path(self.path))
        return _enum(RunState, (data or {}).get("state"))

    def _object(self, path: Path) -> dict[str, Any] | None:
        data = rf.read_json(path)
        if data is not None and not isinstance(data, dict):
            raise rf.CorruptFileError(path, "not a JSON object")
        return data

    # -- tables ----------------------------------------------------------------------------
    def table(
        self, name: str, *, columns: Sequence[str] = (), **read_csv: Any
    ) -> pd.DataFrame | None:
        """Table ``name`` (``runs``, ``diagnosis``, ...) as a DataFrame, or None when the run
        has not written it. ``columns``: those the caller needs (a :class:`TableError` names
        the missing ones); ``read_csv``: passed to :func:`pandas.read_csv` (``dtype``, ...)."""
        return read_table(rf.table_path(self.path, name), columns=columns, **read_csv)

    def runs(self) -> list[RunRow]:
        """runs.csv as rows (none without a runs.csv)."""
        t = self.table("runs", columns=("scenario", "variant"))
        if t is None:
            return []
        return [
            RunRow(
                scenario=_text(r.get("scenario")),
                variant=_text(r.get("variant")),
                kind=_text(r.get("kind")),
                bottleneck=_text(r.get("bottleneck")),
                status=_enum(Status, r.get("status")),
                step_ms_mean=number(r.get("step_ms_mean")),
                cells=r,
            )
            for r in t.to_dict("records")
        ]

    def diagnosis(self) -> list[DiagnosisRow]:
        """diagnosis.csv as rows, one per profiled variant (none without a diagnosis.csv)."""
        t = self.table("diagnosis", columns=("scenario", "variant"))
        if t is None:
            return []
        out = []
        for r in t.to_dict("records"):
            off = {
                str(k).removesuffix("_off_target"): _enum(OffTargetState, v)
                for k, v in r.items()
                if str(k).endswith("_off_target")
            }
            out.append(
                DiagnosisRow(
                    scenario=_text(r.get("scenario")),
                    variant=_text(r.get("variant")),
                    expected=_text(r.get("expected", r.get("injected"))),
                    truth_state=_enum(TruthState, r.get("truth_state")),
                    off_target={k: v for k, v in off.items() if v is not None},
                    cells=r,
                )
            )
        return out

    # -- a variant's files -----------------------------------------------------------------
    def variant(self, scenario: str, variant: str) -> VariantResults:
        """The variant's result.json files, read once (:func:`harness.core.results.read_variant`)."""
        from harness.core.results import read_variant

        return read_variant(self.path, scenario, variant)

    def export(self, scenario: str, variant: str) -> Path | None:
        """The variant's SQLite export (``.sqlite``, else ``.sqlite.xz``), or None."""
        for suffix in (rf.SQLITE_SUFFIX, rf.SQLITE_SUFFIX + ".xz"):
            found = rf.profile_file(self.path, scenario, variant, suffix)
            if found is not None and not found.name.endswith(rf.PARTIAL_SQLITE_SUFFIX):
                return found
        return None

    def kineto_traces(self, scenario: str, variant: str) -> tuple[Path, ...]:
        """The variant's PyTorch Profiler traces, one per rank (none without a kineto run)."""
        return rf.kineto_traces(self.path, scenario, variant)


def read_table(path: Path, *, columns: Sequence[str] = (), **read_csv: Any) -> pd.DataFrame | None:
    """A CSV table of the run folder or a corpus (timing.csv, measured.csv), or None when there
    is no such file; :class:`TableError` naming it when it is empty, cannot be parsed, or lacks
    one of ``columns``."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        return None
    try:
        frame = pd.read_csv(path, **read_csv)
    except pd.errors.EmptyDataError:
        raise TableError(path, "empty file (not even a header)") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, ValueError) as exc:
        raise TableError(path, f"cannot be read as CSV ({exc})") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        shown = ", ".join(map(str, frame.columns[:8])) or "none"
        raise TableError(path, f"no column {', '.join(missing)} (its columns: {shown})")
    return frame
