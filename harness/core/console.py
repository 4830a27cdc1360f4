"""Tables and text for a terminal 100 columns wide.

pandas' ``to_string`` pads every row to its widest cell, so one long reason or list of classes
made the end-of-run tables 150-330 columns wide and unreadable in an ordinary terminal.
:func:`fit_table` keeps a table within :data:`WIDTH`: headers wrap at ``_`` and spaces, the
widest text column wraps inside its cell, and a column that still does not fit moves under
its row as an indented ``name: value`` line. Nothing is cut off.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pandas as pd

__all__ = ["WIDTH", "fit_line", "fit_table", "wrap"]

#: The terminal width the console output is written for.
WIDTH = 100

#: Columns apart.
GAP = 2

#: A text column is wrapped inside its cell only if this many columns are left for it.
MIN_WRAP = 20

#: Indent of a row's detail lines (the columns that moved under it).
DETAIL_INDENT = 4

_AFTER = re.compile(r"(?<=[;,/])(?=\S)")


def _pieces(text: str) -> list[tuple[str, str]]:
    """(joiner, piece): words split at spaces (joined by " ") and after ``;`` ``,`` ``/``
    inside a word (joined by "")."""
    out = []
    for word in str(text).split():
        out += [(" " if i == 0 else "", p) for i, p in enumerate(_AFTER.split(word)) if p]
    return out


def wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width``, broken at spaces and after ``;`` ``,`` ``/``
    (lists of classes have no spaces); a word longer than ``width`` is cut."""
    lines: list[str] = []
    line = ""
    for sep, w in _pieces(text):
        sep = sep if line else ""
        if len(line) + len(sep) + len(w) <= width:
            line += sep + w
            continue
        if line:
            lines.append(line)
        while len(w) > width:
            lines.append(w[:width])
            w = w[width:]
        line = w
    return [*lines, line] if line or not lines else lines


def _cells(
    frame: pd.DataFrame, float_format: Callable[[float], str] | None, na_rep: str
) -> dict[str, list[str]]:
    """Every cell as the string it prints as."""
    fmt = float_format or (lambda v: f"{v:g}")
    out = {}
    for col in frame.columns:
        values = []
        for v in frame[col].tolist():
            if v is None or (isinstance(v, float) and pd.isna(v)) or v is pd.NA:
                values.append(na_rep)
            elif isinstance(v, float):
                values.append(fmt(v))
            else:
                values.append(str(v))
        out[str(col)] = values
    return out


_NUMBER = re.compile(r"[-+]?(\d[\d,]*\.?\d*|\.\d+)([eE][-+]?\d+)?x?%?")


def _numeric(values: list[str], na_rep: str) -> bool:
    """A column of numbers, blanks and n/a aside (one of n/a only too): printed right-aligned."""
    told = [v for v in values if v.strip() not in ("", na_rep, "n/a", "nan", "NaN", "<NA>")]
    return any(v.strip() for v in values) and all(_NUMBER.fullmatch(v.strip()) for v in told)


class _Layout:
    """Column widths, which columns wrap in their cells and which moved under their rows."""

    def __init__(self, cells: dict[str, list[str]], numeric: set[str], keep: int) -> None:
        self.cells = cells
        self.numeric = numeric
        self.keep = list(cells)[:keep]
        self.data = {c: max([0, *map(len, v)]) for c, v in cells.items()}
        self.widths = {c: max(len(c), self.data[c]) for c in cells}
        self.wrapped: set[str] = set()
        self.detail: list[str] = []

    def shown(self) -> list[str]:
        return [c for c in self.cells if c not in self.detail]

    def total(self) -> int:
        shown = self.shown()
        return sum(self.widths[c] for c in shown) + GAP * (len(shown) - 1)

    def _shrink_headers(self, width: int) -> None:
        """Narrow the columns whose header is wider than their cells, a column at a time,
        the one with the most header to spare first, until the table fits or none is left;
        then each takes the width its wrapped header needs."""
        floor = {c: max(self.data[c], _min_header(c)) for c in self.cells}
        while self.total() > width:
            spare = [c for c in self.cells if self.widths[c] > floor[c]]
            if not spare:
                break
            self.widths[max(spare, key=lambda c: self.widths[c] - self.data[c])] -= 1
        for c, w in self.widths.items():
            self.widths[c] = max(self.data[c], *map(len, _header_lines(c, w)))

    def fit(self, width: int) -> None:
        """Wrap the headers wider than their cells; then wrap the widest text column in its
        cells where it has room, else move the last column under the rows, until the rest fit
        (the first ``keep`` columns always stay)."""
        self._shrink_headers(width)
        while self.total() > width:
            movable = [c for c in self.shown() if c not in self.keep and c not in self.wrapped]
            if not movable:
                return
            col = max(movable, key=lambda c: self.widths[c])
            room = width - (self.total() - self.widths[col])
            if col not in self.numeric and room >= max(MIN_WRAP, _min_header(col)):
                self.widths[col] = room
                self.wrapped.add(col)
            else:  # the last column moves first: a table's columns come in order of need
                self.detail.insert(0, movable[-1])


def _header_words(col: str) -> list[str]:
    """A header's words: split at spaces and after each ``_`` (which stays)."""
    return [w for w in re.split(r"(?<=_)| ", col) if w] or [col]


def _min_header(col: str) -> int:
    """The narrowest a header can wrap to: its longest word."""
    return max(len(w) for w in _header_words(col))


def _header_lines(col: str, width: int) -> list[str]:
    """A header in lines of at most ``width`` (a word longer stays whole)."""
    if len(col) <= width:
        return [col]
    words = _header_words(col)
    lines, line = [], ""
    for w in words:
        sep = "" if not line or line.endswith("_") else " "
        if line and len(line) + len(sep) + len(w) > width:
            lines.append(line)
            line = w
        else:
            line += sep + w
    return [*lines, line]


def _block(cols: list[str], rows: list[list[str]], lay: _Layout) -> list[str]:
    """Lines of cells laid side by side, each cell a list of lines, padded and aligned."""
    height = max(len(r) for r in rows)
    out = []
    for i in range(height):
        parts = []
        for c, r in zip(cols, rows, strict=True):
            text = r[i] if i < len(r) else ""
            w = lay.widths[c]
            parts.append(text.rjust(w) if c in lay.numeric else text.ljust(w))
        out.append((" " * GAP).join(parts).rstrip())
    return out


def fit_table(
    frame: pd.DataFrame,
    *,
    width: int = WIDTH,
    keep: int = 1,
    float_format: Callable[[float], str] | None = None,
    na_rep: str = "",
    indent: int = 0,
) -> str:
    """``frame`` (its columns, not its index) as text within ``width`` columns: numbers right,
    text left; see the module's docstring for how a wide table is made to fit. The first
    ``keep`` columns always stay in the table."""
    if frame.columns.empty:
        return ""
    cells = _cells(frame, float_format, na_rep)
    numeric = {c for c, v in cells.items() if _numeric(v, na_rep)}
    lay = _Layout(cells, numeric, keep)
    lay.fit(width - indent)
    cols = lay.shown()
    heads = [_header_lines(c, lay.widths[c]) for c in cols]
    top = max(len(h) for h in heads)
    lines = _block(cols, [[""] * (top - len(h)) + h for h in heads], lay)
    for i in range(len(frame)):
        row = [wrap(cells[c][i], lay.widths[c]) if c in lay.wrapped else [cells[c][i]]
               for c in cols]  # fmt: skip
        lines += _block(cols, row, lay)
        lines += _detail(lay, i, width - indent)
    pad = " " * indent
    return "\n".join(pad + line if line else line for line in lines)


def _detail(lay: _Layout, i: int, width: int) -> list[str]:
    """Row ``i``'s moved columns, ``name: value``, wrapped under it (empty ones left out)."""
    said = [f"{c}: {lay.cells[c][i]}" for c in lay.detail if lay.cells[c][i].strip()]
    if not said:
        return []
    pad = " " * DETAIL_INDENT
    return [pad + line for line in wrap(", ".join(said), width - DETAIL_INDENT)]


def fit_line(line: str) -> str:
    """One line of a message within WIDTH columns, keeping its own indent; what it wraps onto
    further lines is indented two more."""
    if len(line) <= WIDTH:
        return line
    indent = line[: len(line) - len(line.lstrip(" "))]
    first, *more = wrap(line[len(indent) :], WIDTH - len(indent))
    tail = wrap(" ".join(more), WIDTH - len(indent) - 2) if more else []
    return "\n".join([indent + first, *(indent + "  " + t for t in tail)])
