"""The first H200 run of the kernels row (tests/data/ncu/h200_dev1_ncu.tar.xz, README beside
it): each variant's raw ncu page as ncu wrote it, the tables the row wrote then, and the run's
own diagnosis.csv, verdicts.csv, runs.csv and gpu_work.csv.

:func:`recollect` runs today's parser, classifier and limit over those raw pages, each
variant's plan rebuilt from the kernels.csv of then (its planned rows carry the plan's names,
grids, blocks and nsys times; kernel_limits.csv its window's kernel time and steps): what the
row would write now from the same ncu output.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pandas as pd

from harness.core.kernels_config import KernelsConfig
from harness.kernels.choose import Choice
from harness.kernels.classify import classify
from harness.kernels.limits import add_at_bound, by_config, join_choice, read_gpu_work, step_limit
from harness.kernels.parse import kernel_metrics, read_raw
from harness.kernels.plan import COLUMNS, Plan
from harness.kernels.tables import KERNEL_COLUMNS, LIMIT_COLUMNS
from tests._fixtures import DATA

TARBALL = DATA / "ncu" / "h200_dev1_ncu.tar.xz"


def extract(dest: Path) -> Path:
    """The fixture unpacked under ``dest``; its ``dev1`` folder."""
    with tarfile.open(TARBALL, "r:xz") as tar:
        tar.extractall(dest, filter="data")
    return dest / "dev1"


def plans(dev1: Path) -> dict[tuple[str, str], Plan]:
    """Each profiled variant's plan as the row had it then (its planned rows)."""
    old = pd.read_csv(dev1 / "kernels.csv")
    limits = pd.read_csv(dev1 / "kernel_limits.csv")
    out = {}
    for r in limits.itertuples(index=False):
        if r.state != "ok":
            continue
        mine = old[(old["scenario"] == r.scenario) & (old["variant"] == r.variant)]
        rows = mine[mine["planned"]].sort_values("rank")
        rows = rows.assign(launches=rows["launches_per_step"] * r.steps)[list(COLUMNS)]
        out[(r.scenario, r.variant)] = Plan(
            rows.reset_index(drop=True), int(r.steps), float(r.kernel_ms_per_step), "mangled"
        )
    return out


def recollect(dev1: Path, cfg: KernelsConfig | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(kernels.csv, kernel_limits.csv) as today's code makes them from the raw pages."""
    cfg = cfg or KernelsConfig()
    work = read_gpu_work(dev1 / "gpu_work.csv")
    kinds = pd.read_csv(dev1 / "runs.csv").set_index(["scenario", "variant"])["kind"]
    frames, limit_rows = [], []
    for (scen, var), plan in plans(dev1).items():
        label = f"{scen}/{var}"
        own = kernel_metrics(read_raw(dev1 / "ncu" / scen / var / "ncu.csv"))
        choice = Choice(label=label, rows=plan.kernels.assign(measured_in=label))
        rows = add_at_bound(classify(join_choice(choice, own, {label: by_config(own)}), cfg))
        kind = kinds[(scen, var)]
        frames.append(rows.assign(scenario=scen, variant=var, kind=kind))
        limit = step_limit(plan, rows, work.get((scen, var)), label=label, own_launches=len(own))
        limit_rows.append({"scenario": scen, "variant": var, "kind": kind, "state": "ok",
                           "reason": "", "selection": "heaviest", "launches": len(own),
                           **limit})  # fmt: skip
    then = pd.read_csv(dev1 / "kernel_limits.csv")
    left = then[then["state"] != "ok"][["scenario", "variant", "kind", "state", "reason"]]
    kernels = pd.concat(frames, ignore_index=True).reindex(columns=list(KERNEL_COLUMNS))
    limits = pd.concat([left, pd.DataFrame(limit_rows)], ignore_index=True)
    return kernels, limits.reindex(columns=list(LIMIT_COLUMNS))
