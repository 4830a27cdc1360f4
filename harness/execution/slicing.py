"""The parent's side of a sliced round: the variants of one timing round take turns, ABBA.

Why: the lent host's speed switches between two modes about 1.9x apart within seconds, so a
ratio of two windows timed one after the other (seconds each) measures whatever mix of modes
each window met. Here the round's processes (one per variant, each its own process, each set
up once) are all live and held, and they take turns in slices of about ``slice_s`` (whole
steps, whole periods of a variant's periodic work: ``Workload.period_steps``), in the order
``A B C C B A`` repeated, so that every pair of variants meets the same moments of the host.
While one runs, every other one's process group is stopped (SIGSTOP): its loader workers and
helper threads do no work beside the slice, and none of its GPU work is in flight (each slice
ends synchronised). The parent never touches CUDA.

A round (:meth:`SlicedRounds.run_group`):

1. each worker warms up alone, in turn, and says its steady step time and the steps a
   back-to-back window would measure (``harness.max_window_s`` applies as before);
2. :func:`plan_turns` chooses the cycles and each variant's steps per slice, so that each
   variant measures about as many steps as its back-to-back window would have;
3. the cycles run; a worker that fails leaves the rotation and the others go on;
4. each worker, in turn, takes its host probe after the window; then all write their results.

:mod:`harness.execution.turns` is the worker's side, :mod:`harness.execution.gate` the
protocol.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from harness.core import runfolder as rf
from harness.core.runfolder import Unit
from harness.execution.gate import Channel, GateClosed, GateListener
from harness.execution.runloop import Live

__all__ = ["Freezer", "SlicedRounds", "TurnPlan", "plan_turns", "turn_order"]


# -- the plan of a round's turns --------------------------------------------------------------


@dataclass(frozen=True)
class TurnPlan:
    """How a round's turns go: ``cycles`` times through ``turn_order``, each variant's slices
    ``slices[variant]`` steps long in the order it runs them (two a cycle)."""

    cycles: int
    slices: dict[str, list[int]]
    est_step_s: dict[str, float]

    def steps(self, variant: str) -> int:
        """A typical slice of ``variant`` (its longest), in steps."""
        return max(self.slices[variant])

    def slice_s(self, variant: str) -> float:
        """The planned length of one of ``variant``'s slices (seconds)."""
        return self.steps(variant) * self.est_step_s[variant]

    def record(self, variant: str) -> dict[str, Any]:
        """What a worker records of the plan (result.json's ``slices.plan``)."""
        return {"cycles": self.cycles, "slice_steps": self.steps(variant),
                "slice_s": self.slice_s(variant)}  # fmt: skip


def _split(total: int, cycles: int, period: int) -> list[int]:
    """``total`` steps as ``2 * cycles`` slices of whole periods, at least one each: as equal
    as they can be, the longer ones first in each half so that a cycle's two slices of a
    variant stay alike (``total`` rounds up to whole periods, and to one period a slice)."""
    periods = max(2 * cycles, -(-total // period))
    base, extra = divmod(periods, 2 * cycles)
    out = [base + (1 if i < extra else 0) for i in range(2 * cycles)]
    order = [out[i // 2] if i % 2 == 0 else out[cycles + i // 2] for i in range(2 * cycles)]
    return [n * period for n in order]


def plan_turns(
    est_step_s: dict[str, float],
    window_steps: dict[str, int],
    period_steps: dict[str, int],
    slice_s: float,
) -> TurnPlan:
    """The cycles and each variant's slices: about ``slice_s`` of whole steps where the step
    allows (a step longer than that is a slice of one period), each variant measuring its
    ``window_steps`` in all (rounded up to whole periods, and to a period a slice). The
    cycles are the median of what each variant's window and slice ask for, at most what the
    shortest window allows (two slices of one period per cycle)."""
    names = list(est_step_s)
    if not names:
        raise ValueError("a sliced round needs at least one variant")
    periods = {v: max(1, int(period_steps.get(v, 1))) for v in names}
    wants = []
    for v in names:
        per_slice = max(1, round(slice_s / max(est_step_s[v], 1e-9) / periods[v])) * periods[v]
        wants.append(window_steps[v] / (2 * per_slice))
    most = max(1, min(window_steps[v] // (2 * periods[v]) for v in names))
    cycles = min(most, max(1, round(median(wants))))
    slices = {v: _split(window_steps[v], cycles, periods[v]) for v in names}
    return TurnPlan(cycles=cycles, slices=slices, est_step_s=dict(est_step_s))


def turn_order(variants: list[str]) -> list[str]:
    """One cycle: forward, then backward (``A B C C B A``), so that within a cycle every
    variant's slices sit at the same mean time, and a drift within the cycle cancels in every
    pair's ratio."""
    return list(variants) + list(reversed(variants))


# -- stopping the groups that wait for their turn ---------------------------------------------

#: The watchdog's program: it reads ``+pgid`` / ``-pgid`` lines, and when its input ends (the
#: harness closed it, or died) it continues every group still listed, so that no worker is left
#: stopped forever by a harness killed in the middle of a round.
_WATCHDOG = """
import os, signal, sys
groups = set()
for line in sys.stdin:
    line = line.strip()
    if line[:1] in "+-" and line[1:].isdigit():
        (groups.add if line[0] == "+" else groups.discard)(int(line[1:]))
for g in groups:
    try:
        os.killpg(g, signal.SIGCONT)
    except OSError:
        pass
"""


class Freezer:
    """Stops and continues workers' process groups (SIGSTOP, SIGCONT), with a watchdog that
    continues them should the harness die."""

    def __init__(self) -> None:
        self._dog: subprocess.Popen[bytes] | None = None
        self.stopped: set[int] = set()

    def _tell(self, line: str) -> None:
        if self._dog is None:
            self._dog = subprocess.Popen(
                [sys.executable, "-c", _WATCHDOG], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        assert self._dog.stdin is not None
        with contextlib.suppress(OSError, ValueError):  # a watchdog gone: nothing to tell
            self._dog.stdin.write(f"{line}\n".encode())
            self._dog.stdin.flush()

    def pause(self, pgid: int) -> None:
        """Stop the group (until :meth:`resume`)."""
        if pgid not in self.stopped:
            self._tell(f"+{pgid}")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGSTOP)
        self.stopped.add(pgid)

    def resume(self, pgid: int) -> None:
        """Continue the group."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGCONT)
        if pgid in self.stopped:
            self.stopped.discard(pgid)
            self._tell(f"-{pgid}")

    def resume_all(self) -> None:
        for pgid in list(self.stopped):
            self.resume(pgid)

    def close(self) -> None:
        """Continue every group still stopped, and end the watchdog."""
        self.resume_all()
        if self._dog is not None:
            with contextlib.suppress(OSError, ValueError):
                assert self._dog.stdin is not None
                self._dog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._dog.wait(timeout=5)
            self._dog = None


# -- the rounds -------------------------------------------------------------------------------


class _NoAnswer(GateClosed):
    """A worker that did not answer within its unit's time limit (hung)."""


@dataclass
class _Member:
    live: Live
    chan: Channel
    pgid: int
    alive: bool = True
    answers: list[dict[str, Any]] = field(default_factory=list)
    busy_s: float = 0.0
    """Seconds of the round spent in its own turns (the rest it waited for the others')."""

    @property
    def variant(self) -> str:
        return self.live.unit.variant


class SlicedRounds:
    """Sliced timing rounds for the run loop (:class:`harness.execution.runloop.Turns`):
    which units are a round's processes, the turn gate they connect to, and their turns."""

    def __init__(
        self,
        slice_s: float,
        sliced: Callable[[Unit], bool],
        tick: Callable[[list[Live], bool], None] | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.slice_s = slice_s
        self.sliced = sliced
        """Whether a unit is timed in a sliced round (a single-process timing unit)."""
        self.tick = tick
        self.say = say or (lambda _msg: None)
        self.gate = GateListener()
        self.freezer = Freezer()
        self._waiting: dict[str, tuple[int, Channel]] = {}
        self.plans: dict[Hashable, TurnPlan] = {}
        """Each round's plan, by its group, as it ran."""

    @property
    def path(self) -> str:
        """The gate's socket (a worker's ``WorkerSpec.turn_gate``)."""
        return self.gate.path

    def group_of(self, unit: Unit) -> Hashable | None:
        return (unit.scenario, unit.phase) if self.sliced(unit) else None

    def attach(self, live: list[Live]) -> None:
        for out_dir, pid, chan in self.gate.accept():
            self._waiting[os.path.realpath(out_dir)] = (pid, chan)
        for item in live:
            if item.group is None or item.channel is not None:
                continue
            found = self._waiting.pop(os.path.realpath(item.out_dir), None)
            if found is not None:
                item.channel = found[1]
                self.freezer.pause(_pgid(item))  # nothing of it runs until its turn

    def close(self) -> None:
        self.freezer.close()
        for _pid, chan in self._waiting.values():
            chan.close()
        self._waiting.clear()
        self.gate.close()

    def run_group(self, members: list[Live]) -> None:
        ms = [_Member(x, x.channel, _pgid(x)) for x in members]
        current: list[_Member | None] = [None]
        t0 = time.monotonic()
        try:
            plan = self._warm_ups(ms, current)
            if plan is not None:
                self.plans[members[0].group] = plan
                self._cycles(ms, plan, current)
            self._ends(ms, current)
        finally:
            self.freezer.resume_all()
            waited = time.monotonic() - t0
            for m in ms:
                m.chan.close()
                # the others' turns are waiting, not its own time: not against its time limit
                m.live.held_s += max(0.0, waited - m.busy_s)

    # -- the parts of a round ---------------------------------------------------------------
    def _turn(self, m: _Member, message: dict[str, Any], current: list[_Member | None]) -> bool:
        """Hand the turn to ``m`` (the one running before it stopped), send it ``message``
        and wait for its answer; False (and ``m`` out of the rotation) when it failed."""
        if current[0] is not m:
            if current[0] is not None and current[0].alive:
                self.freezer.pause(current[0].pgid)
            self.freezer.resume(m.pgid)
            current[0] = m
        t0 = time.monotonic()
        hung = False
        try:
            m.chan.send(message)
            answer = self._answer(m)
        except _NoAnswer as exc:
            self.say(f"{m.live.label}: left its sliced round ({exc})")
            answer, hung = None, True
        except (GateClosed, ValueError) as exc:  # it failed: its socket closed as it left
            self.say(f"{m.live.label}: left its sliced round ({exc})")
            answer = None
        m.busy_s += time.monotonic() - t0
        if answer is None or not answer.get("ok"):
            m.alive = False
            if hung:  # nothing of it runs beside the others' turns; its time limit ends it
                self.freezer.pause(m.pgid)
            current[0] = None
            return False
        m.answers.append(answer)
        return True

    def _answer(self, m: _Member) -> dict[str, Any] | None:
        """Its answer, waiting at most its unit's time limit; None when its process ended."""
        t0 = time.monotonic()
        while True:
            answer = m.chan.recv(1.0)
            if answer is not None:
                return answer
            if m.live.proc.poll() is not None:
                return None
            if time.monotonic() - t0 > m.live.timeout_s:
                raise _NoAnswer(f"no answer within {m.live.timeout_s:g} s")
            if self.tick is not None:
                self.tick([m.live], True)

    def _warm_ups(self, ms: list[_Member], current: list[_Member | None]) -> TurnPlan | None:
        """Each warms up alone, in turn; the plan of the round's turns from what they said."""
        for m in ms:
            self._turn(m, {"op": "warmup"}, current)
        ok = [m for m in ms if m.alive]
        if not ok:
            return None
        est = {m.variant: float(m.answers[-1]["est_step_s"]) for m in ok}
        window = {m.variant: int(m.answers[-1]["window_steps"]) for m in ok}
        period = {m.variant: int(m.answers[-1].get("period_steps") or 1) for m in ok}
        return plan_turns(est, window, period, self.slice_s)

    def _cycles(self, ms: list[_Member], plan: TurnPlan, current: list[_Member | None]) -> None:
        done = {m.variant: 0 for m in ms}
        for _cycle in range(plan.cycles):
            for m in [x for v in turn_order([x.variant for x in ms]) for x in ms
                      if x.variant == v]:  # fmt: skip
                if not m.alive:
                    continue
                i = done[m.variant]
                message: dict[str, Any] = {"op": "slice", "steps": plan.slices[m.variant][i]}
                if i == 0:
                    message["plan"] = plan.record(m.variant)
                done[m.variant] += 1
                self._turn(m, message, current)
            if self.tick is not None:
                self.tick([m.live for m in ms], True)

    def _ends(self, ms: list[_Member], current: list[_Member | None]) -> None:
        """Each takes its host probe after the window alone, in turn; then every one goes on
        to write its result and leave."""
        for m in ms:
            if m.alive:
                self._turn(m, {"op": "end"}, current)


def _pgid(item: Live) -> int:
    """A worker's process group: it leads a session of its own (forked or spawned)."""
    return int(item.proc.pid)


def is_sliced_timing(unit: Unit, world_size: int) -> bool:
    """A unit timed in a sliced round: a timing round of a single-process scenario."""
    return rf.is_timing(unit.phase) and world_size <= 1
