"""Build kio messages of any version from one set of field values.

Handlers are written once against field names, not once per version. ``schemas(api_key,
version)`` gives the module holding that version's request/response classes, and
:func:`make` fills a class from keyword values: fields the version lacks are dropped,
and plain Python values are converted to the wire types kio wants (error codes, ms
durations, ms timestamps). A name that no version of the class has is refused
(:class:`UnknownFieldError`): it is a misspelling, which would otherwise vanish from the
wire without a trace::

    module = response_module(ApiKey.METADATA, 8)
    make(module.MetadataResponsePartition, error_code=0, partition_index=0, leader_id=0,
         leader_epoch=3, replica_nodes=(0,), isr_nodes=(0,))
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import pkgutil
import re
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


_VERSIONED_MODULE = re.compile(r"^(?P<api>.+)\.v(?P<version>\d+)\.(?P<entity>\w+)$")
"""A kio schema module: ``kio.schema.<api>.v<version>.<request|response>``."""


class UnknownFieldError(TypeError):
    """:func:`make` was given a field name that no version of the class has."""


_NAMES_IN_ANY_VERSION: dict[type[Any], frozenset[str]] = {}


def _names_in_any_version(cls: type[Any]) -> frozenset[str]:
    """The field names of ``cls`` in every version of its API that has a class of the
    same name (just its own names for a class outside kio's versioned schemas)."""
    known = _NAMES_IN_ANY_VERSION.get(cls)
    if known is None:
        known = _NAMES_IN_ANY_VERSION[cls] = _collect_names_in_any_version(cls)
    return known


def _collect_names_in_any_version(cls: type[Any]) -> frozenset[str]:
    names = set(_field_kinds(cls))
    matched = _VERSIONED_MODULE.match(cls.__module__)
    if matched is None:
        return frozenset(names)
    api_package = importlib.import_module(matched["api"])
    for version in pkgutil.iter_modules(api_package.__path__):
        if not re.fullmatch(r"v\d+", version.name):
            continue
        try:
            module = importlib.import_module(f"{matched['api']}.{version.name}.{matched['entity']}")
        except ModuleNotFoundError:
            continue
        sibling = getattr(module, cls.__qualname__, None)
        if isinstance(sibling, type) and dataclasses.is_dataclass(sibling):
            names.update(_field_kinds(sibling))
    return frozenset(names)


def _to_error_code(value: Any) -> Any:
    return value if isinstance(value, ErrorCode) else ErrorCode(int(value))


def _to_timedelta(value: Any) -> Any:
    return datetime.timedelta(milliseconds=value) if isinstance(value, int) else value


def _to_datetime(value: Any) -> Any:
    if isinstance(value, int):
        return None if value < 0 else _EPOCH + datetime.timedelta(milliseconds=value)
    return value


_CONVERTERS: dict[str, Any] = {
    "error_code": _to_error_code,
    "timedelta_i32": _to_timedelta,
    "timedelta_i64": _to_timedelta,
    "datetime_i64": _to_datetime,
}
"""How a plain Python value becomes the wire type kio wants, by the field's kafka type:
error codes from ints, durations and timestamps from integer milliseconds (a negative
timestamp is none). A value already of that type is kept as it is."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    """How :func:`make` fills one class: its field names, and the fields whose values
    may need converting with the function for each."""

    names: frozenset[str]
    converters: tuple[tuple[str, Any], ...]


_PLANS: dict[type[Any], _Plan] = {}


def _plan(cls: type[Any]) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        kinds = _field_kinds(cls)
        plan = _PLANS[cls] = _Plan(
            frozenset(kinds),
            tuple(
                (name, _CONVERTERS[kind])
                for name, kind in kinds.items()
                if kind is not None and kind in _CONVERTERS
            ),
        )
    return plan


_ABSENT = object()


def make(cls: type[T], **values: Any) -> T:
    """An instance of kio class ``cls`` from the values it has fields for.

    Raises :class:`UnknownFieldError` for a name that no version of ``cls`` has."""
    plan = _PLANS.get(cls) or _plan(cls)
    if not plan.names.issuperset(values):
        unknown = [name for name in values if name not in plan.names]
        everywhere = _names_in_any_version(cls)
        misspelled = sorted(name for name in unknown if name not in everywhere)
        if misspelled:
            raise UnknownFieldError(
                f"{cls.__qualname__} has no field {', '.join(map(repr, misspelled))} "
                f"in any version (module {cls.__module__})"
            )
        for name in unknown:
            del values[name]
    for name, convert in plan.converters:
        value = values.get(name, _ABSENT)
        if value is not _ABSENT:
            values[name] = convert(value)
    return cls(**values)


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
