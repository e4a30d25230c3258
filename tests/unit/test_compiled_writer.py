"""``protocol.compiled_writer`` writes exactly kio's bytes.

For every entity class kio ships (every request, response, header and data class of
every version), seeded random instances, plain and wide (extreme ints, long multi-byte
strings, longer arrays; nulls, empty arrays, tagged fields at and off their defaults in
both), are encoded by the generated writer and by kio's ``entity_writer``, and the bytes
must be equal. Golden request frames of real clients re-encode byte for byte through
``codec.encode_request``, which the generated writers serve.

Reproduce a failure with the seed it prints: ``SLUICE_WRITER_SEED=<seed>``;
``SLUICE_WRITER_CASES`` sets the instances per class (default 12, half of them wide).
"""

from __future__ import annotations

import datetime
import os
import random
import struct
from typing import Any

import pytest
from kio.index import load_entity_module
from kio.schema.errors import ErrorCode
from kio.schema.index import schema_name_map
from kio.static.constants import EntityType
from kio_examples import encode, example
from test_golden_requests import CAPTURED

from sluice.protocol import codec, compiled_writer, varints
from sluice.protocol.messages import response_module
from sluice.protocol.versions import ApiKey

CASES_PER_CLASS = int(os.environ.get("SLUICE_WRITER_CASES", "12"))
SEED = int(os.environ.get("SLUICE_WRITER_SEED", random.randrange(2**32)))


def _every_class() -> list[Any]:
    cases = []
    for name, versions in sorted(schema_name_map.items()):
        for version, entity_types in sorted(versions.items()):
            for entity_type, path in sorted(entity_types.items(), key=lambda item: item[0].value):
                module = load_entity_module(name, version, entity_type)
                cls = getattr(module, path.split(":", 1)[1])
                cases.append(pytest.param(cls, id=f"{name}-v{version}-{entity_type.name}"))
    return cases


EVERY_CLASS = _every_class()


def test_every_kio_class_is_covered() -> None:
    kinds = {case.values[0].__type__ for case in EVERY_CLASS}
    assert {EntityType.request, EntityType.response, EntityType.header} <= kinds
    assert len(EVERY_CLASS) > 500


@pytest.mark.parametrize("cls", EVERY_CLASS)
def test_random_instances_encode_as_kio_encodes_them(cls: type[Any]) -> None:
    print(f"writer seed {SEED} (SLUICE_WRITER_SEED={SEED} reproduces it)")
    rng = random.Random(f"{SEED}-{cls.__module__}-{cls.__qualname__}")
    encode_compiled = compiled_writer.encoder(cls)
    for case in range(CASES_PER_CLASS):
        instance = example(cls, rng, wide=case % 2 == 1)
        expected = encode(instance)
        assert encode_compiled(instance) == expected, (SEED, case, instance)
        assert compiled_writer.encode(instance) == expected


def _response(api_key: int, version: int) -> Any:
    return response_module(api_key, version)


def test_tagged_fields_are_written_in_tag_order_and_only_off_their_defaults() -> None:
    v3 = _response(ApiKey.API_VERSIONS, 3)
    at_defaults = v3.ApiVersionsResponse(
        error_code=ErrorCode.none, api_keys=(), throttle_time=datetime.timedelta(0)
    )
    assert compiled_writer.encode(at_defaults) == encode(at_defaults)
    assert compiled_writer.encode(at_defaults).endswith(b"\x00")
    off_defaults = v3.ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=(),
        throttle_time=datetime.timedelta(0),
        supported_features=(v3.SupportedFeatureKey(name="f", min_version=1, max_version=2),),
        finalized_features_epoch=7,
        finalized_features=(),
        zk_migration_ready=True,
    )
    written = compiled_writer.encode(off_defaults)
    assert written == encode(off_defaults)
    assert written != compiled_writer.encode(at_defaults)


def test_null_and_empty_are_distinct_in_legacy_and_compact_arrays() -> None:
    for version in (2, 12):
        module = _response(ApiKey.METADATA, version)
        for topics in (None, ()):
            if topics is None and version < 12:
                continue
            throttle = {"throttle_time": datetime.timedelta(0)} if version >= 3 else {}
            response = module.MetadataResponse(
                brokers=(), controller_id=1, topics=topics, cluster_id=None, **throttle
            )
            assert compiled_writer.encode(response) == encode(response)


@pytest.mark.parametrize(
    ("field", "value"),
    [("controller_id", 2**31), ("controller_id", -(2**31) - 1), ("controller_id", "1")],
)
def test_a_value_that_does_not_fit_raises_instead_of_writing(field: str, value: Any) -> None:
    module = _response(ApiKey.METADATA, 12)
    fields: dict[str, Any] = {
        "throttle_time": datetime.timedelta(0),
        "brokers": (),
        "controller_id": 1,
        "topics": (),
        "cluster_id": None,
    }
    fields[field] = value
    response = module.MetadataResponse(**fields)
    with pytest.raises(struct.error):
        compiled_writer.encode(response)


def test_a_legacy_string_too_long_for_its_length_raises() -> None:
    module = _response(ApiKey.FIND_COORDINATOR, 1)
    response = module.FindCoordinatorResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message="x" * 2**15,
        node_id=1,
        host="h",
        port=1,
    )
    with pytest.raises(struct.error):
        compiled_writer.encode(response)


def test_the_writer_is_generated_once_per_class() -> None:
    module = _response(ApiKey.HEARTBEAT, 4)
    assert compiled_writer.writer(module.HeartbeatResponse) is compiled_writer.writer(
        module.HeartbeatResponse
    )


def test_unsigned_varints_of_every_width() -> None:
    for value in (0, 1, 127, 128, 16_383, 16_384, 2**21, 2**28, 2**31 - 1):
        encoded = varints.uvarint_bytes(value)
        decoded, shift = 0, 0
        for byte in encoded:
            decoded |= (byte & 0x7F) << shift
            shift += 7
        assert decoded == value
        assert all(byte & 0x80 for byte in encoded[:-1]) and not encoded[-1] & 0x80
    with pytest.raises(ValueError, match="negative"):
        varints.uvarint_bytes(-1)


@pytest.mark.parametrize("frame_bytes", CAPTURED)
def test_requests_of_real_clients_encode_as_kio_encodes_them(frame_bytes: bytes) -> None:
    # test_golden_requests checks the whole frame, through codec.encode_request, against
    # the bytes the client sent.
    header, body_offset = codec.parse_request_header(frame_bytes)
    request = codec.decode_request_body(header, frame_bytes, body_offset)
    assert compiled_writer.encode(request) == encode(request)


@pytest.mark.parametrize("version", [7, 12])
@pytest.mark.parametrize("count", [0, 1, 126, 127, 128, 300, 20_000])
def test_long_arrays_of_fixed_size_items_encode_as_kio_encodes_them(
    version: int, count: int
) -> None:
    # Compact lengths of one byte and more, packers cached per count and not.
    module = _response(ApiKey.METADATA, version)
    nodes = tuple(range(-1, count - 1))
    partition = module.MetadataResponsePartition(
        error_code=ErrorCode.none,
        partition_index=0,
        leader_id=1,
        leader_epoch=3,
        replica_nodes=nodes,
        isr_nodes=nodes[: count // 2],
        offline_replicas=(),
    )
    for _ in range(2):  # built once, then taken from the cache
        assert compiled_writer.encode(partition) == encode(partition)
