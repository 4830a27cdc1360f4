"""The integer SQL of :func:`analysis.trace_ints.int_columns` evaluated with numpy.

Why: where the table's pages can be read directly (:mod:`analysis.trace_pages`), the same
column expressions and ``WHERE`` condition are computed on the decoded columns, so that the
callers' SQL stays the one definition of what they read. Only a small subset of SQLite's
expression language is taken, with SQLite's rules for it: integers and NULL (three-valued
logic: a row is kept where the condition is true, not NULL), ``+ - * & | << >>``, comparisons,
``IN`` (a list, or ``SELECT column FROM table``), ``IS [NOT] NULL``, ``NOT``/``AND``/``OR``,
``CASE`` and ``COALESCE``. Anything else, and any arithmetic that would overflow (SQLite then
gives a REAL), raises :class:`NotHere`: the caller asks SQLite instead, so an answer from here
is always SQLite's answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Expr", "NotHere", "Value", "parse"]


class NotHere(Exception):
    """This expression, or these values, are not evaluated here: ask SQLite."""


#: A column's values and NULL mask (None: no NULLs).
Value = tuple[np.ndarray, np.ndarray | None]
#: Columns by name (the table's, and ``rowid``) for one stretch of rows.
Columns = Mapping[str, Value]

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+)|(?P<param>:\w+)|(?P<col>t\.(?:\"\w+\"|\w+))|(?P<word>[A-Za-z_]\w*)"
    r"|(?P<op><=|>=|!=|<>|==|<<|>>|[-+*&|=<>(),]))"
)
_KEYWORDS = {
    "AND", "OR", "NOT", "IN", "IS", "NULL", "CASE", "WHEN", "THEN", "ELSE", "END", "COALESCE",
    "SELECT", "FROM",
}  # fmt: skip
#: Tokens (kind, text): num, param, col (``t.name``), word (a keyword, upper case), name (any
#: other word), op.
_I64 = 2**63


def _tokens(sql: str) -> list[tuple[str, str]]:
    out, at = [], 0
    while at < len(sql):
        m = _TOKEN.match(sql, at)
        if m is None or m.end() == at:
            if sql[at:].strip():
                raise NotHere(f"cannot read {sql[at : at + 20]!r}")
            break
        kind = m.lastgroup or ""
        text = m.group(kind)
        if kind == "word":
            if text.upper() in _KEYWORDS:
                text = text.upper()
            else:
                kind = "name"  # a table or column of a subquery; anywhere else refused
        out.append((kind, text))
        at = m.end()
    return out


@dataclass
class Expr:
    """A parsed expression: ``columns`` it reads, ``subqueries`` (SQL) whose values an ``IN``
    takes, and :meth:`eval` over a stretch of rows."""

    node: tuple
    columns: frozenset[str]
    subqueries: tuple[str, ...]

    def eval(self, cols: Columns, params: Mapping[str, Any], lists: Mapping[str, np.ndarray]
             ) -> Value:  # fmt: skip
        """The values over ``cols`` (``lists``: each subquery's values)."""
        n = next(iter(cols.values()))[0].size if cols else 0
        return _Eval(cols, params, lists, n).run(self.node)

    def mask(self, cols: Columns, params: Mapping[str, Any], lists: Mapping[str, np.ndarray]
             ) -> np.ndarray:  # fmt: skip
        """Rows where the expression is true (not 0, not NULL): a WHERE condition."""
        v, null = self.eval(cols, params, lists)
        keep = v != 0
        return keep if null is None else keep & ~null


class _Parser:
    def __init__(self, sql: str) -> None:
        self.toks = _tokens(sql)
        self.at = 0
        self.columns: set[str] = set()
        self.subqueries: list[str] = []

    def peek(self) -> tuple[str, str]:
        return self.toks[self.at] if self.at < len(self.toks) else ("end", "")

    def take(self, text: str | None = None) -> str:
        kind, tok = self.peek()
        if kind == "end" or (text is not None and tok != text):
            raise NotHere(f"expected {text or 'more'} at {tok!r}")
        self.at += 1
        return tok

    def accept(self, text: str) -> bool:
        if self.peek()[1] == text:
            self.at += 1
            return True
        return False

    def expr(self) -> tuple:
        node = self.conj()
        while self.accept("OR"):
            node = ("or", node, self.conj())
        return node

    def conj(self) -> tuple:
        node = self.neg()
        while self.accept("AND"):
            node = ("and", node, self.neg())
        return node

    def neg(self) -> tuple:
        if self.accept("NOT"):
            return ("not", self.neg())
        return self.equality()

    def equality(self) -> tuple:
        node = self.compare()
        while True:
            tok = self.peek()[1]
            if tok in ("=", "==", "!=", "<>"):
                self.at += 1
                node = ("cmp", "==" if tok in ("=", "==") else "!=", node, self.compare())
            elif tok == "IS":
                self.at += 1
                negated = self.accept("NOT")
                self.take("NULL")
                node = ("isnull", node, negated)
            elif tok == "IN" or (
                tok == "NOT" and self.toks[self.at + 1 : self.at + 2] == [("word", "IN")]
            ):
                negated = self.accept("NOT")
                self.take("IN")
                node = ("in", node, self.in_list(), negated)
            else:
                return node

    def name(self) -> str:
        kind, tok = self.peek()
        if kind != "name":
            raise NotHere("a subquery this reader does not take")
        self.at += 1
        return tok

    def in_list(self) -> tuple:
        self.take("(")
        if self.accept("SELECT"):
            col, _, table = self.name(), self.take("FROM"), self.name()
            self.take(")")
            sql = f"SELECT {col} FROM {table}"
            self.subqueries.append(sql)
            return ("select", sql)
        items = []
        if not self.accept(")"):
            items.append(self.expr())
            while self.accept(","):
                items.append(self.expr())
            self.take(")")
        if not all(i[0] == "lit" for i in items):
            raise NotHere("an IN list of more than constants")
        return ("list", tuple(i[1] for i in items))

    def chain(self, kind: str, ops: tuple[str, ...], below: Callable[[], tuple]) -> tuple:
        """A left-associative run of ``ops`` between operands parsed by ``below``."""
        node = below()
        while self.peek()[1] in ops:
            op = self.take()
            node = (kind, op, node, below())
        return node

    def compare(self) -> tuple:
        return self.chain("cmp", ("<", "<=", ">", ">="), self.bits)

    def bits(self) -> tuple:
        return self.chain("bin", ("&", "|", "<<", ">>"), self.add)

    def add(self) -> tuple:
        return self.chain("bin", ("+", "-"), self.mul)

    def mul(self) -> tuple:
        return self.chain("bin", ("*",), self.unary)

    def unary(self) -> tuple:
        if self.accept("-"):
            inner = self.unary()
            if inner[0] == "lit" and inner[1] is not None:
                return ("lit", -inner[1])
            return ("bin", "-", ("lit", 0), inner)
        if self.accept("+"):
            return self.unary()
        return self.primary()

    def primary(self) -> tuple:
        kind, tok = self.peek()
        self.at += 1
        if kind == "num":
            if int(tok) >= _I64:
                raise NotHere("an integer literal past int64")
            return ("lit", int(tok))
        if kind == "param":
            return ("param", tok[1:])
        if kind == "col":
            name = tok[2:].strip('"')
            self.columns.add(name)
            return ("col", name)
        if tok == "NULL":
            return ("lit", None)
        if tok == "(":
            node = self.expr()
            self.take(")")
            return node
        if tok == "COALESCE":
            self.take("(")
            args = [self.expr()]
            while self.accept(","):
                args.append(self.expr())
            self.take(")")
            return ("coalesce", tuple(args))
        if tok == "CASE":
            return self.case()
        raise NotHere(f"unexpected {tok!r}")

    def case(self) -> tuple:
        base = None if self.peek()[1] == "WHEN" else self.expr()
        arms = []
        while self.accept("WHEN"):
            when = self.expr()
            self.take("THEN")
            arms.append((when, self.expr()))
        other = self.expr() if self.accept("ELSE") else ("lit", None)
        self.take("END")
        if not arms:
            raise NotHere("a CASE without WHEN")
        return ("case", base, tuple(arms), other)


def parse(sql: str) -> Expr:
    """``sql`` parsed (:class:`NotHere` where it is not in the subset taken)."""
    p = _Parser(sql)
    node = p.expr()
    if p.peek()[0] != "end":
        raise NotHere(f"unexpected {p.peek()[1]!r}")
    return Expr(node, frozenset(p.columns), tuple(p.subqueries))


def _or(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return b
    return a if b is None else a | b


def _overflowed(a: np.ndarray, b: np.ndarray, op: str) -> bool:
    """Whether ``a op b`` leaves int64 for some row (SQLite would give a REAL): first from the
    operands' bounds, which settle almost every case, then row by row."""
    if not a.size:
        return False
    (alo, ahi), (blo, bhi) = (int(a.min()), int(a.max())), (int(b.min()), int(b.max()))
    if op == "+":
        ends = (alo + blo, ahi + bhi)
    elif op == "-":
        ends = (alo - bhi, ahi - blo)
    else:
        ends = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
    if -_I64 <= min(ends) and max(ends) < _I64:
        return False
    fn = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}[op]
    return any(not -_I64 <= fn(int(x), int(y)) < _I64 for x, y in zip(a, b, strict=True))


_CMP: dict[str, Callable] = {
    "==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
    ">": np.greater, ">=": np.greater_equal,
}  # fmt: skip


class _Eval:
    def __init__(self, cols: Columns, params: Mapping[str, Any], lists: Mapping, n: int) -> None:
        self.cols, self.params, self.lists, self.n = cols, params, lists, n

    def const(self, value: int | None) -> Value:
        if value is None:
            return np.zeros(self.n, np.int64), np.ones(self.n, bool)
        return np.full(self.n, value, np.int64), None

    def run(self, node: tuple) -> Value:
        return getattr(self, "_" + node[0])(*node[1:])

    def _lit(self, value: int | None) -> Value:
        return self.const(value)

    def _param(self, name: str) -> Value:
        v = self.params.get(name)
        if not (v is None or (isinstance(v, (int, np.integer)) and -_I64 <= int(v) < _I64)):
            raise NotHere(f"parameter {name} is not an integer")
        return self.const(None if v is None else int(v))

    def _col(self, name: str) -> Value:
        return self.cols[name]

    def _bin(self, op: str, left: tuple, right: tuple) -> Value:
        (a, na), (b, nb) = self.run(left), self.run(right)
        null = _or(na, nb)
        if op in "+-*":
            if _overflowed(a, b, op):
                raise NotHere("integer arithmetic that SQLite turns into a REAL")
            fn = {"+": np.add, "-": np.subtract, "*": np.multiply}[op]
            with np.errstate(over="ignore"):
                return fn(a, b), null
        if op in ("&", "|"):
            return (a & b if op == "&" else a | b), null
        if not (b.size == 0 or (b.min() == b.max() and 0 <= b[0] < 64)):
            raise NotHere("a shift by other than a constant under 64")
        return (a << b if op == "<<" else a >> b), null

    def _cmp(self, op: str, left: tuple, right: tuple) -> Value:
        (a, na), (b, nb) = self.run(left), self.run(right)
        return _CMP[op](a, b).astype(np.int64), _or(na, nb)

    def _isnull(self, inner: tuple, negated: bool) -> Value:
        _, null = self.run(inner)
        isnull = np.zeros(self.n, bool) if null is None else null
        return (~isnull if negated else isnull).astype(np.int64), None

    def _in(self, inner: tuple, items: tuple, negated: bool) -> Value:
        a, na = self.run(inner)
        if items[0] == "select":
            values = self.lists[items[1]]
            has_null = False
        else:
            has_null = any(v is None for v in items[1])
            values = np.array([v for v in items[1] if v is not None], np.int64)
        if not has_null and values.size == 0:  # x IN () is false, whatever x
            return np.full(self.n, int(negated), np.int64), None
        if values.size <= 4:
            found = a == values[0] if values.size else np.zeros(self.n, bool)
            for v in values[1:]:
                found |= a == v
        else:
            found = np.isin(a, values)
        null = na
        if has_null:  # not found in a list holding NULL: NULL
            null = _or(null, ~found)
        return (found != negated).astype(np.int64), null

    def _not(self, inner: tuple) -> Value:
        v, null = self.run(inner)
        return (v == 0).astype(np.int64), null

    def _truth(self, node: tuple) -> tuple[np.ndarray, np.ndarray]:
        """(true, false) masks of a condition (neither where NULL)."""
        v, null = self.run(node)
        nonzero = v != 0
        if null is None:
            return nonzero, ~nonzero
        return nonzero & ~null, ~nonzero & ~null

    def _and(self, left: tuple, right: tuple) -> Value:
        (ta, fa), (tb, fb) = self._truth(left), self._truth(right)
        true, false = ta & tb, fa | fb
        return true.astype(np.int64), ~(true | false)

    def _or(self, left: tuple, right: tuple) -> Value:
        (ta, fa), (tb, fb) = self._truth(left), self._truth(right)
        true, false = ta | tb, fa & fb
        return true.astype(np.int64), ~(true | false)

    def _coalesce(self, args: tuple) -> Value:
        value, null = self.run(args[0])
        for arg in args[1:]:
            if null is None or not null.any():
                return value, None
            v, n = self.run(arg)
            value = np.where(null, v, value)
            null = null & n if n is not None else None
        return value, null

    def _case(self, base: tuple | None, arms: tuple, other: tuple) -> Value:
        """Each row's first arm whose WHEN is true, else ``other``; a WHEN and a THEN are
        evaluated on the rows still open or taken only (as SQLite does), so that a rare
        branch costs little."""
        value = np.zeros(self.n, np.int64)
        null = np.ones(self.n, bool)
        left = np.arange(self.n)  # rows no earlier arm took
        for when, then in arms:
            if not left.size:
                break
            sub = self.subset(left)
            test = ("cmp", "==", base, when) if base is not None else when
            take = sub._truth(test)[0]
            if take.any():
                self._put(value, null, left[take], sub.subset(np.flatnonzero(take)).run(then))
                left = left[~take]
        if left.size:
            self._put(value, null, left, self.subset(left).run(other))
        return value, (null if null.any() else None)

    @staticmethod
    def _put(value: np.ndarray, null: np.ndarray, rows: np.ndarray, got: Value) -> None:
        value[rows] = got[0]
        null[rows] = False if got[1] is None else got[1]

    def subset(self, rows: np.ndarray) -> _Eval:
        """The same evaluation over the rows ``rows`` (indices) only."""
        if rows.size == self.n:
            return self
        return _Eval(_Rows(self.cols, rows), self.params, self.lists, rows.size)


class _Rows(Mapping):
    """Columns taken at some rows, each when first read."""

    def __init__(self, cols: Columns, rows: np.ndarray) -> None:
        self.cols, self.rows, self.done = cols, rows, {}

    def __getitem__(self, name: str) -> Value:
        if name not in self.done:
            v, null = self.cols[name]
            self.done[name] = (v[self.rows], None if null is None else null[self.rows])
        return self.done[name]

    def __iter__(self):
        return iter(self.cols)

    def __len__(self) -> int:
        return len(self.cols)
