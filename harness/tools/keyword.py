"""``keyword``: any tool that prints text. The class is flagged when the text uses one of its
words (``ClassSpec.tool_words``, bottlenecks/classes.py: every class has some), clear otherwise;
the evidence is the words found. The text is ``Traces.text``, or the output of a command
template run on the export (``harness score --tool 'CMD {sqlite} -o {out}'``: ``{sqlite}`` and
``{out}`` filled in; the file ``{out}`` if written, else stdout)."""

from __future__ import annotations

import subprocess

from harness.judge import score as S
from harness.tools import base
from harness.tools.base import Call, Calls, Context, Flag, Traces, all_na, every_class, register

#: Words in a tool's output that name a class, per class from its spec; the reading and the
#: command's run are :mod:`harness.judge.score`'s (``harness score --tool TEMPLATE`` uses them).
TOOL_WORDS = S.TOOL_WORDS
words_found = S.words_found


@register
class Keyword(base.BuiltIn):
    """Flags a class whose words appear in the text."""

    name = "keyword"
    reads = "text"

    def judge(self, traces: Traces, ctx: Context) -> Calls:
        text = traces.text
        command = str(traces.extra.get("command", "") or "")
        if text is None and command and traces.sqlite is not None:
            try:
                text = S.command_output(command, traces.sqlite, ctx.tools.timeout_s)
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
