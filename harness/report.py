"""``python -m harness report PATH... [--out DIR]``: a run's report, or a sweep's dose-response.

One run folder (``manifest.json`` / ``runs.csv``): writes ``report.html`` (self-contained, images
embedded) and ``report.md`` (images in ``report/`` beside it) into the folder, or into ``--out``.
They hold the speedup matrix, verdicts and detector findings, the confusion matrix, every
variant's numbers with its probe effect and links to its ``.nsys-rep``, a timeline of each
scenario's baseline above its best fix (from the SQLite exports), each scenario's teaching text and
the environment. A folder with fewer files (a reference folder with ``runs.csv`` and
``manifest.json`` only) gets the same report, each missing section saying why it is empty.

Several run folders (given one by one, or a folder holding them: a ``harness run -m`` sweep folder,
a SLURM sweep, ``results/``): a sweep report with a table of the runs and, for every scenario run
at two or more severities on the same GPU and size, its dose-response (speedup and the detector's
metric against severity, where the detector starts to fire). Written into the folder given, or
``--out``. ``harness run`` writes a run's report when it ends, and ``harness run -m`` the sweep's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.report_doc import Badge, Code, Doc, Link, Tip, write_doc

__all__ = [
    "MAIN_METRIC",
    "RunFolder",
    "build_run_report",
    "build_sweep_report",
    "find_run_folders",
    "main",
    "report_after_run",
    "report_after_sweep",
    "write_run_report",
    "write_sweep_report",
]

#: The metric each detector is judged on (its ``metrics`` key) and its threshold's key in
#: ``conf/diagnosis/default.yaml``. data_stall on a GPU export also needs GPU idle >= 50%.
MAIN_METRIC: dict[str, tuple[str, str]] = {
    "data_stall": ("data_load_share", "min_data_load_share"),
    "pageable_copy": ("pageable_h2d_share", "min_pageable_h2d_share"),
    "launch_bound": ("launch_gap_share", "min_launch_gap_share"),
    "host_sync": ("sync_exposed_share", "min_sync_exposed_share"),
    "exposed_comm": ("nccl_exposed_share", "min_nccl_exposed_share"),
}

#: Marker a ``harness run -m`` job leaves in its Hydra job folder: which run folder it made.
SWEEP_MARKER = "harness-run.json"

TABLES = ("runs.csv", "verdicts.csv", "diagnosis.csv", "confusion.csv", "detector_scores.csv")


def _warn(msg: str) -> None:
    print(f"report: {msg}", file=sys.stderr)


# --- loading a run folder ----------------------------------------------------------------------


def _read_json(path: Path) -> tuple[dict[str, Any] | None, str]:
    if not path.is_file():
        return None, f"no {path.name}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, f"{path.name} is unreadable: {exc}"
    return (data, "") if isinstance(data, dict) else (None, f"{path.name} is not a JSON object")


def _read_csv(path: Path) -> tuple[pd.DataFrame | None, str]:
    if not path.is_file():
        return None, ""
    try:
        return pd.read_csv(path), ""
    except pd.errors.EmptyDataError:
        return pd.DataFrame(), ""
    except (OSError, ValueError) as exc:
        return None, f"{path.name} is unreadable: {exc}"


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
        run.manifest, why = _read_json(run.path / "manifest.json")
        if why:
            run.problems["manifest.json"] = why
        run.state, _ = _read_json(run.path / "state.json")
        for name in TABLES:
            df, why = _read_csv(run.path / name)
            run.tables[name] = df
            if why:
                run.problems[name] = why
        runs = run.tables["runs.csv"]
        if runs is not None and not runs.empty:
            if "scenario" not in runs or "variant" not in runs:
                run.problems["runs.csv"] = "runs.csv has no scenario/variant columns"
                run.tables["runs.csv"] = None
            else:
                runs["scenario"] = runs["scenario"].astype(str)
                runs["variant"] = runs["variant"].astype(str)
        return run

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
    def label(self) -> str:
        return f"{self.slug} · {self.size}"

    def scenarios(self) -> list[str]:
        seen: list[str] = []
        for name in ("runs.csv", "verdicts.csv", "diagnosis.csv"):
            df = self.tables.get(name)
            if df is not None and "scenario" in df:
                seen += [str(s) for s in df["scenario"]]
        return list(dict.fromkeys(seen))

    def profile_file(self, scenario: str, variant: str, suffix: str) -> Path | None:
        folder = self.path / scenario / variant / "profile"
        return next(iter(sorted(folder.glob(f"*{suffix}"))), None) if folder.is_dir() else None

    def has_exports(self) -> bool:
        return any(self.path.glob("*/*/profile/*.sqlite"))

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
        what = {
            "diagnosis.csv": "detector findings",
            "verdicts.csv": "verdicts",
            "confusion.csv": "confusion matrix",
            "detector_scores.csv": "detector scores",
        }.get(name, name)
        if runs is None:
            return f"no {name} ({what}) and no runs.csv either"
        if self.state_name in ("running", "interrupted"):
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


def _is_run_folder(path: Path) -> bool:
    return (path / "manifest.json").is_file() or (path / "runs.csv").is_file()


def _scan(folder: Path, depth: int) -> list[Path]:
    """Run folders at most ``depth`` levels below ``folder`` (not descending into run folders)."""
    found: list[Path] = []
    try:
        children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return found
    for child in children:
        if _is_run_folder(child):
            found.append(child)
        elif depth > 1:
            found += _scan(child, depth - 1)
    return found


def _marker_runs(folder: Path) -> list[Path]:
    """Run folders named by the ``harness-run.json`` markers of a ``harness run -m`` sweep."""
    out: list[Path] = []
    for marker in sorted(
        folder.glob(f"*/{SWEEP_MARKER}"), key=lambda p: (len(p.parent.name), p.parent.name)
    ):
        data, _ = _read_json(marker)
        for entry in (data or {}).get("runs", []):
            rel, absolute = entry.get("relative"), entry.get("absolute")
            cands = [marker.parent / rel] if rel else []
            cands += [Path(absolute)] if absolute else []
            hit = next((c.resolve() for c in cands if _is_run_folder(c)), None)
            if hit is not None:
                out.append(hit)
            else:
                _warn(f"{marker}: run folder {absolute or rel} is gone; left out")
    return out


def find_run_folders(path: Path) -> list[Path]:
    """The run folders ``path`` stands for: itself, a sweep's runs, or the run folders under it."""
    path = Path(path)
    if _is_run_folder(path):
        return [path]
    marked = _marker_runs(path)
    scanned = _scan(path, 2)
    seen: dict[Path, None] = {}
    for p in marked + scanned:
        seen.setdefault(p.resolve(), None)
    return list(seen)


def _scenario_info() -> tuple[dict[str, Any], str]:
    try:
        from harness.config import discover_scenarios

        return discover_scenarios(), ""
    except Exception as exc:  # a broken scenario module must not cost the report
        return {}, f"the scenario modules could not be imported ({type(exc).__name__}: {exc})"


def _rel(target: Path, out_dir: Path) -> str:
    return os.path.relpath(target, out_dir).replace(os.sep, "/")


def _num(v: Any) -> float:
    x = pd.to_numeric(v, errors="coerce")
    return float(x) if pd.notna(x) else math.nan


def _g3(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def _x(v: float) -> str:
    if not math.isfinite(v):
        return "–"
    return f"{v:.2f}x" if abs(v) < 10 else f"{v:.1f}x"


def _speedup_text(r: Any) -> str:
    s, lo, hi = (
        _num(r.get("speedup")),
        _num(r.get("speedup_ci_low")),
        _num(r.get("speedup_ci_high")),
    )
    if not math.isfinite(s):
        return "–"
    ci = f" [{lo:.2f}–{hi:.2f}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    return _x(s) + ci


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes")
    try:
        return bool(v) and not pd.isna(v)
    except (TypeError, ValueError):
        return bool(v)


def _not_judged(reason: str) -> bool:
    """A detector's reason saying the export lacks what it needs (the finding means nothing)."""
    return "cannot be judged" in reason or ("table " in reason and " is missing" in reason)


def _section(doc: Doc, what: str, build: Callable[[], None]) -> None:
    """Run one section builder; a failure becomes a visible error note, never a lost report."""
    try:
        build()
    except Exception as exc:
        _warn(f"the {what} section failed: {type(exc).__name__}: {exc}")
        doc.note(
            f"this section could not be drawn: {type(exc).__name__}: {exc} "
            f"({traceback.extract_tb(exc.__traceback__)[-1].name})",
            kind="error",
        )


def _new_figure_context() -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)


# --- run report sections ------------------------------------------------------------------------

VERDICT_KINDS = {"confirmed": "confirmed", "refuted": "refuted", "inconclusive": "inconclusive"}


def _summary(doc: Doc, run: RunFolder, found: dict[str, Any], out_dir: Path) -> None:
    m = run.manifest or {}
    items: list[tuple[str, list[Any]]] = [
        ("Run folder", [Code(str(run.path))]),
        (
            "GPU",
            [
                run.gpu_name
                + (f" (driver {run.gpu.get('driver')})" if run.gpu.get("driver") else "")
            ],
        ),
        ("Size / device", [f"{run.size} / {m.get('device', '?')}"]),
        (
            "State",
            [Badge(run.state_name, "ok" if run.state_name == "complete" else "inconclusive")],
        ),
        ("Created (UTC)", [run.created or "–"]),
    ]
    runs = run.runs
    if runs is not None and not runs.empty:
        status = runs["status"].astype(str) if "status" in runs else pd.Series(dtype=str)
        counts = status.value_counts()
        parts: list[Any] = [f"{runs['scenario'].nunique()} scenarios, {len(runs)} variants: "]
        for k, n in counts.items():
            parts += [Badge(f"{n} {k}", str(k)), " "]
        items.append(("Variants", parts))
    ver = run.tables.get("verdicts.csv")
    if ver is not None and not ver.empty and "verdict" in ver:
        parts = []
        for r in ver.itertuples():
            parts += [
                Link(str(r.scenario), f"#scenario-{r.scenario}"),
                " ",
                Badge(str(r.verdict), str(r.verdict)),
                "  ",
            ]
        items.append(("Verdicts", parts))
    doc.deflist(items)
    if m.get("device") == "cpu" or run.slug == "cpu":
        doc.note(
            "CPU run: timings are CPU timings and say nothing about GPU speedups, and nsys on a "
            "machine without a GPU records NVTX ranges and OS-runtime calls only (no kernels, "
            "copies or CUDA API calls), so detectors that need CUDA activity cannot judge.",
            kind="caveat",
        )
    if run.state is None:
        doc.note(
            "no state.json: this folder does not say whether the run finished (a folder of "
            "tables only keeps runs.csv and manifest.json)",
            kind="caveat",
        )
    elif run.state_name != "complete":
        doc.note(
            f"the run's state is '{run.state_name}': some variants may be missing or failed.",
            kind="caveat",
        )
    if not found:
        _, why = _scenario_info()
        doc.note(f"no scenario texts: {why or 'no scenarios found'}", kind="caveat")


def _matrix(doc: Doc, run: RunFolder, found: dict[str, Any]) -> None:
    from analysis.plots.matrix import speedup_matrix

    runs = run.runs
    if runs is None or runs.empty:
        doc.note(run.why_missing("runs.csv"))
        return
    if "speedup" not in runs:
        doc.note("runs.csv has no speedup column: nothing to draw")
        return
    klass = {s: (found[s].bottleneck if s in found else str(g["bottleneck"].iloc[0]) if "bottleneck" in g else "")
             for s, g in runs.groupby("scenario", sort=False)}  # fmt: skip
    labels = {s: f"{s}\n({k})" if k else s for s, k in klass.items()}
    fig = speedup_matrix(runs, labels=labels)
    n_ok = int(fig.cells["speedup"].notna().sum())
    doc.image(
        "speedup_matrix",
        fig,
        "speedup matrix: scenarios by fixes and ideal",
        "Each cell: the variant's mean step time over its scenario's baseline from the same run "
        "(= throughput ratio) with the 95% bootstrap CI in brackets; a CI that contains 1x means "
        "no measurable change. Colour: log speedup, red slower, green faster. Grey hatched: "
        "'n/a' where the scenario has no such variant, else the status of a variant that did not "
        "finish (skipped, failed, oom, ...).",
    )
    if n_ok == 0:
        doc.note("no variant other than the baseline has a speedup in this run", kind="caveat")


def _verdicts(doc: Doc, run: RunFolder, found: dict[str, Any]) -> None:
    ver = run.tables.get("verdicts.csv")
    scen = run.scenarios()
    if ver is None or ver.empty:
        doc.note(run.why_missing("verdicts.csv"))
        rows = []
        for s in scen:
            sc = found.get(s)
            rows.append([Link(s, f"#scenario-{s}"), sc.title if sc else "–", sc.bottleneck if sc else "–",
                         Badge("no verdict", "missing")])  # fmt: skip
        if rows:
            doc.table(["scenario", "title", "class", "verdict"], rows)
        return
    rows = []
    for r in ver.to_dict("records"):
        s = str(r.get("scenario"))
        sc = found.get(s)
        v = str(r.get("verdict", ""))
        rows.append(
            [
                Link(s, f"#scenario-{s}"),
                sc.title if sc else "–",
                str(r.get("bottleneck", sc.bottleneck if sc else "")),
                Badge(v, VERDICT_KINDS.get(v, "")),
                r.get("reason"),
                r.get("off_target") if isinstance(r.get("off_target"), str) else "none",
            ]
        )
    doc.table(["scenario", "title", "class", "verdict", "reason", "off-target findings"], rows)
    doc.p(
        "confirmed: the baseline's own detector fires, none of its fixes or ideal fires it, and "
        "the best fix's speedup CI lower bound is at least 1.1x; refuted or inconclusive "
        "otherwise, with the reason.",
        cls="sub",
    )


def _detectors(doc: Doc, run: RunFolder) -> None:
    from analysis.findings import CLASSES

    diag = run.tables.get("diagnosis.csv")
    if diag is None or diag.empty:
        doc.note(run.why_missing("diagnosis.csv"))
        return
    rows = []
    for r in diag.to_dict("records"):
        injected = str(r.get("injected", ""))
        cells: list[Any] = [
            r.get("scenario"),
            r.get("variant"),
            r.get("kind"),
            injected,
            r.get("primary"),
        ]
        for k in CLASSES:
            if f"{k}_fired" not in r:
                cells.append("–")
                continue
            reason = str(r.get(f"{k}_reason", "") or "")
            if _truthy(r.get(f"{k}_fired")):
                impact = _num(r.get(f"{k}_impact"))
                txt = f"fired {impact:.0%}" if math.isfinite(impact) else "fired"
                good = k == injected
                cells.append(Badge(txt, "fired-good" if good else "fired-bad", reason))
            elif _not_judged(reason):
                cells.append(Tip("not judged", reason))
            else:
                cells.append(Tip("no", reason) if reason else "no")
        if isinstance(r.get("error"), str) and r.get("error"):
            cells[4] = Tip(str(r.get("primary")), str(r["error"]))
        rows.append(cells)
    doc.table(["scenario", "variant", "kind", "injected", "primary", *CLASSES], rows)
    doc.p(
        "One row per profiled variant; a column per detector. 'fired N%' gives the impact (share "
        "of step time the bottleneck explains); green where the detector found what the variant "
        "injects, red where it fired on something else. 'not judged': the export lacks the tables "
        "the detector needs (CPU capture). Hover for each detector's reason.",
        cls="sub",
    )
    scores = run.tables.get("detector_scores.csv")
    if scores is not None and not scores.empty:
        doc.h(3, "Detector scores")
        doc.table(
            list(scores.columns),
            scores.itertuples(index=False),
            numeric=range(1, len(scores.columns)),
        )


def _confusion(doc: Doc, run: RunFolder) -> None:
    conf = run.tables.get("confusion.csv")
    if conf is None or conf.empty:
        doc.note(run.why_missing("confusion.csv"))
        return
    idx = "injected" if "injected" in conf else conf.columns[0]
    mat = conf.set_index(idx)
    mat = mat.apply(pd.to_numeric, errors="coerce").fillna(0).astype(int)
    doc.image(
        "confusion",
        _confusion_figure(mat),
        "confusion matrix: injected class by primary finding",
        "Rows: the class each variant injects (baselines their scenario's class, fixes and ideal "
        "'none'); columns: the detectors' primary finding on its export. Counts on the diagonal "
        "(outlined) are right.",
        width_px=620,
    )
    doc.table(
        ["injected \\ primary", *map(str, mat.columns)],
        ([str(i), *map(int, row)] for i, row in zip(mat.index, mat.to_numpy(), strict=True)),
        numeric=range(1, len(mat.columns) + 1),
    )


def _confusion_figure(mat: pd.DataFrame) -> Any:
    import seaborn as sns
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    fig = Figure(figsize=(6.6, 4.6), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    sns.heatmap(
        mat,
        ax=ax,
        annot=True,
        fmt="d",
        cmap="Blues",
        cbar=False,
        linewidths=1,
        linecolor="white",
        vmin=0,
        vmax=max(1, int(mat.to_numpy().max())),
        annot_kws={"fontsize": 10},
    )
    for i, r in enumerate(mat.index):
        if r in mat.columns:
            j = list(mat.columns).index(r)
            ax.add_patch(Rectangle((j, i), 1, 1, fill=False, edgecolor="#2b8a3e", lw=2.2))
    ax.set_xlabel("primary finding (detectors)")
    ax.set_ylabel("injected (ground truth)")
    ax.tick_params(length=0)
    ax.set_xticklabels(ax.get_xticklabels(), rotation=30, ha="right")
    ax.set_yticklabels(ax.get_yticklabels(), rotation=0)
    ax.set_title("Confusion matrix", loc="left", fontsize=11)
    return fig


def _variants(doc: Doc, run: RunFolder, out_dir: Path) -> None:
    runs = run.runs
    if runs is None or runs.empty:
        doc.note(run.why_missing("runs.csv"))
        return
    rows = []
    for r in runs.to_dict("records"):
        st = str(r.get("status", ""))
        p10, p90 = _num(r.get("step_ms_p10")), _num(r.get("step_ms_p90"))
        spread = f"{_g3(p10)}–{_g3(p90)}" if math.isfinite(p10) and math.isfinite(p90) else "–"
        pe = _num(r.get("probe_effect"))
        pe_cell: Any = f"{pe:.2f}" if math.isfinite(pe) else "–"
        if math.isfinite(pe) and abs(pe - 1) > 0.1:
            pe_cell = Tip(
                f"{pe:.2f} ⚠", "nsys changed this variant's mean step time by more than 10%"
            )
        links = _profile_links(run, r, out_dir)
        err = r.get("error")
        err_cell: Any = "–"
        if isinstance(err, str) and err:
            err_cell = Tip(err[:80] + ("…" if len(err) > 80 else ""), err)
        share = _num(r.get("share_of_ideal"))
        rows.append(
            [
                Link(str(r["scenario"]), f"#scenario-{r['scenario']}"),
                r["variant"],
                r.get("kind"),
                Badge(st, st),
                _num(r.get("step_ms_median")),
                spread,
                _num(r.get("throughput_samples_per_s")),
                _speedup_text(r),
                f"{share:.0%}" if math.isfinite(share) else "–",
                pe_cell,
                links,
                err_cell,
            ]
        )
    doc.table(
        [
            "scenario", "variant", "kind", "status", "median step ms", "p10–p90 ms", "samples/s",
            "speedup [95% CI]", "share of ideal", "probe effect", "profile (nsys GUI)", "error",
        ],
        rows,
        numeric={4, 5, 6, 7, 8, 9},
    )  # fmt: skip
    doc.p(
        "Probe effect: the profiled run's mean step time over the unprofiled mean; above 1 nsys "
        "slowed the variant down, and far from 1 (⚠, more than 10%) its timeline is a distorted "
        "picture of the unprofiled run. Open a .nsys-rep with nsys-ui (File > Open).",
        cls="sub",
    )
    pe = (
        pd.to_numeric(runs.get("probe_effect"), errors="coerce") if "probe_effect" in runs else None
    )
    if pe is None or pe.notna().sum() == 0:
        doc.note(
            "no probe effect: no variant was both profiled and timed (nsys.enabled=false, no nsys "
            "found, or the profiles failed)"
        )
        return
    doc.image(
        "probe_effect",
        _probe_figure(runs.assign(probe_effect=pe)),
        "probe effect per variant",
        "Profiled mean step time / unprofiled mean step time per variant; the band marks ±10%.",
        width_px=900,
    )


def _probe_figure(runs: pd.DataFrame) -> Any:
    from matplotlib.figure import Figure

    d = runs[runs["probe_effect"].notna()]
    labels = [f"{s} · {v}" for s, v in zip(d["scenario"], d["variant"], strict=True)]
    vals = d["probe_effect"].to_numpy(float)
    fig = Figure(figsize=(9, max(1.8, 0.3 * len(d) + 1.1)), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    colors = ["#c0392b" if v > 1.1 else "#2e86c1" if v < 0.9 else "#7f8c8d" for v in vals]
    y = range(len(d))
    ax.axvspan(0.9, 1.1, color="#eef2f5", zorder=0)
    ax.hlines(list(y), 1.0, vals, color=colors, lw=2.5, zorder=2)
    ax.scatter(vals, list(y), color=colors, s=40, zorder=3)
    for yi, v in zip(y, vals, strict=True):
        ax.annotate(f"{v:.2f}", (v, yi), xytext=(6 if v >= 1 else -6, 0), textcoords="offset points",
                    va="center", ha="left" if v >= 1 else "right", fontsize=8)  # fmt: skip
    ax.axvline(1.0, color="#333333", lw=1)
    ax.set_yticks(list(y))
    ax.set_yticklabels(labels, fontsize=8.5)
    ax.set_ylim(len(d) - 0.5, -0.5)
    lo, hi = min(0.8, float(vals.min()) - 0.1), max(1.2, float(vals.max()) + 0.15)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("probe effect (profiled / unprofiled mean step time)")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig


def _profile_links(run: RunFolder, r: dict[str, Any], out_dir: Path) -> list[Any]:
    s, v = str(r["scenario"]), str(r["variant"])
    rep = run.profile_file(s, v, ".nsys-rep")
    named = r.get("report")
    if rep is None and isinstance(named, str) and named and (run.path / named).is_file():
        rep = run.path / named
    parts: list[Any] = []
    if rep is not None:
        parts.append(Link(".nsys-rep", _rel(rep, out_dir)))
    elif isinstance(named, str) and named:
        parts.append(Tip("not here", f"runs.csv names {named}, which is not in this folder"))
    db = run.profile_file(s, v, ".sqlite")
    if db is not None:
        parts += [" · ", Link(".sqlite", _rel(db, out_dir))]
    return parts or ["–"]


def _best_pair(run: RunFolder, scen: str) -> tuple[Path | None, Path | None, str, str]:
    """(baseline export, best fix's export, fix name, why something is missing)."""
    runs = run.runs
    rows = runs[runs["scenario"] == scen] if runs is not None else pd.DataFrame()
    base_name = "baseline"
    if not rows.empty and "kind" in rows and (rows["kind"] == "baseline").any():
        base_name = str(rows.loc[rows["kind"] == "baseline", "variant"].iloc[0])
    base = run.profile_file(scen, base_name, ".sqlite")
    cands = []
    for r in rows.to_dict("records") if not rows.empty else []:
        if str(r.get("kind")) == "baseline" or str(r.get("status", "ok")) != "ok":
            continue
        db = run.profile_file(scen, str(r["variant"]), ".sqlite")
        if db is None:
            continue
        sp = _num(r.get("speedup"))
        cands.append(
            (
                str(r.get("kind")) != "fix",
                -(sp if math.isfinite(sp) else 0.0),
                str(r["variant"]),
                db,
            )
        )
    cands.sort()
    fix_db, fix_name = (cands[0][3], cands[0][2]) if cands else (None, "")
    why = ""
    if base is None:
        if not run.has_exports():
            why = (
                "no SQLite exports in this folder (a folder of tables only, e.g. a reference "
                "result; or the run was not profiled), so there is no timeline to draw"
            )
        else:
            why = f"the baseline of {scen} has no SQLite export (its profile failed or was not run)"
    elif fix_db is None:
        why = f"no fix or ideal of {scen} has a SQLite export: the baseline is shown alone"
    return base, fix_db, fix_name, why


def _scenario_section(
    doc: Doc,
    run: RunFolder,
    scen: str,
    found: dict[str, Any],
    out_dir: Path,
    steps: int,
    timelines: bool,
) -> None:
    sc = found.get(scen)
    runs = run.runs
    rows = runs[runs["scenario"] == scen] if runs is not None else pd.DataFrame()
    sev = _num(rows["severity"].iloc[0]) if not rows.empty and "severity" in rows else math.nan
    parts: list[Any] = []
    if sc is not None:
        parts += [Code(sc.bottleneck), " · "]
        if math.isfinite(sev):
            parts += [f"severity {sev:g} {sc.severity.unit} ({sc.severity.meaning})"]
    elif math.isfinite(sev):
        parts += [f"severity {sev:g}"]
    ver = run.tables.get("verdicts.csv")
    if ver is not None and "scenario" in ver and (ver["scenario"].astype(str) == scen).any():
        v = ver[ver["scenario"].astype(str) == scen].iloc[0]
        parts += [
            " · verdict ",
            Badge(str(v["verdict"]), VERDICT_KINDS.get(str(v["verdict"]), "")),
            f" — {v.get('reason', '')}",
        ]
    else:
        parts += [" · ", Badge("no verdict", "missing")]
    doc.p(*parts)
    if sc is not None:
        t = sc.teaching
        items: list[tuple[str, list[Any]]] = [
            ("What the timeline shows", [t.symptom]),
            ("Why", [t.cause]),
            ("What fixes it", [t.fix]),
        ]
        if getattr(sc, "expected_diagnosis", ""):
            items.append(("Expected diagnosis", [sc.expected_diagnosis]))
        if sc.severity.why_default:
            items.append(("Why the default severity", [sc.severity.why_default]))
        doc.deflist(items)
    else:
        doc.note(
            f"no teaching text: scenario {scen!r} is not among the scenarios this checkout knows"
        )

    if not timelines:
        doc.note("timelines left out (--no-timelines)", kind="caveat")
    else:
        _section(doc, f"{scen} timeline", lambda: _timeline(doc, run, scen, steps))
    if not rows.empty:
        links: list[Any] = ["Profiles for the nsys GUI (nsys-ui FILE): "]
        for i, r in enumerate(rows.to_dict("records")):
            links += [" | " if i else "", f"{r['variant']}: ", *_profile_links(run, r, out_dir)]
        doc.p(*links, cls="sub")


def _timeline(doc: Doc, run: RunFolder, scen: str, steps: int) -> None:
    from analysis.plots.timeline import load_timeline, plot_pair, plot_timeline

    base, fix, fix_name, why = _best_pair(run, scen)
    if base is None:
        doc.note(f"no timeline: {why}")
        return
    b = load_timeline(base, steps=steps)
    if fix is None:
        fig = plot_timeline(b, title=f"{scen} · baseline")
        doc.image(f"timeline_{scen}", fig, f"{scen} timeline, baseline", why)
        return
    f = load_timeline(fix, steps=steps)
    zoom = f.span_ms > 0 and b.span_ms / f.span_ms >= 4
    fig = plot_pair(
        b, f, labels=("baseline", fix_name), title=f"{scen}: baseline above {fix_name}", zoom=zoom
    )
    idle = [d.idle_share for d in (b, f)]
    idle_txt = (
        f" GPU idle {idle[0]:.0%} of the baseline's steps against {idle[1]:.0%} with {fix_name}."
        if all(i is not None for i in idle)
        else " No GPU activity in these exports (CPU capture): only host rows are drawn."
    )
    doc.image(
        f"timeline_{scen}",
        fig,
        f"{scen} timeline: baseline above {fix_name}",
        f"{len(b.step_indices) or steps} steady-state steps from the middle of each measured "
        f"window, drawn from the SQLite exports; {fix_name} is the fastest fix with an export, on "
        "the baseline's time scale"
        + (" and again zoomed" if zoom else "")
        + "."
        + idle_txt
        + " Rows: NVTX ranges per host thread, its CUDA API calls, kernels and copies per GPU "
        "stream; hatched red: GPU idle.",
    )


def _environment(doc: Doc, run: RunFolder, out_dir: Path) -> None:
    m = run.manifest
    if m is None:
        doc.note(run.why_missing("manifest.json"))
    else:
        gpu = run.gpu
        nsys = m.get("nsys") or {}
        items = [
            ("GPU", [run.gpu_name]),
            ("GPU count / memory", [f"{gpu.get('count', '–')} / {', '.join(f'{x} MiB' for x in gpu.get('memory_mib') or []) or '–'}"]),
            ("Driver", [str(gpu.get("driver") or "–")]),
            ("nsys", [str(nsys.get("version") or "not found"), " ", Code(str(nsys.get("path") or ""))]),
            ("torch", [str(m.get("torch", "–"))]),
            ("Python", [str(m.get("python", "–"))]),
            ("Host / platform", [f"{m.get('host', '–')} / {m.get('platform', '–')}"]),
            ("git", [Code(str(m.get("git_sha", "–")))]),
            ("Created (UTC)", [str(m.get("created_utc", "–"))]),
            ("Run folder when made", [Code(str(m.get("run_dir", "–")))]),
        ]  # fmt: skip
        for key in sorted(k for k in m if k not in {
            "gpu", "nsys", "torch", "python", "host", "platform", "git_sha", "created_utc", "run_dir",
            "config", "worker_env", "scenarios",
        }):  # fmt: skip
            val = m[key]
            items.append((key, [json.dumps(val) if isinstance(val, dict | list) else str(val)]))
        we = m.get("worker_env") or {}
        if we:
            items.append(("Worker environment", [", ".join(f"{k}={v}" for k, v in we.items())]))
        doc.deflist(items)
        if m.get("config") is not None:
            import yaml

            doc.details(
                "Full composed configuration (manifest.json: config)",
                yaml.safe_dump(m["config"], sort_keys=False),
            )
    files: list[Any] = ["Files: "]
    first = ["manifest.json", "state.json", *TABLES]
    here = sorted(p.name for p in run.path.glob("*") if p.suffix in (".json", ".csv", ".parquet"))
    for name in [n for n in first if n in here] + [n for n in here if n not in first]:
        files += [Link(name, _rel(run.path / name, out_dir)), "  "]
    doc.p(*files, cls="sub")


def build_run_report(
    run: RunFolder,
    out_dir: Path,
    *,
    steps: int = 2,
    timelines: bool = True,
    found: dict[str, Any] | None = None,
) -> Doc:
    """The report of one run folder as a :class:`Doc` (render with ``write_doc``)."""
    _new_figure_context()
    if found is None:
        found, _ = _scenario_info()
    doc = Doc(f"bottleneck-suite report: {run.path.name}")
    doc.h(1, f"bottleneck-suite report: {run.path.name}", "top")
    doc.p(
        f"{run.gpu_name} · size {run.size} · state {run.state_name} · "
        f"written {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC by python -m harness report",
        cls="sub",
    )
    scen = run.scenarios()
    nav: list[Any] = []
    for text, anchor in [
        ("Summary", "summary"), ("Speedup matrix", "matrix"), ("Verdicts", "verdicts"),
        ("Detectors", "detectors"), ("Confusion", "confusion"), ("Variants", "variants"),
        *[(s, f"scenario-{s}") for s in scen], ("Environment", "environment"),
    ]:  # fmt: skip
        nav += [Link(text, f"#{anchor}"), " · "]
    doc.p(*nav[:-1], cls="nav")
    doc.h(2, "Summary", "summary")
    _section(doc, "summary", lambda: _summary(doc, run, found, out_dir))
    doc.h(2, "Speedup matrix", "matrix")
    _section(doc, "matrix", lambda: _matrix(doc, run, found))
    doc.h(2, "Verdicts", "verdicts")
    _section(doc, "verdicts", lambda: _verdicts(doc, run, found))
    doc.h(2, "Detector findings", "detectors")
    _section(doc, "detectors", lambda: _detectors(doc, run))
    doc.h(2, "Confusion matrix", "confusion")
    _section(doc, "confusion", lambda: _confusion(doc, run))
    doc.h(2, "Variants: timings, probe effect, profiles", "variants")
    _section(doc, "variants", lambda: _variants(doc, run, out_dir))
    if not scen:
        doc.h(2, "Scenarios", "scenarios")
        doc.note(run.why_missing("runs.csv"))
    for s in scen:
        title = found[s].title if s in found else s
        doc.h(2, f"{s}: {title}", f"scenario-{s}")
        _section(
            doc, s, lambda s=s: _scenario_section(doc, run, s, found, out_dir, steps, timelines)
        )
    doc.h(2, "Environment", "environment")
    _section(doc, "environment", lambda: _environment(doc, run, out_dir))
    return doc


def write_run_report(
    run_dir: Path,
    out_dir: Path | None = None,
    *,
    steps: int = 2,
    timelines: bool = True,
    found: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    """Write ``report.html``, ``report.md`` and ``report/*.png`` for one run folder."""
    run = RunFolder.load(Path(run_dir))
    out = Path(out_dir) if out_dir is not None else run.path
    doc = build_run_report(run, out, steps=steps, timelines=timelines, found=found)
    return write_doc(doc, out)


# --- sweeps: dose-response ----------------------------------------------------------------------


def _thresholds() -> dict[str, Any]:
    try:
        from analysis.detect import load_thresholds

        return load_thresholds()
    except Exception as exc:
        _warn(f"detector thresholds unavailable: {exc}")
        return {}


def _detector_point(
    run: RunFolder, scen: str, variant: str, klass: str, thresholds: dict[str, Any]
) -> dict[str, Any]:
    """The main metric of ``klass``'s detector on one variant's export, and whether it fired.

    The value comes from the SQLite export (the detector is run again: diagnosis.csv keeps the
    impact, not the metric), else from a ``<class>_<metric>`` column of diagnosis.csv; ``fired``
    from diagnosis.csv (what the run decided), else from the detector run here.
    """
    metric = MAIN_METRIC.get(klass, ("", ""))[0]
    out: dict[str, Any] = {"value": math.nan, "fired": pd.NA, "reason": "", "source": ""}
    diag = run.tables.get("diagnosis.csv")
    row = None
    if diag is not None and not diag.empty and {"scenario", "variant"} <= set(diag.columns):
        sel = diag[
            (diag["scenario"].astype(str) == scen) & (diag["variant"].astype(str) == variant)
        ]
        row = sel.iloc[0] if not sel.empty else None
    if row is not None and f"{klass}_fired" in row:
        out["fired"] = _truthy(row[f"{klass}_fired"])
        out["reason"] = str(row.get(f"{klass}_reason", "") or "")
        if _not_judged(out["reason"]):
            out["fired"] = pd.NA
    db = run.profile_file(scen, variant, ".sqlite")
    if db is not None and klass in MAIN_METRIC and thresholds:
        from analysis.detect import REGISTRY
        from analysis.trace import TraceError, open_trace

        try:
            with open_trace(db) as trace:
                finding = REGISTRY[klass](trace, thresholds)
        except (TraceError, KeyError) as exc:
            out["reason"] = out["reason"] or f"export unreadable: {exc}"
        else:
            if metric in finding.metrics:
                out["value"], out["source"] = float(finding.metrics[metric]), "export"
            out["reason"] = out["reason"] or finding.reason
            if pd.isna(out["fired"]) and not _not_judged(finding.reason):
                out["fired"] = bool(finding.fired)
    if not math.isfinite(out["value"]) and row is not None and f"{klass}_{metric}" in row:
        out["value"], out["source"] = _num(row[f"{klass}_{metric}"]), "diagnosis.csv"
    return out


def dose_data(
    runs: list[RunFolder], scen: str, klass: str
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(speed, detect, notes) for one scenario over runs at different severities (one GPU/size)."""
    thresholds = _thresholds()
    notes: list[str] = []
    by_sev: dict[float, RunFolder] = {}
    for run in sorted(runs, key=lambda r: r.created):
        rows = run.runs[run.runs["scenario"] == scen]
        sev = _num(rows["severity"].iloc[0]) if "severity" in rows else math.nan
        if not math.isfinite(sev):
            notes.append(f"{run.path.name}: no severity in runs.csv; left out")
            continue
        if sev in by_sev:
            notes.append(
                f"severity {sev:g} was run twice ({by_sev[sev].path.name}, {run.path.name}); "
                "the later run is shown"
            )
        by_sev[sev] = run
    speed, detect = [], []
    for sev, run in sorted(by_sev.items()):
        rows = run.runs[run.runs["scenario"] == scen]
        for r in rows.to_dict("records"):
            v = str(r["variant"])
            kind = str(r.get("kind", "fix"))
            speed.append({
                "severity": sev, "run": run.path.name, "variant": v, "kind": kind,
                "speedup": _num(r.get("speedup")) if kind != "baseline" else 1.0,
                "ci_low": _num(r.get("speedup_ci_low")), "ci_high": _num(r.get("speedup_ci_high")),
                "status": str(r.get("status", "")),
                "step_ms_mean": _num(r.get("step_ms_mean")),
            })  # fmt: skip
            if str(r.get("status", "ok")) not in ("ok",):
                continue
            p = _detector_point(run, scen, v, klass, thresholds)
            detect.append({"severity": sev, "run": run.path.name, "variant": v, "kind": kind, **p})
    speed_df = pd.DataFrame(speed, columns=["severity", "run", "variant", "kind", "speedup", "ci_low",
                                            "ci_high", "status", "step_ms_mean"])  # fmt: skip
    det_df = pd.DataFrame(
        detect, columns=["severity", "run", "variant", "kind", "value", "fired", "reason", "source"]
    )
    return speed_df, det_df, notes


def _group_runs(runs: list[RunFolder]) -> dict[tuple[str, str, str], list[RunFolder]]:
    groups: dict[tuple[str, str, str], list[RunFolder]] = {}
    for run in runs:
        if run.runs is None or run.runs.empty:
            continue
        for scen in dict.fromkeys(run.runs["scenario"]):
            groups.setdefault((scen, run.slug, run.size), []).append(run)
    return groups


def _dose_section(
    doc: Doc, key: tuple[str, str, str], group: list[RunFolder], found: dict[str, Any]
) -> None:
    from analysis.plots.dose import firing_onset, plot_dose

    scen, slug, size = key
    sc = found.get(scen)
    klass = (
        sc.bottleneck
        if sc is not None
        else str(group[0].runs.loc[group[0].runs["scenario"] == scen, "bottleneck"].iloc[0])
    )
    metric, thr_key = MAIN_METRIC.get(klass, ("", ""))
    sevs = sorted(
        {_num(r.runs.loc[r.runs["scenario"] == scen, "severity"].iloc[0]) for r in group}
        - {math.nan}
    )
    doc.h(3, f"{scen} on {slug} ({size}): {len(sevs)} severit{'y' if len(sevs) == 1 else 'ies'}")
    if len(sevs) < 2:
        doc.note(
            f"{scen} was run at one severity only ({', '.join(f'{s:g}' for s in sevs) or 'unknown'}) "
            f"on {slug} at size {size}: no dose-response. Sweep it with `python -m harness run -m "
            f"+scenario={scen} scenario.{scen}.severity=A,B,C`."
        )
        return
    speed, det, notes = dose_data(group, scen, klass)
    threshold = _thresholds().get(klass, {}).get(thr_key)
    reasons = (
        sorted({r for r in det["reason"].dropna() if r and "missing" in r}) if not det.empty else []
    )
    note = (
        reasons[0]
        if reasons
        else "no export in these folders and no metric column in diagnosis.csv"
    )
    unit = sc.severity.unit if sc is not None else ""
    fig = plot_dose(
        speed, det, scenario=scen, unit=unit, meaning=sc.severity.meaning if sc is not None else "",
        klass=klass, metric=metric, threshold=threshold, note=_wrap(note, 90),
        title=f"{scen} on {slug} ({size}): speedup and the {klass} detector against severity",
    )  # fmt: skip
    base = det[det["kind"] == "baseline"] if not det.empty else det
    onset = firing_onset(base["severity"], base["fired"]) if not base.empty else None
    if onset is not None:
        summary = f"The {klass} detector fires on the baseline from severity {onset:g} {unit} on."
    elif not base.empty and base["fired"].notna().any():
        summary = (
            f"The {klass} detector does not fire on the baseline at every severity from some "
            "point on (see the table)."
        )
    else:
        summary = f"The {klass} detector could not judge these exports ({note})."
    doc.image(
        f"dose_{scen}_{slug}_{size}",
        fig,
        f"{scen} dose-response on {slug}",
        f"{summary} Top: speedup of each fix (and ideal) over the baseline of the same run, 95% "
        f"CI. Bottom: the detector's {metric or 'metric'} on every variant's export (filled: the "
        f"detector fired, per diagnosis.csv); dashed: its threshold; shaded: severities from "
        "which it fires on the baseline.",
    )
    for n in notes:
        doc.note(n, kind="caveat")
    if det.empty or det["value"].isna().all():
        doc.note(f"no {metric or 'detector metric'}: {note}")
    rows = []
    dmap = (
        {(d["severity"], d["variant"]): d for d in det.to_dict("records")} if not det.empty else {}
    )
    for r in speed.to_dict("records"):
        d = dmap.get((r["severity"], r["variant"]), {})
        val = d.get("value", math.nan)
        fired = d.get("fired", pd.NA)
        rows.append([
            f"{r['severity']:g}", r["run"], r["variant"], Badge(r["status"], r["status"]),
            r["step_ms_mean"],
            "1 (reference)" if r["kind"] == "baseline" else _speedup_text({"speedup": r["speedup"], "speedup_ci_low": r["ci_low"], "speedup_ci_high": r["ci_high"]}),
            (f"{val:.1%}" if metric.endswith("_share") else f"{val:.3g}") if isinstance(val, float) and math.isfinite(val) else "–",
            Tip("not judged", str(d.get("reason", ""))) if d and pd.isna(fired)
            else "–" if pd.isna(fired)
            else Badge("fired", "fired-good" if r["kind"] == "baseline" else "fired-bad") if fired
            else "no",
        ])  # fmt: skip
    doc.table(
        [
            "severity",
            "run",
            "variant",
            "status",
            "mean step ms",
            "speedup [95% CI]",
            metric or "metric",
            "fired",
        ],
        rows,
        numeric={0, 4, 5, 6},
    )


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def build_sweep_report(runs: list[RunFolder], out_dir: Path, *, title: str = "") -> Doc:
    """The report over several run folders: the runs, and dose-response where severities differ."""
    _new_figure_context()
    found, _ = _scenario_info()
    name = title or out_dir.name
    doc = Doc(f"bottleneck-suite sweep report: {name}")
    doc.h(1, f"bottleneck-suite sweep report: {name}", "top")
    doc.p(
        f"{len(runs)} run folders · written {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC "
        "by python -m harness report",
        cls="sub",
    )
    doc.h(2, "Runs", "runs")
    rows = []
    for run in sorted(runs, key=lambda r: r.created):
        target = run.path / "report.html"
        link = Link(run.path.name, _rel(target if target.is_file() else run.path, out_dir))
        scen: list[Any] = []
        if run.runs is not None and not run.runs.empty:
            for s, g in run.runs.groupby("scenario", sort=False):
                sev = _num(g["severity"].iloc[0]) if "severity" in g else math.nan
                scen.append(f"{s}" + (f" @ {sev:g}" if math.isfinite(sev) else ""))
        ver = run.tables.get("verdicts.csv")
        vparts: list[Any] = (
            [Badge(f"{r.scenario}: {r.verdict}", str(r.verdict)) for r in ver.itertuples()]
            if ver is not None and not ver.empty and "verdict" in ver
            else ["–"]
        )
        rows.append([link, run.gpu_name, run.size, Badge(run.state_name, "ok" if run.state_name == "complete" else "inconclusive"),
                     run.created or "–", "; ".join(scen) or "–", vparts])  # fmt: skip
    doc.table(
        [
            "run (its report)",
            "GPU",
            "size",
            "state",
            "created (UTC)",
            "scenarios @ severity",
            "verdicts",
        ],
        rows,
    )
    doc.h(2, "Dose-response", "dose")
    doc.p(
        "For each scenario run at several severities on one GPU and size: the fixes' speedups and "
        "the scenario's detector against the severity, and where the detector starts to fire.",
        cls="sub",
    )
    groups = _group_runs(runs)
    if not groups:
        doc.note("none of these folders holds a runs.csv, so there is nothing to plot")
    for key, group in groups.items():
        _section(
            doc,
            f"{key[0]} dose-response",
            lambda key=key, group=group: _dose_section(doc, key, group, found),
        )
    return doc


def write_sweep_report(
    run_dirs: list[Path], out_dir: Path, *, title: str = ""
) -> tuple[Path, Path]:
    runs = [RunFolder.load(p) for p in run_dirs]
    doc = build_sweep_report(runs, Path(out_dir), title=title)
    return write_doc(doc, Path(out_dir))


# --- entry points -------------------------------------------------------------------------------


def report_after_run(
    run_dir: Path, say: Callable[[str], None], found: dict[str, Any] | None = None
) -> str | None:
    """Write the report at the end of ``harness run``; never raises.

    Returns None when written (or when there is nothing to report), ``"interrupted"`` after
    Ctrl-C, else the error message (the caller counts it as a failure; the results are intact).
    """
    run_dir = Path(run_dir)
    try:
        if not (run_dir / "runs.csv").is_file():
            return None
        html, _ = write_run_report(run_dir, found=found)
        say(f"report: {html} (and report.md)")
        return None
    except KeyboardInterrupt:
        say(
            f"report interrupted; the results in {run_dir} are complete. Write it with `python -m harness report {run_dir}`"
        )
        return "interrupted"
    except Exception as exc:
        msg = (
            f"writing the report failed ({type(exc).__name__}: {exc}); the run's results in "
            f"{run_dir} are complete and untouched. Retry with `python -m harness report {run_dir}`"
        )
        say(f"FAILED {msg}")
        return msg


def report_after_sweep(sweep_dir: Path, say: Callable[[str], None]) -> str | None:
    """The sweep report at the end of ``harness run -m``; never raises (as :func:`report_after_run`)."""
    try:
        run_dirs = _marker_runs(Path(sweep_dir))
        if not run_dirs:
            return None
        html, _ = write_sweep_report(run_dirs, Path(sweep_dir))
        say(f"sweep report: {html} ({len(run_dirs)} runs)")
        return None
    except KeyboardInterrupt:
        say(f"sweep report interrupted; write it with `python -m harness report {sweep_dir}`")
        return "interrupted"
    except Exception as exc:
        msg = (
            f"writing the sweep report failed ({type(exc).__name__}: {exc}); every run folder is "
            f"intact. Retry with `python -m harness report {sweep_dir}`"
        )
        say(f"FAILED {msg}")
        return msg


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness report",
        description="Write report.html and report.md for a run folder, or a sweep report "
        "(dose-response) for several run folders or a folder holding them.",
    )
    parser.add_argument(
        "paths", nargs="+", type=Path, help="run folder(s), a sweep folder, or a results folder"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="write the report here (default: the folder given)"
    )
    parser.add_argument(
        "--steps", type=int, default=2, help="steady-state steps per timeline (default 2)"
    )
    parser.add_argument(
        "--no-timelines", action="store_true", help="leave the timeline pictures out (faster)"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.steps <= 10:
        print("error: --steps must be 1..10", file=sys.stderr)
        return 2
    run_dirs: list[Path] = []
    for p in args.paths:
        if not p.is_dir():
            print(f"error: {p}: no such folder", file=sys.stderr)
            return 2
        found = find_run_folders(p)
        if not found:
            print(
                f"error: {p} is not a run folder (no manifest.json or runs.csv) and holds none "
                "(looked two levels down and in harness run -m markers)",
                file=sys.stderr,
            )
            return 2
        run_dirs += [f for f in found if f not in run_dirs]
    try:
        single = len(args.paths) == 1 and _is_run_folder(args.paths[0])
        if single:
            html, md = write_run_report(
                args.paths[0], args.out, steps=args.steps, timelines=not args.no_timelines
            )
        else:
            if args.out is not None:
                out = args.out
            elif len(args.paths) == 1:
                out = args.paths[0]
            else:
                common = Path(os.path.commonpath([str(p.resolve()) for p in run_dirs]))
                out = common / f"sweep-report-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}"
            html, md = write_sweep_report(run_dirs, out)
    except OSError as exc:
        print(f"error: could not write the report: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {html}\nwrote {md}")
    return 0
