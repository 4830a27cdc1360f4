"""Every command line of README.md's code blocks runs as written after its quickstart (issue 52
item 3): each is parsed from the README, its ``harness`` (or ``.venv/bin/harness``, ``python -m
harness``) run through the real CLI (tests/harness_cli.py), at smoke sizes where it runs
anything.

To keep the test short, one ``run`` line runs for real (``+scenario=forced_sync``, with ``size=smoke
harness.repeats=1 nsys.enabled=false`` appended: about 10 s of CPU), and its run folder stands in
for ``RUN_DIR`` (a copy of it for the second one, both for ``SWEEP_DIR``); every other ``run``
line is composed and validated as the run would be (``--cfg job`` appended: every key, value
and group checked, nothing run). ``harness score corpus/wild`` is what tests/test_score.py
scores (its SCORE_COMMAND, about 30 s of CPU): checked to be that command, not run twice.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.test_score import SCORE_COMMAND

README = REPO / "README.md"
#: How a README line calls the harness (the venv active, or not), longest first.
CALLS = (".venv/bin/python -m harness", "python -m harness", ".venv/bin/harness", "harness")
#: Appended to a ``run`` line: the CPU's smallest size, one round, unprofiled.
SMOKE = ["size=smoke", "harness.repeats=1", "nsys.enabled=false", "harness.progress=false"]
#: The one ``run`` line that runs for real.
REAL_RUN = "+scenario=forced_sync"

pytestmark = pytest.mark.slow


def readme_commands(text: str) -> list[list[str]]:
    """The harness command lines of the README's code blocks, as argument lists (without the
    call itself): comments dropped, ``A && B`` split, lines that do not call the harness
    (``bash scripts/setup.sh``, ``bash scripts/test.sh``) left out."""
    out = []
    for block in re.findall(r"```(?:bash|sh)?\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            for part in (p.strip() for p in line.split("&&")):
                call = next((c for c in CALLS if part == c or part.startswith(c + " ")), None)
                if call is not None:
                    out.append(shlex.split(part[len(call) :]))
    return out


def test_the_readme_has_the_commands_a_newcomer_reads() -> None:
    commands = readme_commands(README.read_text())
    subs = {c[0] for c in commands}
    assert {"run", "list", "diagnose", "score", "report", "compare"} <= subs, subs
    assert ["run", "+scenario=all"] == commands[0]  # the quickstart's, first
    assert not any(line.lstrip().startswith("python -m harness") for line in
                   README.read_text().splitlines()), "the README mixes its command's spellings"  # fmt: skip


def test_harness_is_a_console_command_beside_bottleneck_suite() -> None:
    """``harness`` (the README's command) and ``bottleneck-suite`` (its first name) are both
    the CLI's entry point; where scripts/setup.sh has installed the checkout, it runs."""
    text = (REPO / "pyproject.toml").read_text()
    section = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    scripts = dict(re.findall(r'^([\w-]+) = "([^"]+)"', section, flags=re.M))
    assert scripts["harness"] == scripts["bottleneck-suite"] == "harness.__main__:main"
    installed = Path(sys.executable).parent / "harness"
    if not installed.is_file():
        pytest.skip(f"{installed} is not installed (scripts/setup.sh installs it)")
    import subprocess

    proc = subprocess.run([str(installed), "--help"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: harness"), proc.stderr


def _fill(args: list[str], run_dir: Path, other: Path, sweep: Path, out: Path) -> list[str]:
    """The README's placeholders as real folders: RUN_DIR (the first, then the second), SWEEP_DIR,
    DIR (a new folder)."""
    runs = iter([run_dir, other])
    filled = []
    for a in args:
        if a == "RUN_DIR":
            filled.append(str(next(runs)))
        elif a == "SWEEP_DIR":
            filled.append(str(sweep))
        elif a == "DIR":
            filled.append(str(out))
        elif a != "...":
            filled.append(a)
    return filled


def test_each_readme_command_runs_as_written(tmp_path: Path) -> None:
    commands = readme_commands(README.read_text())
    results = tmp_path / "results"
    real = next(c for c in commands if c[:2] == ["run", REAL_RUN])
    proc = run_cli([*real, *SMOKE, f"harness.results_dir={results}"], timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the summary says its statistics: mean and median beside a speedup that is a ratio of
    # means (issue 52: a median of 94 ms beside 38 ms read against a speedup of 2.10)
    assert all(w in proc.stdout for w in ("mean_ms", "median_ms", "ratio of means")), proc.stdout
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    other = sweep / "second"
    shutil.copytree(run_dir, other)
    shutil.copytree(run_dir, sweep / "first")
    for args in commands:
        if args == real:
            continue
        if " ".join(["harness", *args]) == SCORE_COMMAND:
            continue  # tests/test_score.py runs it
        args = _fill(args, run_dir, other, sweep, tmp_path / "out")
        if args[0] == "run":
            args = [*args, *SMOKE, f"harness.results_dir={results}"]
            args += [] if "--cfg" in args else ["--cfg", "job"]
        proc = run_cli(args, timeout=600)
        said = proc.stdout + proc.stderr
        assert proc.returncode == 0 and "Traceback" not in said, (args, said[-3000:])
    assert [p.name for p in results.iterdir()] == [run_dir.name], "a --cfg job line ran"
    assert any(" ".join(["harness", *c]) == SCORE_COMMAND for c in commands), SCORE_COMMAND


def test_the_readme_is_short_and_starts_with_the_two_fresh_machine_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < 250
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", text, flags=re.S)
    assert blocks[0].strip() == "bash scripts/setup.sh && .venv/bin/harness run +scenario=all"
    assert blocks[1].strip() == "bash scripts/setup.sh && bash scripts/test.sh"
