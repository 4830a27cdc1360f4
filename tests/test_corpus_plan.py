"""corpus/plan.py, which scripts a capture call runs: the corpus dealt into N calls of near-equal
estimated time, the heavy scripts in different calls, every script in exactly one call, and a
script needing more GPUs than the machine has left out with a message."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LABELS = ROOT / "corpus" / "wild" / "labels.csv"


def _plan():
    spec = importlib.util.spec_from_file_location("corpus_plan", ROOT / "corpus" / "plan.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up there
    spec.loader.exec_module(mod)
    return mod


def test_parse_part() -> None:
    p = _plan()
    assert p.parse_part("2of3") == p.parse_part("2/3") == (2, 3)
    for bad in ("0of3", "4of3", "3", "1of"):
        with pytest.raises(ValueError):
            p.parse_part(bad)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_deal_covers_the_corpus_once_and_evens_the_load(n: int) -> None:
    p = _plan()
    scripts = p.read_labels(str(LABELS))
    parts = p.deal(scripts, n, repeats=2)
    names = [s.name for part in parts for s in part]
    assert sorted(names) == sorted(s.name for s in scripts)
    loads = [sum(s.weight(2) for s in part) for part in parts]
    heaviest = max(s.weight(2) for s in scripts)
    assert max(loads) - min(loads) <= heaviest  # what heaviest-first to the lightest part gives
    order = {s.name: i for i, s in enumerate(scripts)}
    for part in parts:  # each part keeps the labels file's order
        assert [order[s.name] for s in part] == sorted(order[s.name] for s in part)


def test_the_heaviest_scripts_land_in_different_calls() -> None:
    p = _plan()
    scripts = p.read_labels(str(LABELS))
    top = sorted(scripts, key=lambda s: -s.weight(2))[:3]
    parts = p.deal(scripts, 3, repeats=2)
    where = {s.name: k for k, part in enumerate(parts) for s in part}
    assert len({where[s.name] for s in top}) == 3


def test_scripts_needing_more_gpus_are_left_out_with_a_message() -> None:
    p = _plan()
    scripts = p.read_labels(str(LABELS))
    chosen, notes = p.select(scripts, part="", only="", gpus=1, repeats=2)
    two = {s.name for s in scripts if s.gpus == 2}
    assert two and not two & {s.name for s in chosen}
    assert len(notes) == len(two) and all("needs 2 GPU(s)" in n for n in notes)
    chosen, _ = p.select(scripts, part="", only="", gpus=0, repeats=2)
    assert all(s.gpus == 0 for s in chosen)
    with pytest.raises(ValueError, match="not in the labels file"):
        p.select(scripts, part="", only="no_such_script", gpus=1, repeats=2)


def test_cli_lines_and_parts_union() -> None:
    """Three calls' lines: ``NAME PROCS GPUS LIMIT_S PROFILE_S TRACE CACHE FIX...``, together
    every single-GPU script once; only the short compile script is profiled with cold caches."""
    seen = []
    for k in (1, 2, 3):
        proc = subprocess.run(
            [
                sys.executable,
                str(ROOT / "corpus" / "plan.py"),
                str(LABELS),
                f"--part={k}of3",
                "--gpus=1",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        for line in proc.stdout.splitlines():
            name, procs, gpus, limit_s, profile_s, trace, cache, *fixes = line.split()
            assert procs in {"1", "2"} and int(gpus) <= 1 and int(limit_s) >= 60
            assert int(profile_s) > 0 and trace and fixes
            assert cache == ("cold" if name == "clean_compile_short" else "warm")
            seen.append(name)
        assert "skipped ddp_exposed_comm" in proc.stderr
    runnable = [s.name for s in _plan().read_labels(str(LABELS)) if s.gpus <= 1]
    assert sorted(seen) == sorted(runnable)
