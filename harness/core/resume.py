"""``harness.resume=DIR``: the command line of the run being resumed, from its manifest.

A run folder records how it was started: ``manifest.json``'s ``overrides`` (the command line's
``KEY=VALUE``s, as Hydra got them), its ``scenarios`` and its full ``config``. Resuming it with
``harness.resume=DIR`` alone runs it again as it was started. Overrides given with it may only
add to it: more scenarios, keys the run did not set; which variants run and the time limits
(:data:`MAY_DIFFER`) may change too. One that sets any other key to another value than the run
had (its units would not be comparable with the finished ones) is refused in one line.
An older run folder without ``overrides`` is resumed with its recorded scenarios, its other keys
still checked against its config.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.core import runfolder as rf
from harness.core.config import ALL, UsageError

__all__ = ["MAY_DIFFER", "RESUME_KEY", "resume_argv", "task_overrides"]

RESUME_KEY = "harness.resume"

#: Keys a resume may set to another value than the run had: they change what is shown or how
#: long a worker may take, not what a worker measures (a variant that timed out may get longer).
MAY_DIFFER = frozenset(
    {RESUME_KEY, "harness.progress", "harness.timeout_s", "nsys.export_timeout_s"}
)


def _selects(key: str) -> bool:
    """``scenario.NAME.variants``: which variants run, not how (a resume may leave out one that
    hangs, or add one), like the scenario selection."""
    parts = key.split(".")
    return len(parts) == 3 and parts[0] == "scenario" and parts[2] == "variants"


_MISSING = object()


def task_overrides() -> list[str] | None:
    """The ``KEY=VALUE``s the running Hydra task got (``harness.resume`` left out), for the
    manifest; None outside a Hydra task."""
    try:
        from hydra.core.hydra_config import HydraConfig

        task = list(HydraConfig.get().overrides.task)
    except Exception:  # not under Hydra (a test composing the config itself)
        return None
    return [t for t in task if not t.split("=", 1)[0].lstrip("+~") == RESUME_KEY]


def _parse(text: str) -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        return OverridesParser.create().parse_overrides([text])[0]
    except OverrideParseException:
        return None  # check_overrides says why, in one line


def _lookup(config: dict[str, Any], path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _same(given: Any, recorded: Any) -> bool:
    return given == recorded or str(given) == str(recorded)


def _names(ov: Any, found: Sequence[str]) -> list[str]:
    """The scenarios ``+scenario=...`` selects (``all``: every shipped one found)."""
    import scenarios

    value = ov.value()
    names = [str(n) for n in (value if isinstance(value, list) else [value])]
    shipped = [n for n in scenarios.shipped_names() if n in found]
    return [n for name in names for n in (shipped if name == ALL else [name])]


def resume_argv(argv: Sequence[str], found: Sequence[str]) -> list[str]:
    """``argv`` with the resumed run's own overrides added (its scenarios joined with any
    given ones); ``argv`` as it is without ``harness.resume`` or in a multirun. Raises
    :class:`UsageError` on a conflicting override, and where ``DIR`` is no run folder or its
    manifest cannot be read."""
    from harness.core.overrides import hydra_args

    split = hydra_args(argv)
    if split is None or split[1]:
        return list(argv)
    given = {text: _parse(text) for text in split[0]}
    resume = [ov for ov in given.values() if ov is not None and ov.key_or_group == RESUME_KEY]
    if not resume or not resume[-1].value():
        return list(argv)
    run_dir = Path(str(resume[-1].value()))
    manifest = rf.read_json(rf.manifest_path(run_dir)) if run_dir.is_dir() else None
    if manifest is None:
        raise UsageError(f"{RESUME_KEY}={run_dir}: not a run folder (no manifest.json)")
    if not isinstance(manifest, dict):
        raise rf.CorruptFileError(rf.manifest_path(run_dir), "not a JSON object")
    config = manifest.get("config") or {}
    recorded = manifest.get("overrides")
    recorded = [t for t in recorded if _parse(t) is not None] if recorded else []
    keys = {_parse(t).key_or_group: t for t in recorded}
    chosen = list(manifest.get("scenarios") or [])
    final = {ov.key_or_group: text for text, ov in given.items() if ov is not None}
    for text, ov in given.items():
        if ov is None or ov.key_or_group.startswith("hydra") or final[ov.key_or_group] != text:
            continue  # Hydra's own, or set again later on the command line (the last counts)
        key = ov.key_or_group
        if key == "scenario":
            chosen += [n for n in _names(ov, found) if n not in chosen]
            continue
        if key in MAY_DIFFER or _selects(key):
            continue
        before = _lookup(config, key)
        if key == "size" and before != _MISSING and not _same(ov.value(), before):
            before = manifest.get("size", before)  # size=auto, resolved when the run started
        if before is not _MISSING and not _same(ov.value(), before):
            raise UsageError(
                f"{RESUME_KEY}={run_dir}: {text} conflicts with the run's "
                f"{key}={_shown(before)}; a resume finishes the run as it was started and may "
                "only add to it (drop the override, or start a new run)"
            )
        keys.pop(key, None)  # given: the given text stands
    # the run's own first: Hydra takes overrides before its flags (--cfg job), not after
    out = [t for k, t in keys.items() if k != "scenario"]
    out += [f"+scenario=[{','.join(chosen)}]"] if chosen else []
    scenario = [a for a in argv if a in given and given[a] and given[a].key_or_group == "scenario"]
    return [*out, *(a for a in argv if a not in scenario)]


def _shown(value: Any) -> str:
    return (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )
