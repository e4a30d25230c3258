"""Requests described once as data, built for whichever version was negotiated."""

from __future__ import annotations

import datetime

import pytest

from sluice.client.messages import Request, build_payload
from sluice.client.versions import CLIENT_VERSIONS, negotiate
from sluice.protocol.codec import (
    decode_request_body,
    encode_request,
    parse_request_header,
    request_schema,
    response_schema,
)
from sluice.protocol.versions import SUPPORTED, ApiKey, api_name


def _round_trip(payload: object) -> object:
    frame = encode_request(7, "test", payload)[4:]
    header, body_offset = parse_request_header(frame)
    return decode_request_body(header, frame, body_offset)


def test_negotiation_picks_the_highest_common_version() -> None:
    broker = {int(key): (r.min_version, r.max_version) for key, r in SUPPORTED.items()}
    chosen = negotiate(broker)
    assert chosen[ApiKey.METADATA] == 8
    assert chosen[ApiKey.PRODUCE] == 8
    assert chosen[ApiKey.FETCH] == 11
    assert chosen[ApiKey.INCREMENTAL_ALTER_CONFIGS] == 0


def test_negotiation_leaves_out_apis_without_a_common_version() -> None:
    chosen = negotiate({int(ApiKey.METADATA): (9, 12), int(ApiKey.FETCH): (0, 5)})
    assert ApiKey.METADATA not in chosen  # the client stops at 8
    assert chosen[ApiKey.FETCH] == 5
    assert ApiKey.PRODUCE not in chosen  # the broker does not offer it


@pytest.mark.parametrize("version", range(1, 9))
def test_one_description_builds_every_metadata_version(version: int) -> None:
    request = Request(
        ApiKey.METADATA,
        {
            "topics": [{"name": "orders"}],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )
    payload = request.build(version)
    assert payload.__version__ == version
    decoded = _round_trip(payload)
    assert [t.name for t in decoded.topics] == ["orders"]  # type: ignore[attr-defined]
    if version >= 4:
        assert decoded.allow_auto_topic_creation is False  # type: ignore[attr-defined]


def test_every_client_version_has_kio_schemas() -> None:
    for api_key, (low, high) in CLIENT_VERSIONS.items():
        for version in range(low, high + 1):
            assert request_schema(api_key, version), (api_name(api_key), version)
            assert response_schema(api_key, version), (api_name(api_key), version)


def test_a_missing_required_field_names_itself() -> None:
    with pytest.raises(KeyError, match="timeout"):
        build_payload(ApiKey.DELETE_TOPICS, 3, {"topic_names": ["t"]})


def test_nested_entities_and_timedeltas() -> None:
    payload = build_payload(
        ApiKey.CREATE_TOPICS,
        4,
        {
            "topics": [
                {
                    "name": "t",
                    "num_partitions": 3,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": "retention.ms", "value": "1000"}],
                }
            ],
            "timeout": datetime.timedelta(seconds=5),
            "validate_only": False,
        },
    )
    decoded = _round_trip(payload)
    assert decoded.topics[0].configs[0].value == "1000"  # type: ignore[attr-defined]
    assert decoded.timeout == datetime.timedelta(seconds=5)  # type: ignore[attr-defined]


def test_api_names_are_readable() -> None:
    assert api_name(ApiKey.INCREMENTAL_ALTER_CONFIGS) == "IncrementalAlterConfigs"
    assert api_name(999) == "API 999"
