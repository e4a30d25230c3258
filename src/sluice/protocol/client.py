"""The client half of the Kafka protocol, sans I/O: requests in, bytes out; bytes in, responses out.

:class:`ClientProtocol` is what one side of one connection needs to talk to a broker,
whoever that side is (the client library, or a broker calling another broker). It never
touches a socket: the caller writes the bytes it is handed and feeds in the bytes it
reads::

    send_request(payload) ──► correlation id + frame bytes ──► caller writes them
                                    │ recorded as outstanding (api key, version)
                                    ▼
    caller reads ──► receive_data(bytes) ──► next_response() ──► Response | UndecodableResponse
                                                   │ frame too large or too short,
                                                   ▼ or no request has its correlation id
                                             ProtocolError: the connection is done

Correlation ids count up from 0 and wrap at int32. A broker answers the requests of one
connection in order, but the answer is matched by its correlation id, not its position,
so nothing depends on that order. A request sent with ``expect_response=False`` (Produce
with acks=0) takes a correlation id but is not recorded, since no answer will come.

Versions are agreed once per connection: the caller sends :data:`NEGOTIATION_REQUEST`
and hands the answer to :meth:`ClientProtocol.negotiate`, which picks, for each API,
the highest version that this side's table, the broker's ranges and kio's schemas have
in common. Timeouts, in-flight limits and giving up on a request are the caller's: a
response whose caller gave up still arrives here and is handed out like any other.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.api_versions.v0.request import ApiVersionsRequest

from sluice.common import errors
from sluice.common.limits import FRAME_BYTES_MAX
from sluice.protocol.codec import decode_response, encode_request, request_schema, response_schema
from sluice.protocol.framing import FrameDecoder
from sluice.protocol.private import is_private
from sluice.protocol.versions import api_name

CORRELATION_ID_MASK = 0x7FFF_FFFF
"""Correlation ids are non-negative int32s and wrap around."""

NEGOTIATION_REQUEST = ApiVersionsRequest()
"""ApiVersions is first sent as v0: every broker answers it, whatever its ranges."""

_CORRELATION_ID = struct.Struct(">i")

VersionRanges = Mapping[int, tuple[int, int]]
"""API key → (lowest, highest) version."""


@dataclass(frozen=True, slots=True)
class Response:
    """A decoded answer to the request sent with ``correlation_id``."""

    correlation_id: int
    api_key: int
    api_version: int
    payload: Any


@dataclass(frozen=True, slots=True)
class UndecodableResponse:
    """An answer, whole and matched to its request, whose body does not parse.

    Framing is intact, so the connection can go on; only this request failed.
    """

    correlation_id: int
    api_key: int
    api_version: int
    error: errors.ProtocolError


@dataclass(frozen=True, slots=True)
class _Outstanding:
    api_key: int
    api_version: int


def negotiate(own_ranges: VersionRanges, broker_ranges: VersionRanges) -> dict[int, int]:
    """For each API both sides know, the highest version that both support.

    ``own_ranges`` are the versions this side's code is written against, ``broker_ranges``
    what the broker advertised. APIs the broker does not list, or whose ranges do not
    overlap, are left out, as are versions kio has no request or response schema for.
    """
    chosen: dict[int, int] = {}
    for api_key, (own_low, own_high) in own_ranges.items():
        broker_range = broker_ranges.get(api_key)
        if broker_range is None:
            continue
        low = max(own_low, broker_range[0])
        for version in range(min(own_high, broker_range[1]), low - 1, -1):
            if request_schema(api_key, version) and response_schema(api_key, version):
                chosen[int(api_key)] = version
                break
    return chosen


class ClientProtocol:
    """The protocol state of one connection to a broker, as the side that sends requests.

    ``peer`` names the broker in error messages ("broker at host:9092"); ``own_ranges`` is
    the table of versions this side speaks; a response frame over ``response_bytes_max``
    is refused before it is buffered.
    """

    def __init__(
        self,
        peer: str,
        own_ranges: VersionRanges,
        *,
        client_id: str | None,
        response_bytes_max: int = FRAME_BYTES_MAX,
    ) -> None:
        self.peer = peer
        self.client_id = client_id
        self._own_ranges = own_ranges
        self._decoder = FrameDecoder(response_bytes_max)
        self._next_correlation_id = 0
        self._outstanding: dict[int, _Outstanding] = {}
        self._broker_ranges: dict[int, tuple[int, int]] = {}
        self._versions: dict[int, int] = {}

    # ── versions ───────────────────────────────────────────────────────────────────────

    def negotiate(self, response: Any) -> None:
        """Agree on versions from the broker's answer to :data:`NEGOTIATION_REQUEST`.

        Raises the :class:`~sluice.common.errors.KafkaError` for the answer's error code
        when the broker refused.
        """
        if response.error_code != errors.ErrorCode.none:
            raise errors.for_code(response.error_code)(
                f"{self.peer} refused ApiVersions v{NEGOTIATION_REQUEST.__version__}"
            )
        self._broker_ranges = {
            int(entry.api_key): (int(entry.min_version), int(entry.max_version))
            for entry in response.api_keys
        }
        self._versions = negotiate(self._own_ranges, self._broker_ranges)

    @property
    def versions(self) -> dict[int, int]:
        """The version chosen for each API both sides support (API key → version)."""
        return dict(self._versions)

    @property
    def broker_ranges(self) -> dict[int, tuple[int, int]]:
        """What the broker advertised: API key → (min, max) version."""
        return dict(self._broker_ranges)

    def supports(self, api_key: int) -> bool:
        """True when a version of ``api_key`` was agreed on."""
        return int(api_key) in self._versions

    def version_for(self, api_key: int) -> int:
        """The agreed version of ``api_key``.

        Raises :class:`~sluice.common.errors.UnsupportedVersion` when there is none,
        saying what each side speaks.
        """
        version = self._versions.get(int(api_key))
        if version is None:
            own = self._own_ranges.get(int(api_key))
            own_text = f"v{own[0]}-{own[1]}" if own else "no version"
            broker = self._broker_ranges.get(int(api_key))
            broker_text = f"v{broker[0]}-{broker[1]}" if broker else "does not offer it"
            raise errors.UnsupportedVersion(
                f"{self.peer} and this client share no version of {api_name(api_key)} "
                f"(client speaks {own_text}, broker {broker_text})"
            )
        return version

    def check_served(self, api_key: int, api_version: int) -> None:
        """Raise :class:`~sluice.common.errors.UnsupportedVersion` when the broker does not
        serve this version (checked only once versions were negotiated)."""
        if not self._broker_ranges or is_private(api_key):
            return  # Sluice's own APIs are not advertised
        low_high = self._broker_ranges.get(int(api_key))
        if low_high is None or not low_high[0] <= api_version <= low_high[1]:
            raise errors.UnsupportedVersion(
                f"{self.peer} does not serve {api_name(api_key)} v{api_version}"
            )

    # ── requests out ───────────────────────────────────────────────────────────────────

    def send_request(self, payload: Any, *, expect_response: bool = True) -> tuple[int, bytes]:
        """The correlation id given to a kio request payload, and its whole frame.

        With ``expect_response`` the request is recorded until its answer arrives.
        """
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & CORRELATION_ID_MASK
        frame_bytes = encode_request(correlation_id, self.client_id, payload)
        if expect_response:
            self._outstanding[correlation_id] = _Outstanding(
                int(payload.__api_key__), int(payload.__version__)
            )
        return correlation_id, frame_bytes

    @property
    def outstanding_count(self) -> int:
        """Requests sent whose answers have not arrived."""
        return len(self._outstanding)

    # ── responses in ───────────────────────────────────────────────────────────────────

    def receive_data(self, data: bytes) -> None:
        """Add bytes read from the connection; take answers out with :meth:`next_response`."""
        self._decoder.receive(data)

    def next_response(self) -> Response | UndecodableResponse | None:
        """The next whole answer, or None until more bytes arrive.

        Raises :class:`~sluice.common.errors.ProtocolError` for a frame over the limit,
        one too short for a correlation id, or one no outstanding request has; the
        connection cannot go on after that.
        """
        try:
            frame_bytes = self._decoder.next_frame()
        except errors.ProtocolError as e:
            raise errors.ProtocolError(f"{self.peer} sent {e}") from None
        if frame_bytes is None:
            return None
        if len(frame_bytes) < _CORRELATION_ID.size:
            raise errors.ProtocolError(f"{self.peer} sent a {len(frame_bytes)}-byte response")
        (correlation_id,) = _CORRELATION_ID.unpack_from(frame_bytes, 0)
        request = self._outstanding.pop(correlation_id, None)
        if request is None:
            raise errors.ProtocolError(
                f"{self.peer} answered correlation id {correlation_id}, which no request has"
            )
        api_key, api_version = request.api_key, request.api_version
        try:
            _, payload = decode_response(api_key, api_version, frame_bytes)
        except errors.ProtocolError as e:
            return UndecodableResponse(
                correlation_id,
                api_key,
                api_version,
                errors.ProtocolError(
                    f"{api_name(api_key)} v{api_version} answer from {self.peer} "
                    f"does not parse: {e}"
                ),
            )
        return Response(correlation_id, api_key, api_version, payload)
