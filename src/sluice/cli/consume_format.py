"""``sluice consume --format-string``/``-F``: each record printed through a format string,
as kcat's ``-f`` prints it.

Tokens::

    %t topic        %p partition    %o offset       %T timestamp (ms since the epoch)
    %k key          %s value        %K key length   %S value length
    %h headers, as key=value pairs joined by ',' (a null header value prints as key=)
    %%  a percent sign

Escapes: ``\\n`` newline, ``\\t`` tab, ``\\r`` carriage return, ``\\\\`` backslash. A
missing (null) key or value prints as nothing and its length as -1, as kcat prints them.
Keys, values and header values are written as their bytes, undecoded. An unknown token
or escape is refused before anything is read, naming it.

The string is compiled once (:func:`compile_format`) into the parts each record is
written with.
"""

from __future__ import annotations

from collections.abc import Callable

from sluice.client.consumer import ConsumedRecord

RecordPart = Callable[[ConsumedRecord], bytes]

FORMAT_STRING_BYTES_MAX = 4096
"""Longest format string accepted (a line template, not a program)."""


def _headers(record: ConsumedRecord) -> bytes:
    return b",".join(
        key.encode() + b"=" + (b"" if value is None else value) for key, value in record.headers
    )


def _length(data: bytes | None) -> bytes:
    return b"-1" if data is None else str(len(data)).encode()


_TOKENS: dict[str, RecordPart] = {
    "t": lambda record: record.topic.encode(),
    "p": lambda record: str(record.partition).encode(),
    "o": lambda record: str(record.offset).encode(),
    "T": lambda record: str(record.timestamp_ms).encode(),
    "k": lambda record: record.key or b"",
    "s": lambda record: record.value or b"",
    "K": lambda record: _length(record.key),
    "S": lambda record: _length(record.value),
    "h": _headers,
}

_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\"}

TOKEN_HELP = (
    "%t topic, %p partition, %o offset, %k key, %s value, %T timestamp (ms), "
    "%h headers, %K/%S key/value length, %% a percent sign; escapes \\n \\t \\r \\\\"
)


class FormatStringError(ValueError):
    """A format string that cannot be compiled; the message names the problem."""


def compile_format(text: str) -> Callable[[ConsumedRecord], bytes]:
    """The function that writes a record through the format string ``text``. Raises
    FormatStringError for an unknown token or escape, or a string that is too long."""
    if len(text.encode()) > FORMAT_STRING_BYTES_MAX:
        raise FormatStringError(f"the format string is longer than {FORMAT_STRING_BYTES_MAX} bytes")
    parts: list[bytes | RecordPart] = []
    literal = bytearray()
    index = 0
    while index < len(text):
        character = text[index]
        if character not in "%\\":
            literal += character.encode()
            index += 1
            continue
        if index + 1 == len(text):
            raise FormatStringError(f"the format string ends with a lone {character!r}")
        following = text[index + 1]
        index += 2
        if character == "\\":
            if following not in _ESCAPES:
                raise FormatStringError(
                    f"unknown escape \\{following} in the format string (known: \\n \\t \\r \\\\)"
                )
            literal += _ESCAPES[following]
        elif following == "%":
            literal += b"%"
        elif following in _TOKENS:
            if literal:
                parts.append(bytes(literal))
                literal.clear()
            parts.append(_TOKENS[following])
        else:
            raise FormatStringError(
                f"unknown token %{following} in the format string ({TOKEN_HELP})"
            )
    if literal:
        parts.append(bytes(literal))
    compiled = tuple(parts)

    def write(record: ConsumedRecord) -> bytes:
        return b"".join(part if isinstance(part, bytes) else part(record) for part in compiled)

    return write
