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
    """Three calls' lines: ``NAME PROCS GPUS LIMIT_S PROFILE_S TRACE CACHE SOURCE DEVICE
    FIX...``, together every single-GPU script once; only the short compile script is profiled
    with cold caches; the CPU pipelines pass --device cpu."""
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
            name, procs, gpus, limit_s, profile_s, trace, cache, source, device, *fixes = (
                line.split()
            )
            assert procs in {"1", "2"} and int(gpus) <= 1 and int(limit_s) >= 60
            assert int(profile_s) > 0 and trace and fixes
            assert cache == ("cold" if name == "clean_compile_short" else "warm")
            assert (source, device) == (name, "cpu" if name.startswith("pp_") else "auto")
            seen.append(name)
        assert "skipped ddp_exposed_comm" in proc.stderr
    runnable = [s.name for s in _plan().read_labels(str(LABELS)) if s.gpus <= 1]
    assert sorted(seen) == sorted(runnable)


#: The 2-GPU entries of issue 35 (goal 7): the pipelines on GPUs and the new data-parallel scripts.
GPU_ENTRIES = (
    "pp_param_split_gpu pp_heavy_head_gpu pp_balanced_gpu dp_straggler ddp_accum_no_nosync "
    "ddp_manual_allreduce ddp_clean"
)


def test_the_gpu_entries_run_their_scripts_on_cuda() -> None:
    """``--only`` with the 2-GPU entries on a 2-GPU machine selects exactly them; a GPU pipeline
    entry runs the CPU entry's script with --device cuda, the new scripts their own file."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "corpus" / "plan.py"), str(LABELS), "--gpus=2",
         f"--only={GPU_ENTRIES}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = {ln.split()[0]: ln.split() for ln in proc.stdout.splitlines()}
    assert sorted(lines) == sorted(GPU_ENTRIES.split())
    for name, (_, procs, gpus, _limit, _prof, _trace, _cache, source, device, *_) in lines.items():
        assert (procs, gpus, device) == ("2", "2", "cuda")
        assert source == name.removesuffix("_gpu")
        assert (ROOT / "corpus" / "wild" / f"{source}.py").is_file()
    assert lines["pp_heavy_head_gpu"][9:] == ["by_params", "balanced"]
    # on a 1-GPU machine all seven are left out, each with a message
    chosen, notes = _plan().select(
        _plan().read_labels(str(LABELS)), part="", only=GPU_ENTRIES, gpus=1, repeats=2
    )
    assert chosen == [] and sum("needs 2 GPU(s)" in n for n in notes) >= 7


def test_a_cuda_entry_needs_a_gpu() -> None:
    p = _plan()
    with pytest.raises(ValueError, match="device cuda with gpus 0"):
        p.Script(name="x", procs=2, gpus=0, trace="cuda", fixes=("a",), device="cuda")
