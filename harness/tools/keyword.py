"""``keyword``: any tool that prints text. The class is flagged when the text uses one of its
words (``ClassSpec.tool_words``, bottlenecks/classes.py: every class has some), clear otherwise;
the evidence is the words found. The text is ``Traces.text``, or the output of a command
template run on the export (``harness score --tool 'CMD {sqlite} -o {out}'``: ``{sqlite}`` and
``{out}`` filled in; the file ``{out}`` if written, else stdout)."""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from pathlib import Path

from bottlenecks import SPECS
from harness.tools.base import Call, Calls, Context, Flag, Traces, all_na, every_class, register

#: Words in a tool's output that name a class, per class from its spec.
TOOL_WORDS: dict[str, tuple[str, ...]] = {s.name: s.tool_words for s in SPECS}


def words_found(text: str) -> dict[str, list[str]]:
    """Per class, the words of :data:`TOOL_WORDS` that ``text`` uses (case-insensitive)."""
    low = text.lower()
    return {k: [w for w in words if w in low] for k, words in TOOL_WORDS.items()}


def command_text(template: str, sqlite: Path, timeout_s: float) -> str:
    """Run ``template`` on the export and return what it wrote."""
    with tempfile.TemporaryDirectory(prefix="bottleneck-tool-") as tmp:
        out = Path(tmp) / "tool-output"
        cmd = [a.format(sqlite=sqlite, out=out) for a in shlex.split(template)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        return out.read_text(errors="replace") if out.is_file() else proc.stdout


@register
class Keyword:
    """Flags a class whose words appear in the text."""

    name = "keyword"
    reads = "text"

    def missing(self) -> str | None:
        return None

    def judge(self, traces: Traces, ctx: Context) -> Calls:
        text = traces.text
        command = str(traces.extra.get("command", "") or "")
        if text is None and command and traces.sqlite is not None:
            try:
                text = command_text(command, traces.sqlite, ctx.tools.timeout_s)
            except (OSError, subprocess.TimeoutExpired) as exc:
                return all_na(f"{command!r} did not run: {exc}")
        if text is None:
            return all_na("no text to read (no command and no output given)")
        found = words_found(text)
        return every_class(
            lambda k: (
                Call(Flag.FLAGGED, "words: " + ", ".join(found[k]))
                if found[k]
                else Call(Flag.CLEAR, "")
            )
        )
