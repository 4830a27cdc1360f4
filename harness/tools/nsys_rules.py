"""``nsys-rules``: Nsight Systems' own expert rules (``nsys analyze``, ``analysis/expert_rules.py``)
on the nsys export; the evidence is each rule that ran with its row count. A class no rule
stands for, or whose rules could not read the export (no CUDA data), is ``n/a``. In a run's
tools step the rules the diagnosis ran on the same export (``expert_rules.csv``) are read from
``Traces.extra["expert_rules"]`` instead of running ``nsys analyze`` again."""

from __future__ import annotations

from analysis import expert_rules as E
from harness.core import nsys as nsys_mod
from harness.tools.base import Call, Calls, Context, Flag, Traces, all_na, every_class, register


@register
class NsysRules:
    """One call per class from the rules mapped to it (``ClassSpec.nsys_rules``)."""

    name = "nsys-rules"
    reads = "sqlite"

    def missing(self) -> str | None:
        return None if nsys_mod.find(None) is not None else "no nsys found"

    def judge(self, traces: Traces, ctx: Context) -> Calls:
        if traces.sqlite is None:
            return all_na("no nsys export")
        ran = traces.extra.get("expert_rules")  # the run's diagnosis ran them already
        if ran:
            results = list(ran)  # type: ignore[call-overload]
            return every_class(lambda k: _call(k, [r for r in results if r.klass == k]))
        found = nsys_mod.find(None)
        if found is None:
            return all_na("no nsys found, so its expert rules could not run")
        try:
            results = E.run_rules(found.path, traces.sqlite, timeout_s=ctx.tools.timeout_s)
        except E.ExpertRulesUnavailable as exc:
            return all_na(str(exc))
        return every_class(lambda k: _call(k, [r for r in results if r.klass == k]))


def _call(klass: str, results: list[E.RuleResult]) -> Call:
    if not any(s.klass == klass for s in E.RULES):
        return Call(Flag.NA, "no nsys rule stands for this class")
    ran = [r for r in results if r.fired is not None]
    if not ran:
        why = "; ".join(f"{r.canonical}: {r.reason}" for r in results) or "no rule ran"
        return Call(Flag.NA, why)
    text = ", ".join(f"{r.canonical} {r.rows} rows" for r in ran)
    return Call(Flag.FLAGGED if any(r.fired for r in ran) else Flag.CLEAR, text)
