"""Which wild-corpus scripts one capture call runs, and how (read by capture-corpus.sh).

    python3 corpus/plan.py LABELS_CSV [--part K/N] [--only "a b"] [--gpus N] [--repeats R]
                           [--profile-s S]

Prints one line per selected entry,
``NAME PROCS GPUS LIMIT_S PROFILE_S TRACE CACHE SOURCE DEVICE FIX...`` (FIX: ``label_fix`` then
``other_fixes``; TRACE: ``nsys_trace``, default cuda,nvtx,osrt; CACHE: ``cold`` when its profile
runs with empty compiler caches, else ``warm``; SOURCE: the script file's stem under corpus/wild;
DEVICE: the ``--device`` every run passes, ``auto`` for none: labels.csv's ``source`` and
``device``, harness/judge/labels.py), and on stderr one line per entry left out because it needs more
GPUs than the machine has (``gpus``).

``--part K/N`` (or ``KofN``): the corpus is split into N calls that each fit one device call.
Scripts are dealt heaviest first, each to the part with the least estimated time so far (ties
to the lowest part), so the heavy ones (compiles, autotuning, two-process runs) land in
different calls; a script's weight is its timed runs, (1 + fixes) x repeats x RUN_S, plus one
profile, PROFILE_S. The deal is over the scripts this machine can run, so every call of one
capture must see the same labels file and GPU count. ``--only`` picks scripts by name instead.
Stdlib only: it runs on the bare GPU machine.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

# The checkout on sys.path by hand, on purpose: this runs by path on the bare GPU machine
# (``python3 corpus/plan.py`` in scripts/device/capture-corpus*.sh), where the checkout is not installed and
# nothing but the stdlib is; harness.judge.labels is stdlib only.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.judge.labels import entry_device, entry_source, parse_removes  # stdlib only; the owner

DEFAULT_TRACE = "cuda,nvtx,osrt"
#: Seconds of one timed run on the H100 (forked from a parent that imported torch), by script;
#: measured 2026-11-24 (1-4 s; clean_compile 6-12 s), the short-loop ones estimated.
RUN_S = {
    **{"clean_compile": 10.0, "clean_compile_short": 20.0, "clean_cudnn_short": 25.0},
    # pending entries (corpus/wild/pending/labels.csv), estimated: a compile switch, whole
    # checkpoint periods of a slow baseline, loader workers starting
    **{"ue_layernorm_gelu": 6.0, "ue_swiglu": 6.0, "ue_softmax_attention": 6.0},
    **{"bio_torch_save": 5.0, "ds_bucketed_text": 5.0},
}
DEFAULT_RUN_S = 3.0
#: A run of 2 ranks forked by corpus/timer.py (no imports; estimated, not yet measured on a GPU
#: machine): CUDA and NCCL set-up of both ranks ~2-3 s, the model built on the GPU, warm-up,
#: the 1.5 s loop. Through torch.distributed.run (two fresh interpreters) it was ~15 s.
TWO_PROCS_RUN_S = 6.0
#: Seconds of one whole-process profile (nsys start-up, the script, its flush); its export and
#: xz run in the background beside the next profile.
PROFILE_S = {"clean_compile": 60.0, "clean_compile_short": 75.0, "clean_cudnn_short": 60.0}
DEFAULT_PROFILE_S = 25.0
TWO_PROCS_PROFILE_S = 40.0
#: Profiled with empty compiler caches, so the whole compile (20-40 s on the H100) is in the
#: capture, as on a user's first run; the others are profiled with the call's shared caches,
#: warm from their timed runs (clean_compile as in its earlier captures).
COLD_CACHE = frozenset({"clean_compile_short"})
#: A timed run is stopped after this many seconds.
LIMIT_S = {"clean_compile": 240, "clean_compile_short": 240, "clean_cudnn_short": 240}
DEFAULT_LIMIT_S = 90


@dataclass(frozen=True, kw_only=True)
class Script:
    """One labels.csv row as the capture needs it."""

    name: str
    """The script, corpus/wild/NAME.py."""
    procs: int
    """Processes: 1, or 2 launched with torch.distributed.run --nproc_per_node=2."""
    gpus: int
    """GPUs it needs (0: runs on CPUs alone)."""
    trace: str
    """nsys profile --trace value."""
    fixes: tuple[str, ...]
    """Its --fix switches, label_fix first."""
    removals: tuple[str, ...] = ()
    """The switches that remove a labelled cause entirely (labels.csv's ``removes``)."""
    source: str = ""
    """The script file's stem under corpus/wild (empty: ``name``)."""
    device: str = "auto"
    """The --device every run and profile passes (``auto``: none)."""
    profile_est_s: float = 0.0
    """Estimated seconds of its profile when > 0 (``--profile-s``), else the plan's."""

    def __post_init__(self) -> None:
        if self.procs not in (1, 2) or self.gpus not in (0, 1, 2):
            raise ValueError(f"{self.name}: procs {self.procs} gpus {self.gpus}")
        if not re.fullmatch(r"[a-z0-9-]+(,[a-z0-9-]+)*", self.trace):
            raise ValueError(f"{self.name}: nsys_trace {self.trace!r}")
        if not re.fullmatch(r"[A-Za-z0-9_]*", self.source):
            raise ValueError(f"{self.name}: source {self.source!r}")
        if self.device == "cuda" and self.gpus == 0:
            raise ValueError(f"{self.name}: device cuda with gpus 0")

    def script(self) -> str:
        """The file it runs, corpus/wild/SCRIPT.py."""
        return self.source or self.name

    def run_s(self) -> float:
        return RUN_S.get(self.name, TWO_PROCS_RUN_S if self.procs > 1 else DEFAULT_RUN_S)

    def profile_s(self) -> float:
        if self.profile_est_s > 0:
            return self.profile_est_s
        default = TWO_PROCS_PROFILE_S if self.procs > 1 else DEFAULT_PROFILE_S
        return PROFILE_S.get(self.name, default)

    def limit_s(self) -> int:
        return LIMIT_S.get(self.name, DEFAULT_LIMIT_S)

    def weight(self, repeats: int) -> float:
        """Estimated seconds of this script in a call: its timed runs and one profile."""
        return (1 + len(self.fixes)) * repeats * self.run_s() + self.profile_s()


def read_labels(path: str) -> list[Script]:
    """The scripts of a labels.csv, in its order."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [
        Script(
            name=r["script"],
            procs=int(r["procs"]),
            gpus=int(r["gpus"]),
            trace=r.get("nsys_trace") or DEFAULT_TRACE,
            fixes=tuple([r["label_fix"]] + [x for x in r["other_fixes"].split(";") if x]),
            removals=tuple(parse_removes(r.get("removes")).values()),
            source=entry_source(r),
            device=entry_device(r),
        )
        for r in rows
    ]


def parse_part(text: str) -> tuple[int, int]:
    """``K/N`` or ``KofN`` -> (K, N), 1 <= K <= N."""
    m = re.fullmatch(r"(\d+)(?:/|of)(\d+)", text)
    if not m or not 1 <= int(m[1]) <= int(m[2]):
        raise ValueError(f"part {text!r}: expected K/N or KofN with 1 <= K <= N")
    return int(m[1]), int(m[2])


def deal(scripts: list[Script], n: int, repeats: int) -> list[list[Script]]:
    """Split ``scripts`` into ``n`` parts of near-equal estimated time (module docstring);
    each part keeps the labels file's order."""
    order = sorted(range(len(scripts)), key=lambda i: (-scripts[i].weight(repeats), i))
    load = [0.0] * n
    owner = {}
    for i in order:
        k = min(range(n), key=lambda j: (load[j], j))
        owner[i] = k
        load[k] += scripts[i].weight(repeats)
    return [[s for i, s in enumerate(scripts) if owner[i] == k] for k in range(n)]


def select(
    scripts: list[Script], *, part: str, only: str, gpus: int, repeats: int
) -> tuple[list[Script], list[str]]:
    """(the scripts this call runs, a message per script left out for want of GPUs)."""
    notes = [
        f"skipped {s.name}: needs {s.gpus} GPU(s), this machine has {gpus}"
        for s in scripts
        if s.gpus > gpus
    ]
    runnable = [s for s in scripts if s.gpus <= gpus]
    wanted = only.split()
    if wanted:
        unknown = set(wanted) - {s.name for s in scripts}
        if unknown:
            raise ValueError(f"not in the labels file: {' '.join(sorted(unknown))}")
        return [s for s in runnable if s.name in wanted], notes
    if part:
        k, n = parse_part(part)
        return deal(runnable, n, repeats)[k - 1], notes
    return runnable, notes


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("labels")
    p.add_argument("--part", default="", help="K/N or KofN")
    p.add_argument("--only", default="", help="script names, space-separated")
    p.add_argument("--gpus", type=int, default=0, help="GPUs on this machine")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument(
        "--profile-s",
        type=float,
        default=0.0,
        help="every profile's estimated seconds instead of the plan's (a call that profiles "
        "short loops: capture-corpus.sh's PROFILE_ARGS)",
    )
    p.add_argument(
        "--removals-only",
        action="store_true",
        help="time only each script's full-removal switches (beside none): the measurements "
        "the findings' predictions are checked against",
    )
    args = p.parse_args(argv)
    scripts = read_labels(args.labels)
    if args.profile_s > 0:
        scripts = [replace(s, profile_est_s=args.profile_s) for s in scripts]
    if args.removals_only:
        scripts = [replace(s, fixes=s.removals) for s in scripts if s.removals]
    try:
        chosen, notes = select(
            scripts,
            part=args.part,
            only=args.only,
            gpus=args.gpus,
            repeats=args.repeats,
        )
    except ValueError as exc:
        print(f"plan: {exc}", file=sys.stderr)
        return 2
    for note in notes:
        print(note, file=sys.stderr)
    total = sum(s.weight(args.repeats) for s in chosen)
    print(f"plan: {len(chosen)} scripts, ~{total:.0f} s estimated", file=sys.stderr)
    for s in chosen:
        cache = "cold" if s.name in COLD_CACHE else "warm"
        line = (s.name, s.procs, s.gpus, s.limit_s(), int(s.profile_s()), s.trace, cache)
        print(*line, s.script(), s.device, *s.fixes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
