"""Build kio messages of any version from one set of field values.

Handlers are written once against field names, not once per version. ``schemas(api_key,
version)`` gives the module holding that version's request/response classes, and
:func:`make` fills a class from keyword values: fields the version lacks are dropped,
and plain Python values are converted to the wire types kio wants (error codes, ms
durations, ms timestamps)::

    module = response_module(ApiKey.METADATA, 8)
    make(module.MetadataResponsePartition, error_code=0, partition_index=0, leader_id=0,
         leader_epoch=3, replica_nodes=(0,), isr_nodes=(0,))
"""

from __future__ import annotations

import dataclasses
import datetime
from functools import cache
from types import ModuleType
from typing import Any, TypeVar

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

T = TypeVar("T")

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@cache
def response_module(api_key: int, version: int) -> ModuleType:
    return load_payload_module(api_key, version, EntityType.response)


@cache
def request_module(api_key: int, version: int) -> ModuleType:
    return load_payload_module(api_key, version, EntityType.request)


_FIELD_KINDS: dict[type[Any], dict[str, str | None]] = {}


def _field_kinds(cls: type[Any]) -> dict[str, str | None]:
    kinds = _FIELD_KINDS.get(cls)
    if kinds is None:
        kinds = _FIELD_KINDS[cls] = {
            f.name: f.metadata.get("kafka_type")
            for f in dataclasses.fields(cls)
            if not f.name.startswith("__")
        }
    return kinds


def _convert(kind: str | None, value: Any) -> Any:
    if kind == "error_code" and not isinstance(value, ErrorCode):
        return ErrorCode(int(value))
    if kind in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kind == "datetime_i64" and isinstance(value, int):
        return None if value < 0 else _EPOCH + datetime.timedelta(milliseconds=value)
    return value


def make(cls: type[T], **values: Any) -> T:
    """An instance of kio class ``cls`` from the values it has fields for."""
    kinds = _field_kinds(cls)
    fields = {name: _convert(kinds[name], value) for name, value in values.items() if name in kinds}
    return cls(**fields)


def has_field(cls: type[Any], name: str) -> bool:
    return name in _field_kinds(cls)


def millis(value: datetime.timedelta | datetime.datetime | int | None) -> int:
    """A kio duration or timestamp field as integer milliseconds (-1 for None)."""
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return int((value - _EPOCH) / datetime.timedelta(milliseconds=1))
    return int(value)
