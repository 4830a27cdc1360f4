"""Bring the pending entries' captures (corpus/wild/pending/) into the scored corpus.

    python -m corpus.ingest_pending CALL [CALL ...] [--only "a b"] [--dest corpus/wild] [--dry-run]

Each CALL is a capture-corpus.sh output folder (corpus-timing.csv, corpus-exports.tar): the
first call's ``corpus-d1/`` and the last call's ``corpus-rest/`` (unpacked from
corpus-rest.tar); a later call's rows and export of a script replace an earlier call's. The
label rule (corpus/measure.py) is applied against ``pending/labels.csv``. Every entry whose
label stands (and whose ``also`` classes stand, where it has any) and whose export came back:

1. its export is ingested by ``scripts/ingest_corpus.py``'s own steps (the unread tables,
   columns and calls dropped, cut after :data:`KEEP_ITERATIONS` steady iterations, 8 by
   default, start-up whole; packed) into ``exports/NAME.sqlite.cols.xz``;
2. its row moves from ``pending/labels.csv`` to ``labels.csv``, its timing rows into
   ``timing.csv`` (replacing that script's old rows), and ``measured.csv`` is recomputed;
3. its row leaves ``pending/README.md``'s table, and ``README.md`` gets (or has replaced) the
   section :data:`SECTION` with a table of every entry moved: ``none``, each switch's speedup,
   whether it stands, its export's size.

``--only`` takes those scripts alone (a call's rows of a script rewritten since it was timed
must be left out). An entry whose label does not stand stays pending; its timing rows are added to
``pending/timing.csv.rows`` and it is printed with its numbers. ``--dry-run`` prints what would
be done, and the section, and writes nothing.
"""

from __future__ import annotations

import argparse
import csv
import io
import lzma
import sys
import tarfile
import tempfile
from pathlib import Path

from corpus import measure
from scripts import ingest_corpus

ROOT = Path(__file__).resolve().parents[1]

#: Steady iterations kept after start-up where 8 would keep too little of what the label is
#: about (scripts/ingest_corpus.py counts them from the first steady iteration, which can lie in
#: a script's warm-up):
#: - the variable-length scripts warm up over one whole cycle of their 16 shapes, and on a GPU
#:   whose attention is cuDNN's that cycle holds a plan build (host, GPU idle) per new length:
#:   the cycle plus 8 iterations of the timed loop;
#: - ac_del_infer warms up over two cycles of its 5 image sizes: those and 8;
#: - the periodic scripts save every 10 steps, their warm-up ending with a save: two saves.
KEEP_ITERATIONS = {
    "ac_empty_cache_varlen": 24,
    "ac_fragmentation": 24,
    "ds_bucketed_text": 24,
    "lb_bucketed_graphs": 24,
    "ac_del_infer": 18,
    "bio_torch_save": 22,
    "bio_np_save_acts": 22,
}
#: README.md's section for the entries this script moves (replaced when run again).
SECTION = "## The new classes' entries (issues 49 and 50), on one H200"
#: The rule under the section table's header.
RULE = "| --- | --- | ---: | --- | --- | ---: |"


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """(header, rows) of a CSV file; ([], []) when it is missing."""
    if not path.is_file():
        return [], []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def write_csv(path: Path, header: list[str], rows: list[dict[str, str]], *, head: bool = True):
    """``rows`` as CSV (``head``: with the header line), written whole then renamed."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=header, lineterminator="\n", extrasaction="ignore")
    if head:
        writer.writeheader()
    writer.writerows(rows)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(buf.getvalue())
    tmp.replace(path)


def call_timing(calls: list[Path]) -> list[dict[str, str]]:
    """Every call's timing rows; a script's rows from a later call replace an earlier call's."""
    rows: list[dict[str, str]] = []
    for call in calls:
        _, new = read_csv(call / "corpus-timing.csv")
        names = {r["script"] for r in new}
        rows = [r for r in rows if r["script"] not in names] + new
    return rows


def judge(rows: list[dict[str, str]], labels: Path) -> list[dict]:
    """corpus/measure.py's measured rows of ``rows`` against ``labels``."""
    with tempfile.TemporaryDirectory() as tmp:
        timing = Path(tmp) / "timing.csv"
        write_csv(timing, measure.TIMING_FIELDS, rows)
        return measure.summarize(str(timing), str(labels))


def standing(measured: list[dict]) -> dict[str, bool]:
    """Per script: whether its label stands and no ``also`` class falls."""
    out: dict[str, bool] = {}
    for r in measured:
        ok = r["label_stands"] is True and r["also_stands"] is not False
        out[r["script"]] = out.get(r["script"], True) and ok
    return out


def call_exports(calls: list[Path], tmp: Path) -> dict[str, Path]:
    """Each script's decompressed export (``tmp/NAME.sqlite``), from the last call holding one."""
    found: dict[str, Path] = {}
    for call in calls:
        tar_path = call / "corpus-exports.tar"
        if not tar_path.is_file():
            continue
        with tarfile.open(tar_path) as tar:
            for member in tar.getmembers():
                name = Path(member.name).name.removesuffix(".sqlite.xz")
                raw = tmp / f"{name}.sqlite"
                with tar.extractfile(member) as fh:  # type: ignore[union-attr]
                    raw.write_bytes(lzma.decompress(fh.read()))
                found[name] = raw
    return found


def move_labels(dest: Path, names: set[str]) -> None:
    """The rows of ``names`` from pending/labels.csv to the end of labels.csv."""
    header, scored = read_csv(dest / "labels.csv")
    pending_header, pending = read_csv(dest / "pending" / "labels.csv")
    if pending_header != header:
        raise SystemExit("pending/labels.csv and labels.csv have different columns")
    moved = [r for r in pending if r["script"] in names]
    write_csv(dest / "labels.csv", header, scored + moved)
    write_csv(dest / "pending" / "labels.csv", header, [r for r in pending if r not in moved])


def merge_timing(dest: Path, rows: list[dict[str, str]], names: set[str]) -> None:
    """``names``' rows into timing.csv (their old rows replaced); measured.csv recomputed."""
    _, old = read_csv(dest / "timing.csv")
    kept = [r for r in old if r["script"] not in names]
    write_csv(dest / "timing.csv", measure.TIMING_FIELDS, kept + [r for r in rows
              if r["script"] in names])  # fmt: skip
    measured = measure.summarize(str(dest / "timing.csv"), str(dest / "labels.csv"))
    measure.write_csv(measured, str(dest / "measured.csv"))


def keep_pending(dest: Path, rows: list[dict[str, str]], names: set[str]) -> None:
    """``names``' timing rows added to pending/timing.csv.rows (no header, as that file is)."""
    path = dest / "pending" / "timing.csv.rows"
    old = path.read_text() if path.is_file() else ""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=measure.TIMING_FIELDS, lineterminator="\n")
    writer.writerows(r for r in rows if r["script"] in names)
    path.write_text(old + buf.getvalue())


def section(measured: list[dict], names: list[str], sizes: dict[str, float]) -> str:
    """README.md's section: one row per entry moved."""
    lines = [
        SECTION,
        "",
        "Timed with `none` and every switch (scripts/device/capture-corpus.sh, 2 interleaved",
        "processes each where the call's time allowed; `pairs` below), profiled whole once with",
        'a short loop (`PROFILE_ARGS="--seconds 0.3"`) and ingested by',
        "`corpus/ingest_pending.py` (steady iterations kept: 8, more where its `KEEP_ITERATIONS`",
        "says why).",
        "",
        "| script | label | `none` ms/step | switches: speedup [min-max over pairs] (* the full "
        "removal) | stands | export KB |",
        RULE,
    ]
    for name in names:
        rs = [r for r in measured if r["script"] == name]
        fixes = ", ".join(
            f"{r['fix']}{'*' if r['removal'] else ''} {float(r['speedup']):.2f} "
            f"[{float(r['speedup_min'] or r['speedup']):.2f}-"
            f"{float(r['speedup_max'] or r['speedup']):.2f}] ({r['pairs']})"
            for r in rs
            if r["speedup"]
        )
        none = float(rs[0]["none_step_ms"]) if rs and rs[0]["none_step_ms"] else float("nan")
        stands = "yes" if all(r["label_stands"] is True for r in rs) else "no"
        label = rs[0]["label"] if rs else "?"
        lines.append(f"| {name} | {label} | {none:.1f} | {fixes} | {stands} | "
                     f"{sizes.get(name, float('nan')):.0f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _row_name(line: str) -> str:
    """The script a section table row (``| name | ...``) is about; "" for any other line,
    the header and the rule included."""
    cells = line.split("|")
    name = cells[1].strip() if line.startswith("| ") and len(cells) > 2 else ""
    return "" if name in ("script", "---") else name


def merged_section(old: str, text: str) -> str:
    """``text`` with the table rows of ``old`` (the section as it was) whose script ``text``
    does not name kept before its own: a later call's entries join the earlier ones'."""
    lines = text.rstrip("\n").split("\n")
    new = {_row_name(ln) for ln in lines}
    kept = [ln for ln in old.split("\n") if _row_name(ln) and _row_name(ln) not in new]
    rule = lines.index(RULE) + 1
    return "\n".join(lines[:rule] + kept + lines[rule:]) + "\n"


def place_section(readme: Path, text: str) -> None:
    """``text`` as README.md's :data:`SECTION`: replacing it (the rows of entries it does not
    name kept), else before "## The committed exports", else at the end."""
    doc = readme.read_text()
    if SECTION in doc:
        start = doc.index(SECTION)
        nxt = doc.find("\n## ", start + len(SECTION))
        old = doc[start : None if nxt < 0 else nxt]
        doc = doc[:start] + merged_section(old, text) + ("" if nxt < 0 else doc[nxt:])
    elif "\n## The committed exports" in doc:
        at = doc.index("\n## The committed exports") + 1
        doc = doc[:at] + text + "\n" + doc[at:]
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    readme.write_text(doc)


def drop_pending_rows(readme: Path, names: set[str]) -> None:
    """The table rows of ``names`` (``| name | ...``) out of pending/README.md."""
    lines = readme.read_text().splitlines(keepends=True)
    kept = [ln for ln in lines if not any(ln.startswith(f"| {n} |") for n in names)]
    readme.write_text("".join(kept))


def ingest(calls: list[Path], dest: Path, dry_run: bool, only: set[str] | None = None) -> int:
    """The whole procedure (module docstring); 0, or 2 when nothing came back."""
    rows = [r for r in call_timing(calls) if only is None or r["script"] in only]
    if not rows:
        print("no timing rows in the calls named")
        return 2
    measured = judge(rows, dest / "pending" / "labels.csv")
    stands = standing(measured)
    measure.print_table(measured)
    with tempfile.TemporaryDirectory() as tmp:
        exports = call_exports(calls, Path(tmp))
        moved = [n for n, ok in stands.items() if ok and n in exports]
        moved = [n for n in moved if only is None or n in only]
        stay = sorted(set(stands) - set(moved))
        for n in stay:
            why = "no export" if stands[n] else "its label does not stand"
            print(f"stays pending: {n} ({why})")
        sizes = {}
        for name in moved:
            out = dest / "exports" / f"{name}{ingest_corpus.SUFFIX}"
            keep = KEEP_ITERATIONS.get(name, ingest_corpus.ITERATIONS)
            if dry_run:
                print(f"would ingest {name}: {keep} iterations kept")
                continue
            step = ingest_corpus.none_step_ms(rows).get(name, 0.0)
            print(ingest_corpus.ingest_export(exports[name], out, keep, step), flush=True)
            sizes[name] = out.stat().st_size / 1e3
    text = section(measured, moved, sizes)
    print(text)
    if dry_run:
        return 0
    keep_pending(dest, rows, set(stay))
    if moved:
        move_labels(dest, set(moved))
        merge_timing(dest, rows, set(moved))
        place_section(dest / "README.md", text)
        drop_pending_rows(dest / "pending" / "README.md", set(moved))
    total = sum(p.stat().st_size for p in (dest / "exports").glob("*.sqlite*"))
    print(f"moved {len(moved)}, pending {len(stay)}; exports {total / 1e6:.2f} MB "
          f"(budget {ingest_corpus.BUDGET_MB} MB)")  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("calls", nargs="+", type=Path, help="capture-corpus.sh output folders")
    p.add_argument("--dest", type=Path, default=ROOT / "corpus" / "wild")
    p.add_argument("--only", default="", help="script names, space-separated: those alone")
    p.add_argument("--dry-run", action="store_true", help="print, write nothing")
    args = p.parse_args(argv)
    only = set(args.only.split()) or None
    return ingest(args.calls, args.dest, args.dry_run, only)


if __name__ == "__main__":
    sys.exit(main())
