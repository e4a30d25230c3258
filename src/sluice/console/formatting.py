"""How the message browser shows keys, values and headers: as text, pretty JSON or hex.

Bytes that are not UTF-8 cannot be shown as text or JSON; they fall back to hex, and the
result says so, so the page can tell the reader which view they are looking at.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from typing import Literal

ValueFormat = Literal["text", "json", "hex"]
FORMATS: tuple[ValueFormat, ...] = ("text", "json", "hex")

HEX_BYTES_PER_LINE = 16


@dataclass(frozen=True, slots=True)
class FormattedValue:
    """Bytes made readable. ``shown_as`` differs from the format asked for when the bytes
    did not fit it (not UTF-8, or not JSON)."""

    text: str
    shown_as: Literal["text", "json", "hex", "null"]
    note: str = ""
    badge: str = ""
    """What decoded it (a schema id and subject), for a key or value decoded with its
    schema (:mod:`sluice.console.schema_decoding`)."""
    badge_href: str = ""


def parse_format(value: str | None) -> ValueFormat:
    """The format a query string names; text when it names none or an unknown one."""
    for known in FORMATS:
        if value == known:
            return known
    return "text"


def hex_dump(data: bytes) -> str:
    """Hex bytes, 16 to a line, each line starting with its offset."""
    lines = []
    for start in range(0, len(data), HEX_BYTES_PER_LINE):
        chunk = data[start : start + HEX_BYTES_PER_LINE]
        lines.append(f"{start:08x}  {chunk.hex(' ')}")
    return "\n".join(lines)


def format_bytes(data: bytes | None, wanted: ValueFormat) -> FormattedValue:
    """``data`` in the ``wanted`` format, falling back to hex (not UTF-8) or text (UTF-8
    that is not JSON)."""
    if data is None:
        return FormattedValue("null", "null")
    if wanted == "hex":
        return FormattedValue(hex_dump(data), "hex")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return FormattedValue(hex_dump(data), "hex", "not UTF-8, shown as hex")
    if wanted == "json":
        try:
            document = json.loads(text)
        except ValueError:
            return FormattedValue(text, "text", "not JSON, shown as text")
        return FormattedValue(json.dumps(document, indent=2, ensure_ascii=False), "json")
    return FormattedValue(text, "text")


def format_timestamp_ms(timestamp_ms: int) -> str:
    """A record timestamp as UTC ISO 8601 with milliseconds; negative ones as they are."""
    if timestamp_ms < 0:
        return str(timestamp_ms)
    moment = datetime.datetime.fromtimestamp(timestamp_ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_timestamp(text: str) -> int:
    """A timestamp typed into the browser's form: milliseconds since the epoch, or an ISO
    8601 date-time (UTC when it names no zone). ``ValueError`` if it is neither."""
    stripped = text.strip()
    if stripped.lstrip("-").isdigit():
        return int(stripped)
    moment = datetime.datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def format_size(size_bytes: int | None) -> str:
    """Bytes in the largest unit that keeps the number at or above 1."""
    if size_bytes is None:
        return "–"
    size = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def format_duration_ms(duration_ms: int | None) -> str:
    """A duration in the largest unit that fits: ``850 ms``, ``12.5 s``, ``3 min 20 s``,
    ``2 h 5 min``."""
    if duration_ms is None or duration_ms < 0:
        return "–"
    if duration_ms < 1000:
        return f"{duration_ms} ms"
    seconds = duration_ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, second = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {second} s"
    hours, minute = divmod(minutes, 60)
    return f"{hours} h {minute} min"
