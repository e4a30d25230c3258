"""Every advertised (API, version) is served: a well-formed request of each gets an
answer of that version, never UNSUPPORTED_VERSION and never a closed connection.

The requests are built from the kio schema of each version: fields with a default keep
it; other numbers are zero, strings a name no topic or group has, and each array of
structs holds one element built the same way (so every per-item answer is shaped too),
arrays of plain values are empty. The test covers whatever ``versions.SUPPORTED`` lists,
including APIs added later: a version advertised without a handler that can answer it,
or a response shape a version lacks, fails here.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from typing import Any

import pytest
from broker_process import BrokerProcess
from kafka_wire import KafkaConnection
from kio.schema.errors import ErrorCode

from sluice.protocol.codec import request_schema
from sluice.protocol.versions import SUPPORTED, ApiKey

OVERRIDES: dict[str, Any] = {
    "acks": 1,  # acks=0 is answered with silence
    "client_software_name": "sluice-tests",
    "client_software_version": "1.0",
    "response_partition_limit": 10,
    "timeout": datetime.timedelta(milliseconds=1000),
    "max_wait": datetime.timedelta(milliseconds=0),
}
"""Field values where the default would make a request that is not answered at once."""

UNKNOWN_NAME = "sluice-versions-unknown"
"""Every string field: a name no topic, group or member has."""


def _default_value(cls: type[Any], field: dataclasses.Field[Any], hint: Any) -> Any:
    if field.name in OVERRIDES:
        return OVERRIDES[field.name]
    kind = field.metadata.get("kafka_type")
    origin = typing.get_origin(hint)
    arguments = [a for a in typing.get_args(hint) if a is not type(None)]
    array = hint if origin is tuple else (arguments[0] if arguments else None)
    if array is not None and typing.get_origin(array) is tuple:
        [item] = [a for a in typing.get_args(array) if a is not Ellipsis]
        return (build(item),) if dataclasses.is_dataclass(item) else ()
    if dataclasses.is_dataclass(hint):
        return build(hint)
    if arguments and dataclasses.is_dataclass(arguments[0]):
        return None  # a nullable struct (a cursor): absent
    if kind == "string":
        return UNKNOWN_NAME
    if kind == "bool":
        return False
    if kind == "bytes" or kind == "records":
        return b""
    if kind == "uuid":
        return uuid.UUID(int=0)
    if kind in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kind == "datetime_i64":
        return None
    if kind == "error_code":
        return ErrorCode.none
    target = arguments[0] if arguments else hint
    if kind == "float64":
        return target(0.0)
    return target(0)


def build(cls: type[Any]) -> Any:
    """An instance of kio class ``cls``: its defaults, else a neutral value per type."""
    hints = typing.get_type_hints(cls)
    values = {}
    for field in dataclasses.fields(cls):
        if field.name.startswith("__"):
            continue
        has_default = (
            field.default is not dataclasses.MISSING
            or field.default_factory is not dataclasses.MISSING
        )
        if has_default and field.name not in OVERRIDES:
            continue
        values[field.name] = _default_value(cls, field, hints[field.name])
    return cls(**values)


def _error_codes(message: Any) -> list[ErrorCode]:
    found = []
    for field in dataclasses.fields(message):
        value = getattr(message, field.name)
        if field.metadata.get("kafka_type") == "error_code":
            found.append(value)
        for item in value if isinstance(value, tuple) else (value,):
            if dataclasses.is_dataclass(item) and not isinstance(item, type):
                found += _error_codes(item)
    return found


@pytest.fixture(scope="module")
def broker(consumer_protocol_broker: BrokerProcess) -> BrokerProcess:
    """Every API served: the consumer group protocol's too."""
    return consumer_protocol_broker


ADVERTISED = [
    pytest.param(key, version, id=f"{key.name}-v{version}")
    for key, served in sorted(SUPPORTED.items())
    for version in range(served.min_version, served.max_version + 1)
    if served.serves(version)
]


@pytest.mark.parametrize(("api_key", "version"), ADVERTISED)
def test_every_advertised_version_is_answered(
    broker: BrokerProcess, api_key: ApiKey, version: int
) -> None:
    schema = request_schema(api_key, version)
    assert schema is not None, f"{api_key.name} v{version} is advertised but kio has no schema"
    request = build(schema)
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(request)
    assert int(response.__version__) == version
    errors = _error_codes(response)
    assert ErrorCode.unsupported_version not in errors, (api_key.name, version, response)
