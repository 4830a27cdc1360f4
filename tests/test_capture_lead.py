"""nsys.capture_lead_steps: on a GPU a profiled worker runs its lead steps inside the capture
range, before its measured window, so nsys's slow first captured steps are not measured; a
timing worker, and any worker on the CPU (whose capture range is the window's NVTX range
itself), runs none."""

from __future__ import annotations

import json

from harness.core.runfolder import Unit


def _lead(tmp_path, device: str, phase: str, *overrides: str) -> int:
    from harness.core.config import compose
    from harness.execution.settings import Settings

    raw, cfg = compose(["+scenario=forced_sync", *overrides])
    settings = Settings(cfg, raw)
    settings.device = device
    out = tmp_path / f"{device}-{phase}-{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    spec = settings.spec(Unit("forced_sync", "baseline", phase), out, forked=True)
    return json.loads(spec.read_text())["capture_lead_steps"]


def test_only_gpu_profiles_lead_their_window(tmp_path) -> None:
    assert _lead(tmp_path, "cuda", "profile") == 2
    assert _lead(tmp_path, "cuda", "timing-1") == 0
    assert _lead(tmp_path, "cpu", "profile") == 0


def test_the_lead_is_a_setting(tmp_path) -> None:
    assert _lead(tmp_path, "cuda", "profile", "nsys.capture_lead_steps=0") == 0
    assert _lead(tmp_path, "cuda", "profile", "nsys.capture_lead_steps=5") == 5
