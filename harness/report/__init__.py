"""Reports of run folders: ``python -m harness report`` and ``python -m harness compare``.

One run folder (``manifest.json`` / ``runs.csv``) gets ``report.html`` (self-contained, images
embedded) and ``report.md`` (images in ``report/`` beside it): the speedup matrix, verdicts,
the detectors' outcomes against what the suite expects, how much of each baseline's bottleneck
metric each fix removed, the confusion matrix, every variant's numbers with its probe effect and
links to its ``.nsys-rep``, a timeline of each scenario's baseline above its best fix, each
scenario's teaching text and the environment. A folder holding less gets the same report, each
missing section saying why. Several run folders get a sweep report with the dose-response.

Modules, one job each: :mod:`~harness.report.load` (reading a run folder and finding run
folders), :mod:`~harness.report.sections`, :mod:`~harness.report.diagnosis` and
:mod:`~harness.report.variants` (the sections), :mod:`~harness.report.timelines` (the
scenarios' timelines, drawn by worker processes while the sections are built),
:mod:`~harness.report.run` and :mod:`~harness.report.sweep` (the documents),
:mod:`~harness.report.doc` (the document model), :mod:`~harness.report.page` (HTML, from the
Jinja templates in ``templates/``), :mod:`~harness.report.markdown`, :mod:`~harness.report.write`
(the files), :mod:`~harness.report.cli` (the command and the reports ``harness run`` writes),
:mod:`~harness.report.compare` (``harness compare``). Every figure is in ``analysis/plots``.
"""

from __future__ import annotations

from harness.report.cli import main, report_after_run, report_after_sweep
from harness.report.diagnosis import MAIN_METRIC
from harness.report.load import SWEEP_MARKER, RunFolder, find_run_folders
from harness.report.run import build_run_report, write_run_report
from harness.report.sweep import build_sweep_report, dose_data, write_sweep_report

__all__ = [
    "MAIN_METRIC",
    "SWEEP_MARKER",
    "RunFolder",
    "build_run_report",
    "build_sweep_report",
    "dose_data",
    "find_run_folders",
    "main",
    "report_after_run",
    "report_after_sweep",
    "write_run_report",
    "write_sweep_report",
]
