"""FrameDecoder's one-frame-at-a-time interface (``receive`` / ``next_frame``), which the
broker uses so that a chunk of many small frames is admitted one request at a time."""

from __future__ import annotations

import pytest

from sluice.common.errors import ProtocolError
from sluice.protocol.framing import FrameDecoder, frame

PAYLOADS = [b"", b"a", b"hello world" * 50, bytes(range(256))]


def _drain(decoder: FrameDecoder) -> list[bytes]:
    frames = []
    while (next_frame := decoder.next_frame()) is not None:
        frames.append(next_frame)
    return frames


def test_frames_survive_every_split_one_at_a_time() -> None:
    stream = b"".join(frame(p) for p in PAYLOADS)
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder()
        decoder.receive(stream[:cut])
        got = _drain(decoder)
        decoder.receive(stream[cut:])
        got += _drain(decoder)
        assert got == PAYLOADS
        assert decoder.buffered_bytes == 0


def test_frames_survive_byte_by_byte_one_at_a_time() -> None:
    decoder = FrameDecoder()
    got: list[bytes] = []
    for byte in b"".join(frame(p) for p in PAYLOADS):
        decoder.receive(bytes([byte]))
        got += _drain(decoder)
    assert got == PAYLOADS


def test_buffered_bytes_counts_only_what_is_not_taken_yet() -> None:
    decoder = FrameDecoder()
    decoder.receive(frame(b"abc") + frame(b"defg") + b"\x00\x00")
    assert decoder.next_frame() == b"abc"
    assert decoder.buffered_bytes == 4 + 4 + 2
    assert decoder.next_frame() == b"defg"
    assert decoder.next_frame() is None
    assert decoder.buffered_bytes == 2


@pytest.mark.parametrize("size", [-1, 101, 2**31 - 1])
def test_an_out_of_bounds_size_is_refused_before_its_body_arrives(size: int) -> None:
    decoder = FrameDecoder(frame_bytes_max=100)
    decoder.receive(size.to_bytes(4, "big", signed=True))
    with pytest.raises(ProtocolError, match="frame size"):
        decoder.next_frame()
