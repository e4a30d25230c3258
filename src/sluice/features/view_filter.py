"""The filter of a tag-filtered view: a small expression language over record headers.

A view (a topic created with ``sluice.view.source`` and ``sluice.view.filter``) shows
the records of its source topic for which its filter is true. The language::

    filter     := or
    or         := and ("or" and)*
    and        := not ("and" not)*
    not        := "not" not | comparison
    comparison := "(" filter ")"
                | field ("=" | "!=") string
                | field ["not"] "in" "(" string ("," string)* ")"
                | field "exists"
    field      := "tag" | "header." name          name: letters, digits, _ - . :
    string     := '…'   (a quote inside is written twice: 'it''s')

``tag`` is the ``x-sluice-tag`` header; header names after ``header.`` are
case-sensitive, as Kafka's are. A record may carry a header several times: ``=``
and ``in`` hold when any of its values matches, ``!=`` and ``not in`` when none does
(so a record without the header is ``!=`` anything). Keywords are case-insensitive;
strings compare exactly (UTF-8, case-sensitive). Parsing a bad filter raises
:class:`FilterError` with the position and a caret line pointing at it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from sluice.protocol.records.tags import TAG_HEADER

FILTER_BYTES_MAX: Final = 4096

HeaderValues = Mapping[str, frozenset[bytes]]
"""A record's headers: name → the set of its values (None values are left out)."""


class FilterError(ValueError):
    """A filter that does not parse; the message says where and why."""

    def __init__(self, text: str, position: int, problem: str) -> None:
        self.text = text
        self.position = position
        self.problem = problem
        super().__init__(
            f"{problem} at position {position + 1} of the filter:\n  {text}\n  "
            + " " * position
            + "^"
        )


@dataclass(frozen=True, slots=True)
class Comparison:
    header: str
    values: frozenset[bytes]
    """``=`` and ``in`` compare with these (one value for ``=``); empty for ``exists``."""
    negated: bool = False
    exists: bool = False

    def matches(self, headers: HeaderValues) -> bool:
        present = headers.get(self.header, frozenset())
        found = bool(present) if self.exists else not self.values.isdisjoint(present)
        return found != self.negated


@dataclass(frozen=True, slots=True)
class Not:
    operand: Expression

    def matches(self, headers: HeaderValues) -> bool:
        return not self.operand.matches(headers)


@dataclass(frozen=True, slots=True)
class And:
    operands: tuple[Expression, ...]

    def matches(self, headers: HeaderValues) -> bool:
        return all(operand.matches(headers) for operand in self.operands)


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Expression, ...]

    def matches(self, headers: HeaderValues) -> bool:
        return any(operand.matches(headers) for operand in self.operands)


Expression = Comparison | Not | And | Or


@dataclass(frozen=True)
class ViewFilter:
    """A parsed filter: :meth:`matches` a record's headers."""

    text: str
    expression: Expression

    def matches(self, headers: HeaderValues) -> bool:
        return self.expression.matches(headers)

    def matches_record(self, headers: Iterable[tuple[str, bytes | None]]) -> bool:
        return self.expression.matches(header_values(headers))

    @property
    def headers(self) -> frozenset[str]:
        """The header names the filter looks at."""
        return frozenset(_header_names(self.expression))


def header_values(headers: Iterable[tuple[str, bytes | None]]) -> dict[str, frozenset[bytes]]:
    grouped: dict[str, set[bytes]] = {}
    for name, value in headers:
        if value is not None:
            grouped.setdefault(name, set()).add(value)
    return {name: frozenset(values) for name, values in grouped.items()}


def _header_names(expression: Expression) -> Iterable[str]:
    if isinstance(expression, Comparison):
        yield expression.header
    elif isinstance(expression, Not):
        yield from _header_names(expression.operand)
    else:
        for operand in expression.operands:
            yield from _header_names(operand)


# -- parsing ------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>'(?:[^']|'')*')
      | (?P<unterminated>'(?:[^']|'')*$)
      | (?P<field>(?i:header)\.[A-Za-z0-9_\-.:]+|[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op>!=|=|\(|\)|,)
      | (?P<other>\S)
    )""",
    re.VERBOSE,
)
_KEYWORDS = frozenset({"and", "or", "not", "in", "exists"})


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    text: str
    position: int


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while True:
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            break
        kind = match.lastgroup
        assert kind is not None
        start = match.start(kind)
        token_text = match.group(kind)
        if kind == "unterminated":
            raise FilterError(text, start, "a string is not closed (strings are in '…')")
        if kind == "other":
            raise FilterError(text, start, f"unexpected {token_text!r}")
        if kind == "field" and token_text.lower() in _KEYWORDS:
            kind = "keyword"
            token_text = token_text.lower()
        tokens.append(_Token(kind, token_text, start))
        position = match.end()
    tokens.append(_Token("end", "", len(text.rstrip())))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> _Token:
        return self.tokens[self.at]

    def take(self) -> _Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def fail(self, token: _Token, expected: str) -> FilterError:
        found = "the end" if token.kind == "end" else repr(token.text)
        return FilterError(self.text, token.position, f"expected {expected}, found {found}")

    def keyword(self, word: str) -> bool:
        token = self.peek()
        if token.kind == "keyword" and token.text == word:
            self.at += 1
            return True
        return False

    def parse(self) -> Expression:
        expression = self.parse_or()
        token = self.peek()
        if token.kind != "end":
            raise self.fail(token, "'and', 'or' or the end")
        return expression

    def parse_or(self) -> Expression:
        operands = [self.parse_and()]
        while self.keyword("or"):
            operands.append(self.parse_and())
        return operands[0] if len(operands) == 1 else Or(tuple(operands))

    def parse_and(self) -> Expression:
        operands = [self.parse_not()]
        while self.keyword("and"):
            operands.append(self.parse_not())
        return operands[0] if len(operands) == 1 else And(tuple(operands))

    def parse_not(self) -> Expression:
        if self.keyword("not"):
            return Not(self.parse_not())
        return self.parse_comparison()

    def parse_comparison(self) -> Expression:
        token = self.take()
        if token.kind == "op" and token.text == "(":
            inner = self.parse_or()
            closing = self.take()
            if closing.text != ")":
                raise self.fail(closing, "')'")
            return inner
        if token.kind != "field":
            raise self.fail(token, "tag, header.<name>, 'not' or '('")
        if token.text.lower() == "tag":
            header = TAG_HEADER
        elif token.text[: len("header.")].lower() == "header.":
            header = token.text[len("header.") :]
        else:
            raise FilterError(
                self.text,
                token.position,
                f"unknown field {token.text!r} (fields are tag and header.<name>)",
            )
        operator = self.take()
        if operator.kind == "op" and operator.text in ("=", "!="):
            return Comparison(header, frozenset({self.string()}), negated=operator.text == "!=")
        if operator.kind == "keyword" and operator.text == "exists":
            return Comparison(header, frozenset(), exists=True)
        negated = operator.kind == "keyword" and operator.text == "not"
        if negated:
            operator = self.take()
        if operator.kind == "keyword" and operator.text == "in":
            return Comparison(header, self.string_list(), negated=negated)
        raise self.fail(operator, "'=', '!=', 'in', 'not in' or 'exists'")

    def string(self) -> bytes:
        token = self.take()
        if token.kind != "string":
            raise self.fail(token, "a string in quotes")
        return token.text[1:-1].replace("''", "'").encode()

    def string_list(self) -> frozenset[bytes]:
        opening = self.take()
        if opening.text != "(":
            raise self.fail(opening, "'(' and a list of strings")
        values = {self.string()}
        while True:
            token = self.take()
            if token.text == ")":
                return frozenset(values)
            if token.text != ",":
                raise self.fail(token, "',' or ')'")
            values.add(self.string())


def parse_filter(text: str) -> ViewFilter:
    """Parse a view filter. Raises :class:`FilterError` pointing at the problem."""
    if len(text.encode()) > FILTER_BYTES_MAX:
        raise FilterError(text[:40] + "…", 0, f"the filter is longer than {FILTER_BYTES_MAX} bytes")
    if not text.strip():
        raise FilterError(text, 0, "the filter is empty")
    return ViewFilter(text, _Parser(text).parse())
