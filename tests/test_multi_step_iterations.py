"""An iteration found that holds several of the loop's steps, on real H200 exports of the wild
corpus: the measured step calibrates that many of them (``timemodel._forecast``).

lb_bucketed_graphs' anchor kernel recurs only every few steps (its buckets change the GEMMs'
shapes), so its iterations hold 1, 2, 3 and 5 steps' items; fitted to one measured step as to
one iteration, nsys's cost read 37 us a call and the prediction fell to a third of what its
`graphs` switch measured.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from analysis.detect import TraceView, diagnose, load_thresholds
from analysis.detect.timemodel import _forecast as F
from analysis.detect.timemodel import _timeline as TL
from analysis.export import open_export
from analysis.packed_export import SUFFIX
from bottlenecks import Klass

EXPORTS = Path(__file__).resolve().parents[1] / "corpus" / "wild" / "exports"
_OPEN = ExitStack()


def _timeline(name: str) -> tuple[TraceView, TL.Timeline]:
    path = EXPORTS / f"{name}{SUFFIX}"
    if not path.is_file():
        pytest.skip(f"{path.name} is not ingested")
    view = TraceView(_OPEN.enter_context(open_export(path)), load_thresholds(None))
    tl = TL.timeline(view)
    assert tl is not None
    return view, tl


def test_an_anchor_every_few_steps_gives_iterations_of_several() -> None:
    """Its iterations' items are whole multiples of the fewest (one step's), about three on
    average; calibrated to the measured step (corpus/wild/measured.csv: `none` 11.0 ms,
    `graphs` 5.79x), launch_bound's prediction lands within 20% of the removal."""
    view, tl = _timeline("lb_bucketed_graphs")
    assert 2.5 < F.steps_per_iteration(tl) < 3.5
    found = {f.klass: f for f in diagnose(view.trace, step_ms=10.998)}
    lb = found[Klass.LAUNCH_BOUND]
    assert lb.fired and abs(lb.predicted_speedup / 5.7915 - 1) <= 0.2, lb.prediction_note
    assert "steps each on average" in lb.prediction_note
    assert lb.predicted_step_ms < 11.0 / 3  # per step, not per iteration


@pytest.mark.parametrize("name", ["lb_gnn_scatter", "bio_np_save_acts", "ue_swiglu"])
def test_one_step_an_iteration_stays_one(name: str) -> None:
    """A loop whose iterations all launch the same items (lb_gnn_scatter), one whose save
    doubles one iteration's items (bio_np_save_acts: the median stays the fewest), and one
    whose iterations are sub-steps with a longer one (ue_swiglu) read one step each."""
    _, tl = _timeline(name)
    assert F.steps_per_iteration(tl) == 1.0
