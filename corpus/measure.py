"""Timing maths for the wild corpus: one CSV row per timed process, then speedups per fix.

Usage (stdlib only, so it runs on the bare GPU machine):
  python3 corpus/measure.py row SCRIPT FIX REPEAT RC LOG      -> prints one corpus-timing.csv row
  python3 corpus/measure.py summarize TIMING_CSV LABELS_CSV OUT_CSV
      -> writes corpus-measured.csv (one row per script x fix) and prints a table.

Each switch belongs to a class: label_fix to the label's class (a clean script's label_fix, its
suspect, to no class), each `removes` pair (`class=switch`: the switch that removes that cause
entirely, everything else unchanged) to its class, any other switch to no class.

Label rule: a labelled script's label stands when the best speedup among its class's switches
(the realistic fix or the full removal) is >= 1.2 and no switch of another class, or of none,
is larger; a clean script's (label none) when no switch is > 1.1. `also_stands`: every `also`
class's best switch is >= 1.2 (a real second cause; below the label's when the label stands),
empty while a class has no measured switch.
Speedup = mean step_ms of `none` / mean step_ms of the switch (over repeats); min/max are over
the per-repeat pairs (repeat r's none with repeat r's switch). A switch never timed (a 2-GPU
script on a 1-GPU machine) has an empty speedup and takes no part in either rule.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import tempfile
from pathlib import Path

# The checkout on sys.path by hand, on purpose: this runs by path on the bare GPU machine
# (``python3 corpus/measure.py`` in scripts/device/capture-corpus.sh, and imported as
# ``measure`` by corpus/timer.py, its sibling), where the checkout is not installed and
# nothing but the stdlib is; harness.judge.labels is stdlib only.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.judge.labels import parse_removes  # stdlib only; the format's one owner

TIMING_FIELDS = ["script", "fix", "repeat", "step_ms", "steps", "rc", "skipped"]
MEASURED_FIELDS = [
    "script",
    "fix",
    "class",
    "removal",
    "label",
    "label_fix",
    "none_step_ms",
    "fix_step_ms",
    "speedup",
    "speedup_min",
    "speedup_max",
    "pairs",
    "label_stands",
    "also_stands",
]
LABELLED_MIN_SPEEDUP = 1.2
CLEAN_MAX_SPEEDUP = 1.1


def parse_result(log_text: str) -> dict:
    """The last `RESULT {json}` line of a script's output, or {} when it printed none."""
    for line in reversed(log_text.splitlines()):
        if line.startswith("RESULT "):
            try:
                return json.loads(line[len("RESULT ") :])
            except json.JSONDecodeError:
                return {}
    return {}


def timing_row(script: str, fix: str, repeat: str, rc: str, log_path: str) -> list[str]:
    """One corpus-timing.csv row; step_ms is empty when the process failed or was skipped."""
    text = Path(log_path).read_text(errors="replace") if os.path.exists(log_path) else ""
    res = parse_result(text)
    ms = res.get("step_ms")
    return [
        script,
        fix,
        repeat,
        "" if ms is None else f"{float(ms):.4f}",
        str(res.get("steps", "")),
        rc,
        str(res.get("skipped", "")),
    ]


def switch_classes(lab: dict) -> dict[str, str]:
    """{switch: the class it fixes or removes, '' for none} of one labels.csv row."""
    fixes = [lab["label_fix"]] + [x for x in lab["other_fixes"].split(";") if x]
    out = dict.fromkeys(fixes, "")
    if lab["label"] != "none":
        out[lab["label_fix"]] = lab["label"]
    for cls, switch in parse_removes(lab.get("removes") or "").items():
        if switch not in out:
            raise ValueError(f"{lab['script']}: removes {cls}={switch}, not one of its fixes")
        out[switch] = cls
    return out


def _best(cls: str, classes: dict[str, str], measured: dict[str, float]) -> float | None:
    own = [v for k, v in measured.items() if classes.get(k) == cls]
    return max(own) if own else None


def label_stands(label: str, classes: dict[str, str], speedups: dict[str, float | None]) -> bool:
    """The corpus rule (module docstring); a class with no measured switch never stands."""
    measured = {k: v for k, v in speedups.items() if v is not None}
    if label == "none":
        return bool(measured) and all(v <= CLEAN_MAX_SPEEDUP for v in measured.values())
    best = _best(label, classes, measured)
    if best is None or best < LABELLED_MIN_SPEEDUP:
        return False
    return all(v <= best for k, v in measured.items() if classes.get(k) != label)


def also_stands(
    also: str, classes: dict[str, str], speedups: dict[str, float | None]
) -> bool | None:
    """Every ``also`` class (";"-separated) has a measured switch >= 1.2 (true when there is
    none); None (unknown) when a class has no measured switch yet."""
    measured = {k: v for k, v in speedups.items() if v is not None}
    bests = [_best(cls, classes, measured) for cls in filter(None, also.split(";"))]
    if any(b is None for b in bests):
        return None
    return all(b >= LABELLED_MIN_SPEEDUP for b in bests)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(timing_csv: str, labels_csv: str) -> list[dict]:
    """corpus-measured.csv rows: per script x fix speedups against `none`, and the label rule."""
    times: dict[tuple[str, str], dict[str, float]] = {}
    with open(timing_csv, newline="") as f:
        for r in csv.DictReader(f):
            if r["step_ms"] and r["rc"] == "0":
                times.setdefault((r["script"], r["fix"]), {})[r["repeat"]] = float(r["step_ms"])
    rows = []
    with open(labels_csv, newline="") as f:
        labels = list(csv.DictReader(f))
    for lab in labels:
        s = lab["script"]
        if not any(k[0] == s for k in times):
            continue
        classes = switch_classes(lab)
        removals = set(parse_removes(lab.get("removes") or "").values())
        base = times.get((s, "none"), {})
        per_fix = {}
        for fx in classes:
            t = times.get((s, fx), {})
            shared = sorted(set(base) & set(t))
            pairs = [base[r] / t[r] for r in shared if t[r] > 0]
            # `none` of the rounds the switch was timed in (a later call may add a switch with
            # its own `none` runs: each switch is compared with its own call's baseline)
            mb = _mean([base[r] for r in shared] or list(base.values()))
            mf = _mean(list(t.values()))
            sp = mb / mf if mb is not None and mf else None
            per_fix[fx] = sp
            rows.append(
                {
                    "script": s,
                    "fix": fx,
                    "class": classes[fx],
                    "removal": fx in removals,
                    "label": lab["label"],
                    "label_fix": lab["label_fix"],
                    "none_step_ms": _fmt(mb),
                    "fix_step_ms": _fmt(mf),
                    "speedup": _fmt(sp),
                    "speedup_min": _fmt(min(pairs) if pairs else None),
                    "speedup_max": _fmt(max(pairs) if pairs else None),
                    "pairs": len(pairs),
                }
            )
        stands = label_stands(lab["label"], classes, per_fix)
        also = also_stands(lab.get("also") or "", classes, per_fix)
        for r in rows:
            if r["script"] == s:
                r["label_stands"], r["also_stands"] = stands, "" if also is None else also
    return rows


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.4f}"


def write_csv(rows: list[dict], path: str) -> None:
    """Atomic write (temp file + rename) so a cut-off run never leaves half a table."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
    os.chmod(tmp, 0o644)
    with os.fdopen(fd, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=MEASURED_FIELDS)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def print_table(rows: list[dict]) -> None:
    """One line per script: label, each switch's speedup (min-max over pairs; `*`: a full
    removal), whether the label stands."""
    print(f"{'script':26s} {'label':14s} {'stands':6s} switches (speedup [min-max], *removal)")
    seen: dict[str, list[dict]] = {}
    for r in rows:
        seen.setdefault(r["script"], []).append(r)
    for s, rs in seen.items():
        fx = "  ".join(
            f"{r['fix']}{'*' if r['removal'] else ''}={r['speedup'] or 'n/a'}"
            f"[{r['speedup_min'] or '?'}-{r['speedup_max'] or '?'}]"
            for r in rs
        )
        print(f"{s:26s} {rs[0]['label']:14s} {rs[0]['label_stands']!s:6s} {fx}")


def main(argv: list[str]) -> int:
    if len(argv) == 6 and argv[0] == "row":
        csv.writer(sys.stdout, lineterminator="\n").writerow(timing_row(*argv[1:]))
        return 0
    if len(argv) == 4 and argv[0] == "summarize":
        rows = summarize(argv[1], argv[2])
        write_csv(rows, argv[3])
        print_table(rows)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
