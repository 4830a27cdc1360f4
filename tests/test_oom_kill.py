"""A worker the kernel's OOM killer ends (SIGKILL while the OOM-kill count rises) is recorded
``oom``, in one line naming host memory and the size; any other SIGKILL stays ``failed``. The
worker is a real process killed for real; only the count is a file the test writes
(``BOTTLENECK_OOM_COUNTERS``), since no test may make the host run out of memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.core import hostmem
from harness.core.hostmem import OomWatch
from harness.core.runfolder import Status, Unit
from harness.execution.execute import Outcome, ended
from harness.execution.runloop import Live
from harness.execution.worker import _is_oom

UNIT = Unit("forced_sync", "baseline", "timing-1")


@pytest.fixture
def counter(tmp_path, monkeypatch) -> Path:
    """A stand-in for /proc/vmstat (in its format) and a cgroup's memory.events beside it."""
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("pgfault 123\noom_kill 5\nnr_free_pages 9\n")
    events = tmp_path / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    monkeypatch.setenv(hostmem.OOM_COUNTERS_ENV, f"{vmstat}{os.pathsep}{events}")
    return vmstat


def _sleeper(out_dir: Path) -> subprocess.Popen[bytes]:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "stderr.log", "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"],
            stderr=err,
            start_new_session=True,
        )


def _killed_outcome(tmp_path: Path, rise: bool, counter: Path) -> Outcome:
    """A real worker process, watched from its launch, SIGKILLed (after the count rose, where
    ``rise``); how the run loop judges its end."""
    out_dir = tmp_path / "unit"
    watch = OomWatch.start("size=full")
    proc = _sleeper(out_dir)
    live = Live(UNIT, proc, out_dir, 600.0, gated=False, oom_watch=watch)
    try:
        assert live.poll() is None
        if rise:
            counter.write_text("pgfault 130\noom_kill 6\nnr_free_pages 9\n")
        os.kill(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while (outcome := live.poll()) is None:
            assert time.monotonic() < deadline, "the killed process never ended"
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert outcome.returncode == -signal.SIGKILL
    return outcome


def test_sigkill_while_the_oom_count_rises_is_oom(tmp_path, counter):
    outcome = _killed_outcome(tmp_path, rise=True, counter=counter)
    assert outcome.status == Status.OOM
    assert "\n" not in outcome.error
    assert outcome.error.startswith(f"{UNIT.label} ran out of host memory after ")
    assert "OOM killer" in outcome.error and "5 -> 6" in outcome.error
    assert "at size=full" in outcome.error
    known = hostmem.HostMemory.now()
    if known.total is not None:
        assert "of host memory" in outcome.error


def test_sigkill_without_a_rise_is_failed(tmp_path, counter):
    outcome = _killed_outcome(tmp_path, rise=False, counter=counter)
    assert outcome.status == Status.FAILED
    assert "exited with code -9" in outcome.error
    assert "OOM" not in outcome.error


def test_cgroup_count_alone_counts(tmp_path, counter):
    """The host's count unchanged, the cgroup's risen (its own limit ran out): oom."""
    watch = OomWatch.start("size=smoke")
    events = tmp_path / "memory.events"
    events.write_text(events.read_text().replace("oom_kill 0", "oom_kill 1"))
    outcome = ended(137, 3.0, tmp_path, UNIT.label, None, watch)
    assert outcome.status == Status.OOM
    assert "0 -> 1" in outcome.error and "at size=smoke" in outcome.error


def test_other_exit_codes_are_not_oom_whatever_the_count(tmp_path, counter):
    watch = OomWatch.start("size=full")
    counter.write_text("oom_kill 7\n")
    for rc in (1, -signal.SIGSEGV, -signal.SIGTERM):
        assert ended(rc, 1.0, tmp_path, UNIT.label, None, watch).status == Status.FAILED


def test_unreadable_counters_claim_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(hostmem.OOM_COUNTERS_ENV, str(tmp_path / "missing"))
    watch = OomWatch.start("size=full")
    assert watch.before == (None,)
    assert ended(-9, 1.0, tmp_path, UNIT.label, None, watch).status == Status.FAILED


def test_default_counters_read_proc_vmstat(monkeypatch):
    monkeypatch.delenv(hostmem.OOM_COUNTERS_ENV, raising=False)
    if not Path("/proc/vmstat").is_file():
        pytest.skip("no /proc/vmstat here")
    files = hostmem.counter_files()
    assert files[0] == Path("/proc/vmstat")
    counts = hostmem.oom_kills()
    assert isinstance(counts[0], int) and counts[0] >= 0


def test_meminfo_reads_total_and_available(tmp_path, monkeypatch):
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       131072000 kB\nMemFree: 1 kB\nMemAvailable:   65536000 kB\n")
    monkeypatch.setenv(hostmem.MEMINFO_ENV, str(info))
    mem = hostmem.HostMemory.now()
    assert mem.total == 131072000 * 1024
    assert mem.available is not None and mem.available <= 65536000 * 1024
    assert mem.said().startswith("125 GiB of host memory")


def test_cuda_out_of_memory_is_oom():
    """torch's CUDA OutOfMemoryError, CUDA's out-of-memory as a plain RuntimeError (cuBLAS),
    and one wrapped by another error (torch.compile's) all give the worker's oom exit."""
    torch = pytest.importorskip("torch")
    assert _is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8 GiB"))
    assert _is_oom(RuntimeError("CUDA error: out of memory"))
    assert _is_oom(RuntimeError("CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))
    try:
        try:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        except RuntimeError as inner:
            raise ValueError("the backend failed") from inner
    except ValueError as outer:
        assert _is_oom(outer)
    assert not _is_oom(RuntimeError("shape mismatch"))
    assert not _is_oom(ValueError("out of range"))


#: What torch printed on the H200 when CUDA's context could not be made for want of memory
#: (scripts/device/oom-check.sh): the line that says so comes first, the advice after it.
H200_CONTEXT_OOM = (
    "CUDA error: out of memory\n"
    "Search for `cudaErrorMemoryAllocation' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
    "group__CUDART__TYPES.html for more information.\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


def test_the_oom_line_is_the_one_that_says_so_and_the_advice_names_the_gpu():
    """The worker quotes the line that says memory ran out, not the message's last line (on
    the H200 it read "Compile with `TORCH_USE_CUDA_DSA`..."), and the parent's advice names the
    GPU's memory for a CUDA error and the host's cap otherwise."""
    from harness.execution.execute import _oom_advice
    from harness.execution.worker import oom_line

    said = oom_line(RuntimeError(H200_CONTEXT_OOM))
    assert said == "CUDA error: out of memory"
    assert oom_line(MemoryError()) == ""
    assert oom_line(RuntimeError("no such line\nsecond")) == "no such line"
    gpu = _oom_advice(f"AcceleratorError: {said}", None)
    assert "GPU's memory" in gpu and "memory_cap_gb" not in gpu
    assert "memory_cap_gb=6.0 GiB" in _oom_advice("MemoryError: ", 6.0)
    assert "null sets no cap" in _oom_advice("MemoryError: ", None)
