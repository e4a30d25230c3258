"""The Kafka error codes a response carries, top level and per topic or partition.

Which fields to look at is worked out once per kio response class (its ``error_code``
fields and the nested entities that may hold more), so counting the errors of a response
walks only those fields, not the whole object. Responses the broker frames itself (Fetch)
are counted by their handler instead.
"""

from __future__ import annotations

import dataclasses
import types
import typing

from sluice.common.errors import ErrorCode


@dataclasses.dataclass(frozen=True, slots=True)
class ErrorPaths:
    """Where a response class keeps error codes: its own fields, and its fields holding
    entities (one, or a tuple of them) that keep some."""

    codes: tuple[str, ...]
    nested: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.codes or self.nested)


def _entity_class(annotation: object) -> type | None:
    """The kio entity class a field holds (``X``, ``X | None`` or ``tuple[X, ...]``)."""
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is tuple or origin is types.UnionType or origin is typing.Union:
        for argument in typing.get_args(annotation):
            found = _entity_class(argument)
            if found is not None:
                return found
    return None


_PATHS: dict[type, ErrorPaths] = {}


def error_paths(response_class: type) -> ErrorPaths:
    """The error-code fields of ``response_class`` and of the entities it nests
    (worked out once per class)."""
    found = _PATHS.get(response_class)
    if found is None:
        found = _PATHS[response_class] = _find_error_paths(response_class)
    return found


def _find_error_paths(response_class: type) -> ErrorPaths:
    codes = []
    nested = []
    for field in dataclasses.fields(response_class):
        if field.name == "error_code":
            codes.append(field.name)
            continue
        entity = _entity_class(field.type)
        if entity is not None and error_paths(entity):
            nested.append(field.name)
    return ErrorPaths(tuple(codes), tuple(nested))


def error_codes(response: object) -> list[int]:
    """Every non-zero error code in ``response`` (a kio message or entity)."""
    found: list[int] = []
    _collect(response, found)
    return found


def _collect(entity: object, found: list[int]) -> None:
    paths = _PATHS.get(type(entity)) or error_paths(type(entity))
    for name in paths.codes:
        code = getattr(entity, name)
        if code:
            found.append(int(code))
    for name in paths.nested:
        value = getattr(entity, name)
        if type(value) is tuple:
            for item in value:
                _collect(item, found)
        elif value is not None:
            _collect(value, found)


_NAMES: dict[int, str] = {int(code): code.name.upper() for code in ErrorCode}


def error_name(code: int) -> str:
    """Kafka's name of an error code (``UNKNOWN_TOPIC_OR_PARTITION``)."""
    return _NAMES.get(code) or f"ERROR_{code}"
