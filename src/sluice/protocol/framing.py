"""Length-prefixed framing: ``int32 size`` then ``size`` bytes, in both directions.

:class:`FrameDecoder` is fed whatever the socket produced and hands back whole frames.
It never buffers more than one frame's worth plus the bytes already received, and refuses
a length prefix above its limit before reading the body, so a hostile peer cannot make
it allocate.
"""

from __future__ import annotations

import struct

from sluice.common.errors import ProtocolError
from sluice.common.limits import FRAME_BYTES_MAX

_SIZE = struct.Struct(">i")
SIZE_PREFIX_BYTES = 4


class FrameDecoder:
    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX) -> None:
        self._buffer = bytearray()
        self._frame_bytes_max = frame_bytes_max
        self._needed: int | None = None
        self._start = 0
        """Where the unread part of ``_buffer`` begins (``receive``/``next_frame``)."""

    @property
    def frame_bytes_max(self) -> int:
        return self._frame_bytes_max

    @frame_bytes_max.setter
    def frame_bytes_max(self, value: int) -> None:
        """Change the limit for the frames not yet taken (a SASL connection's limit
        before authentication is smaller)."""
        self._frame_bytes_max = value

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer) - self._start

    def holds_whole_frame(self) -> bool:
        """Whether :meth:`next_frame` would return a frame (or raise) now."""
        available = len(self._buffer) - self._start
        if available < SIZE_PREFIX_BYTES:
            return False
        size: int = _SIZE.unpack_from(self._buffer, self._start)[0]
        return available >= SIZE_PREFIX_BYTES + size or size < 0

    def receive(self, data: bytes) -> None:
        """Add received bytes; take frames out one at a time with :meth:`next_frame`.

        Unlike :meth:`feed`, nothing is copied out until asked for, so a chunk of many
        small frames stays one buffer while the caller admits them one by one.
        """
        self._compact()
        self._buffer += data

    def next_frame(self) -> bytes | None:
        """The next whole frame (without its prefix), or None until more bytes arrive.

        Raises ProtocolError for a negative or over-limit size.
        """
        buffer = self._buffer
        position = self._start
        available = len(buffer) - position
        if available < SIZE_PREFIX_BYTES:
            return None
        (size,) = _SIZE.unpack_from(buffer, position)
        if size < 0 or size > self._frame_bytes_max:
            raise ProtocolError(f"frame size {size} is outside [0, {self._frame_bytes_max}] bytes")
        if available < SIZE_PREFIX_BYTES + size:
            return None
        start = position + SIZE_PREFIX_BYTES
        self._start = start + size
        if self._start == len(buffer):
            self._start = 0
            frame = bytes(buffer[start:])
            buffer.clear()
            return frame
        return bytes(buffer[start : start + size])

    def _compact(self) -> None:
        if self._start:
            del self._buffer[: self._start]
            self._start = 0

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return every frame now complete (without its prefix).

        Raises ProtocolError for a negative or over-limit size; the caller closes the
        connection.
        """
        self._compact()
        self._buffer += data
        frames: list[bytes] = []
        buffer = self._buffer
        position = 0
        while True:
            available = len(buffer) - position
            if available < SIZE_PREFIX_BYTES:
                break
            (size,) = _SIZE.unpack_from(buffer, position)
            if size < 0 or size > self._frame_bytes_max:
                raise ProtocolError(
                    f"frame size {size} is outside [0, {self._frame_bytes_max}] bytes"
                )
            if available < SIZE_PREFIX_BYTES + size:
                break
            start = position + SIZE_PREFIX_BYTES
            frames.append(bytes(buffer[start : start + size]))
            position = start + size
        if position:
            del buffer[:position]
        return frames


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its size."""
    return _SIZE.pack(len(payload)) + payload


def size_prefix(size_bytes: int) -> bytes:
    return _SIZE.pack(size_bytes)
