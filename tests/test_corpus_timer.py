"""corpus/timer.py, the wild corpus's timer, on three tiny scripts: a run's result is parsed,
its command line carries ``--fix`` and ``--script-args``, a failing run keeps its exit code, and
a run past its limit is stopped with everything it started (its own session), without stopping
the rounds."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPTS = {
    # steps: the length of its command line (script, --fix, FIX, --seconds, 0)
    "ok": 'import json, sys\nprint("RESULT " + json.dumps({"step_ms": 2.5, "steps": len(sys.argv), "fix": sys.argv[2]}))\n',
    "fails": "import sys\nprint('boom')\nsys.exit(3)\n",
    # leaves a grandchild behind, then outlives its limit
    "hangs": (
        "import os, subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "open(os.environ['PIDFILE'], 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    ),
}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is gone for our purposes
        return fh.read().split(")")[-1].split()[0] != "Z"


def test_timer_parses_results_keeps_exit_codes_and_stops_a_run_with_its_group(tmp_path):
    for name, text in SCRIPTS.items():
        (tmp_path / f"{name}.py").write_text(text)
    specs = "ok 1 300 quick\nfails 1 300\nhangs 1 20\n"  # 20 s: time to start its grandchild
    out = tmp_path / "timing.csv"
    env = {**os.environ, "PIDFILE": str(tmp_path / "pid")}
    proc = subprocess.run(
        [
            *(sys.executable, str(ROOT / "corpus" / "timer.py"), "--repeats", "2", "--no-preload"),
            *("--csv", str(out), "--logs", str(tmp_path / "logs"), "--dir", str(tmp_path)),
            "--script-args=--seconds 0",
        ],
        input=specs,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = list(csv.DictReader(out.open()))
    got = [(r["script"], r["fix"], r["repeat"], r["rc"], r["step_ms"]) for r in rows]
    one_round = [
        ("ok", "none", "1", "0", "2.5000"),
        ("ok", "quick", "1", "0", "2.5000"),
        ("fails", "none", "1", "3", ""),
        ("hangs", "none", "1", "124", ""),
    ]
    assert got == one_round + [(s, f, "2", rc, ms) for s, f, _, rc, ms in one_round]
    assert {r["steps"] for r in rows if r["script"] == "ok"} == {"5"}
    assert "boom" in (tmp_path / "logs" / "fails.none.r2.log").read_text()
    grandchild = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)  # and rc 124 above: stopped at its 20 s limit, not its 60 s sleep
