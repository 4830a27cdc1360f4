"""corpus/timer.py, the wild corpus's timer, on tiny scripts: a run's result is parsed, its
command line carries ``--fix`` and ``--script-args``, a failing run keeps its exit code, a run
past its limit is stopped with everything it started (its own session), without stopping the
rounds; a 2-process entry runs as 2 forked ranks with torchrun's environment, and a failing rank
stops the other."""

from __future__ import annotations

import csv
import json
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
    # 3 s: ample to start its grandchild (forked by the timer, no interpreter start-up of its
    # own; Popen returns once the grandchild has exec'd), far below its 60 s sleep
    specs = "ok 1 300 quick\nfails 1 300\nhangs 1 3\n"
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
    assert not _alive(grandchild)  # and rc 124 above: stopped at its 3 s limit, not its 60 s sleep


RANKS = {
    # each rank writes what torch.distributed.run would have told it, rank 0 the RESULT line
    "ranks": (
        "import json, os, sys\n"
        "keys = ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR',"
        " 'MASTER_PORT', 'OMP_NUM_THREADS')\n"
        "env = {k: os.environ.get(k) for k in keys}\n"
        "open(os.path.join(os.environ['OUTDIR'], 'rank%s.json' % env['RANK']), 'w')"
        ".write(json.dumps({**env, 'argv': sys.argv[1:], 'pid': os.getpid()}))\n"
        "if env['RANK'] == '0':\n"
        "    print('RESULT ' + json.dumps({'step_ms': 1.0, 'steps': 10, 'fix': sys.argv[2]}))\n"
    ),
    # rank 1 fails at once; rank 0 would wait for it past the run's limit (a collective that
    # never completes): left alone, the run would end at its limit with 124, not 3
    "one_fails": (
        "import os, sys, time\nif os.environ['RANK'] == '1':\n    sys.exit(3)\ntime.sleep(900)\n"
    ),
}


def test_two_ranks_are_forked_with_torchruns_environment(tmp_path):
    """A PROCS=2 entry runs as 2 forked ranks with RANK, LOCAL_RANK, WORLD_SIZE and a shared
    MASTER_PORT; ``source=`` and ``device=`` pick its script and --device, its rows keep the
    entry's name; a rank that fails stops the other (its exit code kept, not the limit's)."""
    for name, text in RANKS.items():
        (tmp_path / f"{name}.py").write_text(text)
    specs = "entry_cuda 2 300 source=ranks device=cuda quick\none_fails 2 400 device=auto\n"
    out = tmp_path / "timing.csv"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["OUTDIR"] = str(tmp_path)
    proc = subprocess.run(
        [
            *(sys.executable, str(ROOT / "corpus" / "timer.py"), "--repeats", "1", "--no-preload"),
            *("--csv", str(out), "--logs", str(tmp_path / "logs"), "--dir", str(tmp_path)),
        ],
        input=specs,
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [(r["script"], r["fix"], r["rc"], r["step_ms"]) for r in csv.DictReader(out.open())]
    assert rows == [
        ("entry_cuda", "none", "0", "1.0000"),
        ("entry_cuda", "quick", "0", "1.0000"),
        ("one_fails", "none", "3", ""),
    ]
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [s["RANK"] for s in seen] == [s["LOCAL_RANK"] for s in seen] == ["0", "1"]
    assert {s["WORLD_SIZE"] for s in seen} == {s["LOCAL_WORLD_SIZE"] for s in seen} == {"2"}
    assert seen[0]["MASTER_PORT"] == seen[1]["MASTER_PORT"] and seen[0]["MASTER_PORT"].isdigit()
    assert {s["OMP_NUM_THREADS"] for s in seen} == {"1"}  # as torchrun sets it for 2 processes
    assert seen[0]["pid"] != seen[1]["pid"]
    assert seen[0]["argv"] == ["--fix", "quick", "--device", "cuda"]  # the last run's ranks
    assert (tmp_path / "logs" / "entry_cuda.quick.r1.log").is_file()
