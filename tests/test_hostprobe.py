"""Host-speed probes (harness.execution.hostprobe): the launch-rate and Python-loop probes run
for real on the CPU (small sizes), result.json's ``host_probe`` shape, and the table columns
built from it (timings.csv's per-worker columns, runs.csv's median over rounds)."""

from __future__ import annotations

import statistics

import pytest
import torch

from harness.execution import hostprobe as hp


def test_the_probes_run_on_the_cpu_and_take_time():
    device = torch.device("cpu")
    us = hp.launch_probe(torch, device, 200)
    ms = hp.python_probe(20_000)
    assert 0 < us < 10_000  # a dispatch of add_ on one element: microseconds, not seconds
    assert 0 < ms < 10_000
    # more iterations take longer: the loop is not a constant (a C fast path or cut short)
    assert hp.python_probe(400_000) > hp.python_probe(20_000)
    probe = hp.host_probe(torch, device, 100, 10_000)
    assert list(probe) == list(hp.PROBE_KEYS)
    assert all(isinstance(v, float) and v > 0 for v in probe.values())


def test_a_slice_probe_times_the_loop_the_copy_and_a_helper_core():
    import os

    allowed = os.sched_getaffinity(0)
    cpu = min(allowed)
    probe = hp.SliceProbe(cpu, lambda: hp.launch_probe(torch, torch.device("cpu"), 50))()
    assert list(probe) == list(hp.SLICE_PROBE_KEYS)
    assert all(isinstance(v, float) and 0 < v < 10_000 for v in probe.values())
    assert os.sched_getaffinity(0) == allowed  # only the probe's own thread was pinned
    assert list(hp.SliceProbe()()) == ["python_ms", "copy_ms"]  # nothing pinned, no device


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: hp.launch_probe(torch, torch.device("cpu"), 0), "at least one launch"),
        (lambda: hp.python_probe(0), "at least one iteration"),
    ],
)
def test_a_probe_of_nothing_is_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_record_has_the_shape_readers_rely_on():
    before, after = {"launch_us": 10.1, "python_ms": 61.0}, {"launch_us": 7.2, "python_ms": 44.0}
    record = hp.probe_record(before, after)
    assert record == {"before": before, "after": after}
    assert hp.probe_record(None, None) is None  # probes off
    assert hp.probe_value(record, "after", "launch_us") == 7.2
    assert hp.probe_value(None, "before", "launch_us") is None
    assert hp.probe_value({"before": None, "after": after}, "before", "python_ms") is None


def _result(before: tuple[float, float] | None, after: tuple[float, float] | None) -> dict:
    def part(v: tuple[float, float] | None) -> dict | None:
        return None if v is None else {"launch_us": v[0], "python_ms": v[1]}

    return {"host_probe": hp.probe_record(part(before), part(after))}


def test_timing_columns_and_the_median_over_rounds():
    res = _result((10.0, 60.0), (8.0, 50.0))
    assert hp.timing_columns(res) == {
        "probe_launch_us_before": 10.0,
        "probe_launch_us_after": 8.0,
        "probe_python_ms_before": 60.0,
        "probe_python_ms_after": 50.0,
    }
    assert set(hp.timing_columns({})) == set(hp.TIMING_COLUMNS)
    assert all(v is None for v in hp.timing_columns({"host_probe": None}).values())
    assert hp.process_probe(res, "launch_us") == 9.0  # the mean of before and after
    assert hp.process_probe(_result(None, (8.0, 50.0)), "python_ms") == 50.0  # one side only
    assert hp.process_probe({}, "launch_us") is None
    rounds = [_result((10.0, 60.0), (8.0, 50.0)), _result((20.0, 90.0), (30.0, 110.0)),
              _result((6.0, 40.0), (7.0, 42.0)), {}]  # fmt: skip
    means = [9.0, 25.0, 6.5]  # the rounds with probes; the fourth has none
    assert hp.median_probe(rounds, "launch_us") == statistics.median(means)
    assert hp.median_probe(rounds[:2], "python_ms") == statistics.median([55.0, 100.0])
    assert hp.median_probe([{}], "launch_us") is None
