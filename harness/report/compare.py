"""``python -m harness compare RUN_DIR RUN_DIR... [--out DIR]``: the speedup matrix by GPU.

Each run folder is one facet, labelled by its GPU slug and size from ``manifest.json`` (plus the
folder's name where two runs would share a label). Writes into ``--out`` (default:
``results/compare-<label>-vs-<label>`` under the working directory, never beside the run folders:
those may be the tracked ``results/reference/``):

- ``compare.csv``: one row per GPU x scenario x fix (speedup, 95% CI, status);
- ``compare.md`` and ``compare.html``: the table with one ``speedup [CI]`` column per GPU, the
  faceted matrix and a per-fix plot with the GPUs side by side, each run's environment, and what
  makes the numbers not comparable (different sizes, severities, or driver, torch or nsys
  versions);
- ``compare/*.png``: the pictures;
- ``compare_host.csv``: the numbers that carry between hosts (the step and the loop's CPU time
  in launch-probe units, the GPU's busy time per step), host-bound variants first: the page
  leads with them (:func:`harness.report.repeat.host_free_table`);
- ``compare_repeat.csv`` (where two runs share a GPU model and size): per fix, whether each
  run's speedup lies inside the other's interval, whether the two agree within their combined
  noise (``agree``), and, where not inside, how far the host probes moved
  (:mod:`harness.report.repeat`). Each run's host probes are shown beside its environment.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from harness.report.doc import Badge, Code, Doc, Link
from harness.report.fmt import figure_context, rel, section, speedup_ci
from harness.report.load import RunFolder, scenario_info
from harness.report.repeat import host_free_table, host_probes, repeat_table
from harness.report.write import write_doc

__all__ = ["build_compare", "main", "parser", "write_compare"]


def _labels(runs: list[RunFolder]) -> list[str]:
    labels = [r.label for r in runs]
    dup = {x for x in labels if labels.count(x) > 1}
    return [f"{r.label} · {r.path.name}" if r.label in dup else r.label for r in runs]


def _caveats(doc: Doc, runs: list[RunFolder], labels: list[str]) -> None:
    """What makes the runs' numbers not comparable: sizes, severities, a CPU run."""
    sizes = {lab: r.size for lab, r in zip(labels, runs, strict=True)}
    if len(set(sizes.values())) > 1:
        doc.note(
            "the runs were made at different sizes ("
            + ", ".join(f"{k}: {v}" for k, v in sizes.items())
            + "); the same scenario does different work at each size, so its speedups are "
            "not directly comparable",
            kind="caveat",
        )
    sev: dict[str, dict[str, float]] = {}
    for lab, r in zip(labels, runs, strict=True):
        if "severity" not in r.runs:
            continue
        for s, g in r.runs.groupby("scenario", sort=False):
            v = pd.to_numeric(g["severity"], errors="coerce").dropna()
            if not v.empty:
                sev.setdefault(str(s), {})[lab] = float(v.iloc[0])
    for s, per in sev.items():
        if len(set(per.values())) > 1:
            doc.note(
                f"{s} ran at different severities: "
                + ", ".join(f"{k}: {v:g}" for k, v in per.items()),
                kind="caveat",
            )
    _software_caveats(doc, runs, labels)
    if any(r.slug == "cpu" for r in runs):
        doc.note(
            "a CPU run is among these: its timings say nothing about GPU speedups",
            kind="caveat",
        )


def _matrix(
    doc: Doc, cells: pd.DataFrame, by_label: dict[str, Any], found: dict[str, Any], columns: str
) -> None:
    from analysis.plots.compare import compare_forest, compare_matrix

    klass = {s: found[s].bottleneck for s in cells["scenario"].unique() if s in found}
    shown = {s: f"{s}\n({k})" for s, k in klass.items()}
    fig = compare_matrix(by_label, columns=columns, labels=shown)
    doc.image(
        "compare_matrix",
        fig,
        "speedup matrix faceted by GPU",
        "One panel per run, same rows, columns and colour scale. Each cell: speedup over the "
        "baseline of the same run and its 95% CI; grey: the pair does not apply (n/a) or did "
        "not finish (its status).",
    )
    doc.image(
        "compare_points",
        compare_forest(cells),
        "speedup per fix, GPUs side by side",
        "The same numbers as points on one log axis, one marker per GPU, bars the 95% CI.",
        width_px=1000,
    )


def _table(doc: Doc, cells: pd.DataFrame) -> None:
    from analysis.plots.compare import compare_wide

    wide = compare_wide(cells)
    gpu_cols = [c for c in wide.columns if c not in ("scenario", "column", "variant")]
    same = (wide["column"] == wide["variant"]) | (wide["variant"] == "")
    show_col = not same.all()
    header = ["scenario", *(["column"] if show_col else []), "variant", *gpu_cols]
    rows = []
    for r in wide.to_dict("records"):
        rows.append(
            [
                r["scenario"],
                *([r["column"]] if show_col else []),
                r["variant"] or r["column"],
                *[r[c] for c in gpu_cols],
            ]
        )
    start = len(header) - len(gpu_cols)
    doc.table(header, rows, numeric=range(start, len(header)))
    doc.p(
        Link("compare.csv", "compare.csv"),
        ": the same numbers, one row per GPU x scenario x variant that ran "
        "(pairs absent from every run are left out of this table).",
    )


def _software(r: RunFolder) -> dict[str, str]:
    """The driver, torch and nsys a run used (``–`` where its manifest does not say)."""
    m = r.manifest or {}
    nsys = str((m.get("nsys") or {}).get("version", "–"))
    return {
        "driver": str(r.gpu.get("driver") or "–"),
        "torch": str(m.get("torch", "–")),
        "nsys": nsys.replace("NVIDIA Nsight Systems version ", ""),
    }


def _software_caveats(doc: Doc, runs: list[RunFolder], labels: list[str]) -> None:
    """Say which of driver, torch and nsys differ between the runs: a GPU comparison with
    another software stack measures both changes at once."""
    per = {lab: _software(r) for lab, r in zip(labels, runs, strict=True)}
    for what in ("driver", "torch", "nsys"):
        if len({v[what] for v in per.values()}) > 1:
            doc.note(
                f"the runs used different {what} versions ("
                + ", ".join(f"{k}: {v[what]}" for k, v in per.items())
                + "): the differences below are not the GPUs' alone",
                kind="caveat",
            )


def _runs(doc: Doc, runs: list[RunFolder], labels: list[str], out_dir: Path) -> None:
    rows = []
    for lab, r in zip(labels, runs, strict=True):
        sw = _software(r)
        probes = host_probes(r.runs if r.runs is not None else pd.DataFrame())
        # the run's report: the page where there is one, else its Markdown (reference folders
        # keep report.md and its pictures only), else the folder
        found = [p for p in (r.path / "report.html", r.path / "report.md") if p.is_file()]
        rows.append(
            [
                lab,
                Link(r.path.name, rel(found[0] if found else r.path, out_dir)),
                r.gpu_name,
                sw["driver"],
                sw["torch"],
                sw["nsys"],
                r.size,
                _g(probes["probe_launch_us"]),
                _g(probes["probe_python_ms"]),
                Badge(r.state_name, "ok" if r.complete else "inconclusive"),
                r.created or "–",
            ]
        )
    doc.table(
        ["facet", "run folder", "GPU", "driver", "torch", "nsys", "size", "launch µs",
         "Python loop ms", "state", "created (UTC)"],
        rows,
    )  # fmt: skip
    doc.p(
        "launch µs, Python loop ms: the run's host probes (median over its variants of the "
        "median over each variant's timing rounds; – where the run has none).",
        cls="sub",
    )
    doc.p("Run folders: ", *[x for r in runs for x in (Code(str(r.path)), " ")], cls="sub")


def _g(v: float) -> str:
    return f"{v:.3g}" if math.isfinite(v) else "–"  # NaN: the run has no host probes


def same_model_pairs(runs: list[RunFolder]) -> list[tuple[int, int]]:
    """Pairs of runs (indices) on the same GPU model at the same size: their speedups should
    repeat, so the comparison says per fix whether they do."""
    key = [(r.slug, r.gpu_name, r.size) for r in runs]
    return [(i, j) for i in range(len(runs)) for j in range(i + 1, len(runs)) if key[i] == key[j]]


def repeat_tables(runs: list[RunFolder], labels: list[str]) -> pd.DataFrame:
    """:func:`harness.report.repeat.repeat_table` for every same-model pair, one frame with
    the pair's labels (``run_a``, ``run_b``); empty without such a pair."""
    parts = []
    for i, j in same_model_pairs(runs):
        if runs[i].runs is None or runs[j].runs is None:
            continue
        t = repeat_table(runs[i].runs, runs[j].runs)
        if not t.empty:
            parts.append(t.assign(run_a=labels[i], run_b=labels[j]))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


_REPEAT_HEADER = [
    "scenario",
    "variant",
    "speedup a [CI]",
    "speedup b [CI]",
    "inside each other's CI",
    "agree (t test)",
    "host drift a -> b (baseline; fix)",
]


def gpu_work_tables(runs: list[RunFolder], labels: list[str]) -> dict[str, pd.DataFrame | None]:
    """Each run's gpu_work.csv (None where it has none: an unprofiled run)."""
    import harness.core.runfolder as rf

    out: dict[str, pd.DataFrame | None] = {}
    for lab, r in zip(labels, runs, strict=True):
        path = rf.table_path(r.path, "gpu_work")
        out[lab] = pd.read_csv(path) if path.is_file() else None
    return out


def host_free(runs: list[RunFolder], labels: list[str]) -> pd.DataFrame:
    """:func:`harness.report.repeat.host_free_table` of the runs."""
    tables = {lab: r.runs for lab, r in zip(labels, runs, strict=True) if r.runs is not None}
    return host_free_table(tables, gpu_work_tables(runs, labels))


def _host_free(doc: Doc, table: pd.DataFrame, labels: list[str]) -> None:
    """The numbers that carry between hosts, host-bound variants first, one column per run."""
    if table.empty:
        doc.note("no run has timed variants", kind="missing")
        return

    def cell(g: pd.DataFrame, lab: str) -> str:
        row = g[g["run"] == lab]
        if row.empty:
            return "–"
        r = row.iloc[0]
        return " · ".join(_g(float(r[c])) for c in
                          ("step_launches", "loop_cpu_launches", "gpu_busy_ms_per_step"))  # fmt: skip

    rows = []
    for (scen, var), g in table.groupby(["scenario", "variant"], sort=False):
        bound = Badge("host-bound", "inconclusive") if g["host_bound"].any() else ""
        rows.append([scen, var, bound, *[cell(g, lab) for lab in labels]])
    doc.table(["scenario", "variant", "", *labels], rows)
    doc.p(
        "Each cell: the mean step in launch-probe units (the step over the run's own launch "
        "probe, per round, median) · the step loop's CPU time per step in the same units · the "
        "GPU's busy time per step in the profiled trace (ms). A host-bound variant's step moves "
        "with the host's speed; these do not. compare_host.csv holds the columns.",
        cls="sub",
    )


def _repeat(doc: Doc, table: pd.DataFrame) -> None:
    """Per same-model pair: each fix's speedups, whether they repeat, and the host's drift."""
    if table.empty:
        doc.note("no two runs share a GPU model and size: nothing to repeat", kind="missing")
        return

    def sp(r: dict[str, Any], side: str) -> str:  # as every other table writes a speedup
        return speedup_ci(r[f"speedup_{side}"], r[f"ci_low_{side}"], r[f"ci_high_{side}"])

    for (a, b), g in table.groupby(["run_a", "run_b"], sort=False):
        rows = []
        for r in g.to_dict("records"):
            ok = r["repeats"]
            mark = (
                Badge("n/a", "")
                if ok is None
                else Badge(*(("yes", "ok") if ok else ("no", "refuted")))
            )
            same = r.get("agree")
            agreed = "–" if same is None or same != same else ("yes" if same else "no")
            rows.append([r["scenario"], r["variant"], sp(r, "a"), sp(r, "b"), mark, agreed,
                         r["host_drift"] or "–"])  # fmt: skip
        doc.p(f"{a} (a) against {b} (b):")
        doc.table(_REPEAT_HEADER, rows)
    doc.p(
        "A speedup repeats when each run's point lies inside the other run's 95% interval. "
        "Where it does not, the host drift names the probes (launch µs, Python loop ms, the "
        "median over the variant's timing rounds) of the scenario's baseline and of the fix in "
        "each run: a host-bound variant moves with them. compare_repeat.csv holds the columns.",
        cls="sub",
    )


def build_compare(
    runs: list[RunFolder], out_dir: Path, *, columns: str = "auto"
) -> tuple[Doc, pd.DataFrame]:
    """The comparison document and its long table (``compare.csv``)."""
    from analysis.plots.compare import compare_cells

    figure_context()
    found, _ = scenario_info()
    labels = _labels(runs)
    by_label = {lab: r.runs for lab, r in zip(labels, runs, strict=True)}
    cells = compare_cells(by_label, columns)
    title = " vs ".join(labels)
    doc = Doc(f"bottleneck-suite comparison: {title}", image_dir="compare")
    doc.h(1, f"Speedups by GPU: {title}", "top")
    doc.p(
        f"{len(runs)} runs · written {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC by "
        "python -m harness compare",
        cls="sub",
    )
    section(doc, "caveats", lambda: _caveats(doc, runs, labels))
    doc.h(2, "Host-independent numbers", "host-free")
    section(doc, "host-free", lambda: _host_free(doc, host_free(runs, labels), labels))
    doc.h(2, "Speedup matrix by GPU", "matrix")
    section(doc, "matrix", lambda: _matrix(doc, cells, by_label, found, columns))
    doc.h(2, "Table", "table")
    section(doc, "table", lambda: _table(doc, cells))
    if same_model_pairs(runs):
        doc.h(2, "Repeatability: runs on the same GPU model", "repeat")
        section(doc, "repeat", lambda: _repeat(doc, repeat_tables(runs, labels)))
    doc.h(2, "Runs", "runs")
    _runs(doc, runs, labels, out_dir)
    return doc, cells


def write_compare(run_dirs: list[Path], out_dir: Path, *, columns: str = "auto") -> list[Path]:
    """Write compare.html, compare.md, compare.csv and compare/*.png; returns the paths."""
    from harness.core.atomic import write_frame

    runs = [RunFolder.load(Path(p)) for p in run_dirs]
    for r in runs:
        if r.runs is None or r.runs.empty:
            raise ValueError(f"{r.path}: {r.why_missing('runs.csv')}")
    out_dir = Path(out_dir)
    doc, cells = build_compare(runs, out_dir, columns=columns)
    html, md = write_doc(doc, out_dir, stem="compare")
    csv = out_dir / "compare.csv"
    labels = _labels(runs)
    meta = pd.DataFrame(
        {
            "gpu": labels,
            "gpu_slug": [r.slug for r in runs],
            "gpu_name": [r.gpu_name for r in runs],
            "size": [r.size for r in runs],
            "run_dir": [str(r.path) for r in runs],
        }
    )
    table = cells[cells["status"] != "n/a"].drop(columns=["text", "layout"])
    table = meta.merge(table, on="gpu", how="right")
    write_frame(csv, table)
    written = [html, md, csv]
    free = host_free(runs, labels)
    if not free.empty:
        written.append(out_dir / "compare_host.csv")
        write_frame(written[-1], free)
    repeat = repeat_tables(runs, labels)
    if not repeat.empty:
        written.append(out_dir / "compare_repeat.csv")
        write_frame(written[-1], repeat)
    return written


def _default_out(runs: list[Path]) -> Path:
    """``results/compare-<gpu>-vs-<gpu>``: where ``harness run`` writes too (its default
    ``harness.results_dir``), so a comparison of reference runs never lands in the tracked
    ``results/reference/`` unless ``--out`` asks for it."""
    slugs = [RunFolder.load(p).slug for p in runs]
    return Path("results") / ("compare-" + "-vs-".join(dict.fromkeys(slugs)))


def parser() -> argparse.ArgumentParser:
    """``harness compare``'s command line."""
    ap = argparse.ArgumentParser(
        prog="python -m harness compare",
        description="The speedup matrix of several runs side by side (e.g. one run per GPU "
        "generation): compare.html, compare.md, compare.csv and compare/*.png, with what makes "
        "the numbers not comparable (sizes, severities, driver, torch or nsys versions).",
    )
    ap.add_argument(
        "runs", nargs="+", type=Path, help="two or more run folders (runs.csv + manifest.json)"
    )
    ap.add_argument(
        "-o",
        "--out",
        type=Path,
        default=None,
        help="output folder (default: results/compare-<gpu>-vs-<gpu> in the working directory)",
    )
    ap.add_argument(
        "--columns",
        choices=("auto", "variant", "slot"),
        default="auto",
        help="one column per fix name (variant), per fix position 1..n (slot), or whichever "
        "fits the runs (auto, the default)",
    )
    return ap


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if len(args.runs) < 2:
        print("error: compare needs at least two run folders", file=sys.stderr)
        return 2
    for p in args.runs:
        if not (p / "runs.csv").is_file():
            print(f"error: {p}: not a run folder with a runs.csv", file=sys.stderr)
            return 2
    out = args.out or _default_out(args.runs)
    try:
        written = write_compare(args.runs, out, columns=args.columns)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: could not write the comparison: {exc}", file=sys.stderr)
        return 1
    for w in written:
        print(f"wrote {w}")
    return 0
