"""Test-only scenario: gil_contention's decoy, a second Python thread that does not contend.

The same training loop as ``scenarios.gil_contention`` (its ``ideal``), with a log-shipping
thread beside it: every step the loop appends a JSON line of host values to a log, and the
shipper wakes every 20 ms, reads what was appended, compresses it with zlib and writes it to a
spool folder, then sleeps. Sleeping, file I/O and zlib all release the GIL, so the training
thread hardly waits for it. Used only to capture the decoy fixture of
``tests/test_gil_contention.py`` (``BOTTLENECK_SCENARIO_MODULES=tests.plugins.gil_decoy``); its
``baseline`` is the decoy, not a bottleneck, whatever the contract calls it.
"""

from __future__ import annotations

from scenarios import Scenario, Severity, Teaching, Variant
from scenarios.gil_contention import GilConfig


class GilDecoyConfig(GilConfig):
    """gil_contention's schema under another name."""


SCENARIO = Scenario(
    name="gil_decoy",
    bottleneck="gil_contention",
    title="Decoy: a log-shipping thread that sleeps and does I/O (releases the GIL)",
    variants=(
        Variant(name="baseline", kind="baseline", summary="loop + log-shipping thread (decoy)"),
        Variant(name="no_shipper", kind="fix", summary="the log written, no shipper thread"),
        Variant(name="ideal", kind="ideal", summary="no log at all"),
    ),
    severity=Severity(
        meaning="unused (the decoy has no knob)", unit="1", low=1, high=256, why_default="unused"
    ),
    teaching=Teaching(
        symptom="A second Python thread is active in the process, but the training thread's "
        "OS-runtime row shows few and short condition waits.",
        cause="The shipper sleeps, reads and writes files and compresses with zlib: all release "
        "the GIL, so it holds it for well under a millisecond per wake-up.",
        fix="None needed: this is the decoy a GIL detector must not fire on; removing the "
        "thread changes the step time by a few percent at most.",
    ),
    config_cls=GilDecoyConfig,
    build=f"{__name__}.workload:build",
    expected_diagnosis="no class on any variant (test-only decoy)",
)
