"""The scenarios' timeline pictures, drawn ahead of the report's sections by worker processes.

Each picture (two SQLite exports loaded, drawn and saved as a PNG) takes seconds and nothing
else in the report needs it, so :class:`Timelines` has a pool of worker processes (one per CPU,
at most one per picture) draw them side by side while the report builds its other sections;
each scenario's section then takes its picture (:meth:`Timelines.picture`). Every picture comes
from :func:`draw`, in a worker or here alike, so the report is the same either way.

- One worker (one CPU, or one picture): no process is started; each picture is drawn in its
  section, in this process, as before. The same where no worker can be started.
- A picture that fails raises in its section as if drawn here (the section's error note names
  the exception and the function it came from); a worker that dies (killed, crashed) fails the
  picture it was drawing, with :class:`WorkerDied`, and the others are drawn on.
- Leaving the ``with`` block ends the workers; after an exception (Ctrl-C: KeyboardInterrupt)
  it stops them at once. Ctrl-C reaches the workers too and ends them on the spot, quietly.
- A worker is a fresh interpreter (``python -c``, never a fork of this process, which may hold
  torch and matplotlib state) that imports what drawing needs: pandas, matplotlib, sqlite3 and
  this package, not torch. Jobs and pictures travel as pickles over two pipes, so nothing the
  drawing code prints can get in their way.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import struct
import subprocess
import sys
import traceback
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from types import TracebackType
from typing import Any

from harness.core.config import usable_cores
from harness.report.fmt import RemoteError
from harness.report.load import warn

__all__ = ["Job", "Picture", "Timelines", "WorkerDied", "draw"]

#: How long a worker told to stop (SIGTERM) gets before it is killed.
_STOP_S = 2.0


@dataclass(frozen=True)
class Job:
    """One scenario's timeline: its baseline's export above its fastest fix's (``fix`` None:
    the baseline alone, ``why`` says why); ``steps`` steady-state steps each."""

    scen: str
    base: Path
    fix: Path | None
    fix_name: str
    why: str
    steps: int
    speedup: str = ""
    """The fix's measured speedup as the report's tables write it (runs.csv), for its panel."""


@dataclass(frozen=True)
class Picture:
    """What the report shows: :meth:`harness.report.doc.Doc.image`'s arguments."""

    name: str
    png: bytes
    alt: str
    caption: str


@dataclass(frozen=True)
class _Failed:
    """A worker's exception, as its section's note names it."""

    type_name: str
    message: str
    where: str


class WorkerDied(RuntimeError):
    """The process drawing a picture ended without one (killed, crashed)."""


def draw(job: Job) -> Picture:
    """Load, draw and save one scenario's timeline (the same here and in a worker)."""
    from analysis.plots.timeline import load_timeline, plot_pair, plot_timeline
    from harness.report.doc import fig_png
    from harness.report.fmt import figure_context

    figure_context()
    scen, steps, fix_name = job.scen, job.steps, job.fix_name
    b = load_timeline(job.base, steps=steps)
    if job.fix is None:
        fig = plot_timeline(b, title=f"{scen} · baseline")
        caption = f"baseline: {b.describe()}. {job.why}. {_HOW}"
        return Picture(f"timeline_{scen}", fig_png(fig), f"{scen} timeline, baseline", caption)
    f = load_timeline(job.fix, steps=steps)
    zoom = f.span_ms > 0 and b.span_ms / f.span_ms >= 4
    note = f"{fix_name}: {job.speedup} faster (runs.csv, unprofiled)" if job.speedup else ""
    fig = plot_pair(b, f, labels=("baseline", fix_name), zoom=zoom, note=note,
                    title=f"{scen}: baseline above {fix_name}")  # fmt: skip
    caption = (
        f"{len(b.step_indices) or steps} steady-state steps from the middle of each measured "
        f"window, drawn from the SQLite exports; {fix_name} is the fastest fix with an export"
        + (f" ({job.speedup} in the tables)" if job.speedup else "")
        + ", on the baseline's time scale"
        + (" and again zoomed" if zoom else "")
        + f". baseline: {b.describe()}; {fix_name}: {f.describe()}. {_HOW}"
    )
    return Picture(f"timeline_{scen}", fig_png(fig), f"{scen} timeline: baseline above "
                   f"{fix_name}", caption)  # fmt: skip


#: How to read a timeline (every caption ends with it).
_HOW = (
    "Rows: NVTX ranges per host thread and its CUDA API calls over the shown steps, then the "
    "GPU work those steps launched, per stream, where it ran (the host runs ahead of the GPU: "
    "the GPU rows start at the end of the previous step's work); calls and GPU work are drawn "
    "per pixel, as tall as the share of the pixel's time they were busy; hatched red: the GPU "
    "idle, the rest of the row that holds all its streams."
)


# --- the workers ---------------------------------------------------------------------------------

_HEADER = struct.Struct("!Q")

#: A worker: ``python -c _WORKER ROOT JOB_FD RESULT_FD``. Ctrl-C ends it at once and quietly,
#: with no traceback (the report, told too, stops the others), unless this process ignores it
#: (a background job without job control): then so does the worker, which inherits that.
_WORKER = (
    "import signal, sys\n"
    "if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:\n"
    "    signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from harness.report.timelines import serve\n"
    "serve(*map(int, sys.argv[2:]))\n"
)


def _send(fd: int, obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, n: int) -> bytes:
    parts, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError(f"{n - left} of {n} bytes")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _receive(fd: int) -> Any:
    (n,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size))
    return pickle.loads(_read_exactly(fd, n))


#: What a worker sends once it has imported what drawing needs, before its first picture.
_READY = "ready"


def serve(job_fd: int, result_fd: int) -> None:
    """A worker's loop: draw each :class:`Job` read from ``job_fd`` and send back its
    :class:`Picture` (or its failure) on ``result_fd``, until ``job_fd`` ends."""
    for name in ("analysis.plots.timeline", "harness.report.doc"):  # what draw() imports
        importlib.import_module(name)
    try:
        _send(result_fd, _READY)
        while True:
            try:
                job = _receive(job_fd)
            except EOFError:  # the report has no more, or has ended
                return
            try:
                res: Picture | _Failed = draw(job)
            except Exception as exc:
                where = traceback.extract_tb(exc.__traceback__)[-1].name
                res = _Failed(type(exc).__name__, str(exc), where)
            _send(result_fd, res)
    except BrokenPipeError:  # the report stopped waiting
        return


class _Worker:
    """One worker process, its pipes and the job it draws (None: idle)."""

    def __init__(self) -> None:
        job_r, job_w = os.pipe()
        self.result_r, result_w = os.pipe()
        root = str(Path(__file__).resolve().parents[2])  # the folder holding harness/
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER, root, str(job_r), str(result_w)],
                pass_fds=(job_r, result_w),
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            os.close(job_w)
            os.close(self.result_r)
            raise
        finally:
            os.close(job_r)
            os.close(result_w)
        self.job_w = job_w
        self.job: Job | None = None
        self.ready = False  # it has imported what it needs (a worker that fails before: none will)

    def give(self, job: Job) -> bool:
        """Hand ``job`` to the worker; False when it has ended (it is not given)."""
        try:
            _send(self.job_w, job)
        except OSError:  # BrokenPipeError: it died while idle
            return False
        self.job = job
        return True

    def read(self) -> Picture | _Failed | BaseException | None:
        """What the worker sent (its result pipe is readable): a picture or a failure, None for
        :data:`_READY`, an exception when it died (or sent what cannot be read)."""
        try:
            msg = _receive(self.result_r)
        except (EOFError, OSError):
            return WorkerDied(
                f"the process drawing the {self.job.scen if self.job else '?'} timeline ended "
                f"without it ({_describe(self._wait(_STOP_S))})"
            )
        except Exception as exc:
            return exc
        if msg == _READY:
            self.ready = True
            return None
        return msg  # type: ignore[no-any-return]

    def _wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self, *, stop: bool) -> None:
        """End the worker: ``stop`` at once (SIGTERM), else once it has read every job."""
        if stop and self.proc.poll() is None:
            self.proc.terminate()
        fds, self.job_w, self.result_r = (self.job_w, self.result_r), -1, -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)

    def reap(self) -> None:
        if self._wait(_STOP_S) is None:
            self.proc.kill()
            self._wait(_STOP_S)


def _describe(code: int | None) -> str:
    if code is None:
        return "it did not end"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Timelines:
    """The pictures of ``jobs``, drawn by up to ``workers`` processes (default: one per CPU, at
    most one per picture) while the report goes on. Use as a context manager, and :meth:`poll`
    now and then so that an idle worker gets the next picture."""

    def __init__(self, jobs: list[Job], workers: int | None = None) -> None:
        self._todo: deque[Job] = deque(dict.fromkeys(jobs))
        self._jobs = set(self._todo)
        n = workers if workers is not None else usable_cores()
        self.workers = max(1, min(n, len(self._jobs)))
        # One worker, or none to be had: each picture is drawn in its section, as before.
        self._pool = self.workers > 1 and os.name == "posix" and bool(sys.executable)
        self._live: list[_Worker] = []
        self._done: dict[Job, Picture | _Failed | BaseException] = {}

    def __enter__(self) -> Timelines:
        try:
            self.poll()
        except BaseException:  # Ctrl-C while the workers start: __exit__ is not called
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(stop=exc_type is not None)

    def _dispatch(self) -> None:
        """Hand the next pictures to idle workers, starting workers up to :attr:`workers`."""
        for w in list(self._live):
            if self._pool and w.job is None and self._todo:
                if w.give(self._todo[0]):
                    self._todo.popleft()
                else:
                    self._drop(w)
        while self._pool and self._todo and len(self._live) < self.workers:
            try:
                w = _Worker()
            except Exception as exc:
                self._no_pool(f"{type(exc).__name__}: {exc}")
                return
            self._live.append(w)
            if w.give(self._todo[0]):
                self._todo.popleft()
            else:
                self._drop(w)
                self._no_pool(f"a worker ended at once ({_describe(w.proc.returncode)})")

    def _no_pool(self, why: str) -> None:
        """No worker can be had here: the sections draw their own pictures from now on."""
        if self._pool:
            warn(f"the timelines are drawn one by one, in this process: {why}")
        self._pool = False

    def _drop(self, w: _Worker) -> None:
        self._live.remove(w)
        w.close(stop=True)
        w.reap()

    def poll(self, timeout: float | None = 0) -> None:
        """Take what the workers sent (waiting up to ``timeout`` s for one; None: until one
        sends) and hand out the next pictures."""
        self._dispatch()
        busy = {w.result_r: w for w in self._live if w.job is not None or not w.ready}
        if not busy:
            return
        for fd in wait(list(busy), timeout):
            w = busy[fd]  # type: ignore[index]
            job, out = w.job, w.read()
            if out is None:  # ready
                continue
            if isinstance(out, WorkerDied) and not w.ready:
                # It never got as far as drawing: drawn here (its section), as any to come.
                self._drop(w)
                self._no_pool(str(out).replace(" without it", " before drawing"))
                continue
            if job is not None:
                self._done[job] = out
            w.job = None
            if not isinstance(out, Picture | _Failed):  # it died, or sent garbage
                self._drop(w)
        self._dispatch()

    def _pending(self, job: Job) -> bool:
        """A worker draws ``job``, or will."""
        return any(w.job == job for w in self._live) or (self._pool and job in self._todo)

    def picture(self, job: Job) -> Picture:
        """``job``'s picture: the worker's (waiting for it), or drawn here where no worker was
        to draw it; a worker's failure raises here."""
        if job in self._jobs:
            while job not in self._done and self._pending(job):
                self.poll(None)
            if job in self._done:
                self._jobs.discard(job)  # asked for again: drawn here, as before
                out = self._done.pop(job)
                if isinstance(out, _Failed):
                    raise RemoteError(out.type_name, out.message, out.where)
                if isinstance(out, BaseException):
                    raise out
                return out
        return draw(job)

    def close(self, *, stop: bool = True) -> None:
        """End the workers: ``stop`` those still drawing at once (SIGTERM, then SIGKILL), else
        let them finish reading (each ends at the end of its job pipe)."""
        self._todo.clear()
        live, self._live = self._live, []
        for w in live:
            w.close(stop=stop or w.job is not None)
        for w in live:
            w.reap()
