"""Machine facts from nvidia-smi's output: whether the GPU takes several CUDA processes."""

from __future__ import annotations

from harness.core.envinfo import parse_gpus


def test_a_default_compute_mode_lets_workers_overlap():
    info = parse_gpus("NVIDIA H100 80GB HBM3, 580.159.04, 81559, Default\n")
    assert info.names == ["NVIDIA H100 80GB HBM3"] and info.memory_mib == [81559]
    assert info.slug == "h100" and info.shared


def test_an_exclusive_gpu_takes_one_process_at_a_time():
    text = "NVIDIA H200, 580.1, 143771, Default\nNVIDIA H200, 580.1, 143771, Exclusive_Process\n"
    info = parse_gpus(text)
    assert info.slug == "h200x2" and info.compute_modes == ["Default", "Exclusive_Process"]
    assert not info.shared


def test_no_gpu_and_an_unreported_mode():
    assert parse_gpus("").names == [] and parse_gpus("").shared
    assert parse_gpus("NVIDIA A100, 550.1, 40960\n").compute_modes == ["Default"]
