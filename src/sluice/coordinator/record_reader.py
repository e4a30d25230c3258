"""Reading the fixed-layout records coordinators keep in their internal topics
(``__transaction_state``, ``__share_group_state``): big-endian fields, strings as an
int16 length and UTF-8 bytes, arrays as an int32 count and their entries. Anything that
does not fit the layout is CORRUPT_MESSAGE, naming the record being read."""

from __future__ import annotations

import struct

from sluice.common.errors import CorruptMessage

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class RecordReader:
    """Reads one key or value from its start; ``what`` names it in errors."""

    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._position = 0
        self._what = what

    def unpack(self, shape: struct.Struct) -> tuple[int | bytes, ...]:
        try:
            values: tuple[int | bytes, ...] = shape.unpack_from(self._data, self._position)
        except struct.error:
            raise CorruptMessage(f"{self._what} ends early") from None
        self._position += shape.size
        return values

    def integer(self, shape: struct.Struct) -> int:
        """The one integer field ``shape`` holds."""
        (value,) = self.unpack(shape)
        assert isinstance(value, int)
        return value

    def integers(self, shape: struct.Struct) -> tuple[int, ...]:
        """The integer fields ``shape`` holds, in order."""
        return tuple(int(v) for v in self.unpack(shape))

    def string(self) -> str:
        length = self.integer(_INT16)
        end = self._position + length
        if length < 0 or end > len(self._data):
            raise CorruptMessage(f"{self._what}: a string runs past the end")
        text = self._data[self._position : end]
        self._position = end
        try:
            return text.decode()
        except UnicodeDecodeError:
            raise CorruptMessage(f"{self._what}: a string is not UTF-8") from None

    def count(self, entry_bytes_min: int, *, null_is_empty: bool = False) -> int:
        """An array's entry count, checked against the bytes left (each entry takes at
        least ``entry_bytes_min``). A negative count is a null array: no entries where
        ``null_is_empty``, else corrupt."""
        count = self.integer(_INT32)
        if count < 0 and null_is_empty:
            return 0
        if count < 0 or count * entry_bytes_min > len(self._data) - self._position:
            raise CorruptMessage(f"{self._what}: {count} entries cannot fit")
        return count

    def end(self) -> None:
        """Refuse bytes after the last field."""
        if self._position != len(self._data):
            raise CorruptMessage(f"{self._what}: {len(self._data) - self._position} trailing bytes")
