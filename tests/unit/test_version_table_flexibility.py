"""The version table's flexibility facts agree with kio's schemas: a wrong first flexible
version would make the broker misread the request header of every such request."""

from __future__ import annotations

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType

from sluice.protocol.codec import request_schema
from sluice.protocol.versions import FIRST_FLEXIBLE_VERSION, SUPPORTED, ApiKey

ADVERTISED = [
    (key, version)
    for key, served in sorted(SUPPORTED.items())
    for version in range(served.min_version, served.max_version + 1)
    if request_schema(key, version) is not None  # Produce v0-2 is framed by hand
]


@pytest.mark.parametrize(("key", "version"), ADVERTISED, ids=str)
def test_flexibility_matches_kio(key: ApiKey, version: int) -> None:
    request = load_payload_module(int(key), version, EntityType.request)
    flexible = any(getattr(entity, "__flexible__", False) for entity in vars(request).values())
    assert SUPPORTED[key].is_flexible(version) is flexible
    first = FIRST_FLEXIBLE_VERSION.get(key)
    assert (first is not None and version >= first) is flexible
