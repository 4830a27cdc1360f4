"""Why a traced fork server loses capture ranges under nsys (issue 25), without the harness.

One ``nsys profile --capture-range-end=repeat --trace-fork-before-exec=true`` session per case,
around a small server that never touches CUDA and forks three children in turn, as the
harness's traced fork server does. Each child (like a harness worker) may leave the server's
session (``setsid``), sets up CUDA, warms up, may wait for a go, then runs a window inside
cudaProfilerStart/Stop (an NVTX range on a CPU machine) and leaves through ``os._exit``.

A case varies one thing: the gap between one child's exit and the next one's capture, whether
the next child is forked while the last one measures (and held), ``setsid``, a keeper child
that lives through the session, or nsys's ``--kill``. The server takes SIGTERM and SIGHUP with
``sigwaitinfo`` and logs who sent them (pid and command line).

    python scripts/device/nsys_repeat_probe.py [CASE ...] > probe.txt   # every case by default

Prints one line per event and one ``CASE`` summary line per case: captures nsys started,
reports it wrote, signals the server got and from whom.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

#: name -> (gap after the last child's exit in s, the last child's event on which the next one
#: is forked and then held until that exit ('' : forked after it), setsid, keeper child, extra
#: nsys options, sessions the children alternate between)
CASES: dict[str, tuple[float, str, bool, bool, list[str], int]] = {
    "gap0": (0.0, "", True, False, [], 1),
    "gap3": (3.0, "", True, False, [], 1),
    "overlap_gap3": (3.0, "start", True, False, [], 1),
    "gap3_keeper": (3.0, "", True, True, [], 1),
    "gap3_killnone": (3.0, "", True, False, ["--kill=none"], 1),
    "after_stop": (0.0, "stopped", True, False, [], 1),
    "cross_start": (0.5, "start", True, False, [], 2),
}
CHILDREN = 3
WINDOW_S = 0.5
GPU = Path("/dev/nvidiactl").exists()


def _log(path: str, **ev: object) -> None:
    line = json.dumps({"t": round(time.time(), 3), "pid": os.getpid(), **ev}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, line.encode())
    os.close(fd)


def _child(i: int, log: str, go: int | None, setsid: bool, keeper: bool) -> None:
    """A worker: set up, (wait for the go,) measure inside a capture range, leave."""
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGHUP})
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if setsid:
            os.setsid()
        if keeper:
            _log(log, ev="keeper")
            while True:
                time.sleep(3600)
        import nvtx
        import torch

        dev = "cuda" if GPU else "cpu"
        x = torch.randn(1024, 1024, device=dev)
        for _ in range(20):
            x = torch.tanh(x @ x)
        if GPU:
            torch.cuda.synchronize()
        _log(log, ev="ready", child=i)
        if go is not None:
            os.read(go, 1)
        _log(log, ev="start", child=i)
        if GPU:
            torch.cuda.profiler.start()
        with nvtx.annotate("probe_window"):  # the capture range on a CPU machine
            t = time.perf_counter()
            while time.perf_counter() - t < WINDOW_S:
                x = torch.tanh(x @ x)
                if GPU:
                    torch.cuda.synchronize()
        t = time.perf_counter()
        if GPU:
            torch.cuda.profiler.stop()
        _log(log, ev="stopped", child=i, stop_s=round(time.perf_counter() - t, 3))
    except BaseException as exc:
        _log(log, ev="error", child=i, error=repr(exc)[:300])
    finally:
        os._exit(0)


def _signals(log: str) -> None:
    """Log every SIGTERM/SIGHUP the server gets, with its sender (the server ignores them)."""
    while True:
        info = signal.sigwaitinfo({signal.SIGTERM, signal.SIGHUP})
        try:
            cmd = Path(f"/proc/{info.si_pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200]
        except OSError:
            cmd = b"?"
        _log(
            log,
            ev="signal",
            signo=info.si_signo,
            sender=info.si_pid,
            cmd=cmd.decode(errors="replace"),
        )


def _wait(pid: int) -> int:
    """Poll like the harness's server (every 10 ms) until ``pid`` has ended."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)


def _wait_event(log: str, ev: str, child: int) -> None:
    while True:
        for line in Path(log).read_text().splitlines():
            d = json.loads(line)
            if d.get("ev") == ev and d.get("child") == child:
                return
        time.sleep(0.01)


def serve(case: str, log: str, session: int) -> None:
    """Fork this session's children: child g (counted across sessions) once child g-1 has
    passed ``fork_on`` (then held until g-1 has exited and the gap is over), or once g-1 has
    exited and the gap is over."""
    gap, fork_on, setsid, keeper, _, sessions = CASES[case]
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP})
    threading.Thread(target=_signals, args=(log,), daemon=True).start()
    import torch  # noqa: F401  (imported before forking, as the harness's server does)

    kept = None
    if keeper:
        kept = os.fork()
        if kept == 0:
            _child(-1, log, None, setsid, True)
    reapers = []
    for g in range(session, CHILDREN * sessions, sessions):
        go_r = go_w = None
        if g > 0 and fork_on:
            _wait_event(log, fork_on, g - 1)
            go_r, go_w = os.pipe()
        elif g > 0:
            _wait_event(log, "exit", g - 1)
            time.sleep(gap)
        pid = os.fork()
        if pid == 0:
            _child(g, log, go_r, setsid, False)
        _log(log, ev="fork", child=g, forked=pid, session=session)
        reaper = threading.Thread(
            target=lambda p=pid, c=g: _log(log, ev="exit", child=c, status=_wait(p))
        )
        reaper.start()
        reapers.append(reaper)
        if go_w is not None:
            _wait_event(log, "exit", g - 1)
            time.sleep(gap)
            os.write(go_w, b"x")
    for reaper in reapers:
        reaper.join()
    if kept is not None:
        os.kill(kept, signal.SIGKILL)
        os.waitpid(kept, 0)
    _log(log, ev="server_end", session=session)


def run_case(case: str, out: Path) -> str:
    """One nsys session per server of the case; the summary line."""
    extra, sessions = CASES[case][4], CASES[case][5]
    log = str(out / f"{case}.events")
    Path(log).unlink(missing_ok=True)
    rng = ["--capture-range=cudaProfilerApi"] if GPU else [
        "--capture-range=nvtx", "--nvtx-capture=probe_window"]  # fmt: skip
    env = {**os.environ, "NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
    t0 = time.time()
    procs = []
    for k in range(sessions):
        base = out / f"{case}-s{k}"
        cmd = ["nsys", "profile", "--trace=cuda,nvtx,osrt", "--sample=none", "--cpuctxsw=none",
               f"--output={base}", "--force-overwrite=true", *rng, "--capture-range-end=repeat",
               "--trace-fork-before-exec=true", *extra, sys.executable, __file__, "--serve", case,
               log, str(k)]  # fmt: skip
        nlog = open(out / f"{case}-s{k}.nsys.log", "wb")
        procs.append(subprocess.Popen(cmd, stdout=nlog, stderr=subprocess.STDOUT, env=env,
                                      start_new_session=True))  # fmt: skip
        time.sleep(2.0)  # two nsys start-ups at once can collide
    rcs = []
    for proc in procs:
        try:
            rcs.append(proc.wait(timeout=max(1.0, 100 - (time.time() - t0))))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rcs.append(proc.wait())
    nsys_out = "".join(
        (out / f"{case}-s{k}.nsys.log").read_text(errors="replace") for k in range(sessions)
    )
    events = Path(log).read_text().splitlines() if Path(log).exists() else []
    for line in events:
        d = json.loads(line)
        print(
            f"  {case} +{d['t'] - t0:6.2f}s " + json.dumps({k: v for k, v in d.items() if k != "t"})
        )
    reports = list(out.glob(f"{case}-s*.nsys-rep"))
    sigs = [json.loads(x) for x in events if '"signal"' in x]
    for p in reports:
        p.unlink()
    return (
        f"CASE {case} rc={rcs} wall_s={time.time() - t0:.1f} "
        f"captures={nsys_out.count('Capture range started')}/{CHILDREN * sessions} "
        f"reports={len(reports)} "
        f"signals={[(s['signo'], s['sender'], s['cmd'][:60]) for s in sigs]}"
    )


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"]:
        serve(argv[1], argv[2], int(argv[3]))
        return 0
    out = Path(os.environ.get("OUT", "/var/tmp/repeat-probe"))
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"nsys: {subprocess.run(['nsys', '--version'], capture_output=True, text=True).stdout.strip()}"
    )
    summaries = []
    for case in argv or list(CASES):
        s = run_case(case, out)
        summaries.append(s)
        print(s, flush=True)
    print("\n".join(summaries))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
