"""Requests built from data, for whichever version the connection negotiated.

kio has one dataclass per API version; their fields differ between versions only by
presence (a field appears or disappears) and defaults. Client code therefore describes
a request once, as nested mappings keyed by kio's field names, and
:func:`build_payload` fills in the dataclass of the chosen version: fields the version
lacks are dropped, fields it has but the data omits take the schema default, and a
required field with neither is a bug in the caller (``KeyError`` naming it).

Leaf values are given in kio's Python types (``int``, ``str``, ``bytes``,
``datetime.timedelta`` for ``*Timedelta`` fields); nested entities as mappings or
sequences of mappings.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, Union, get_args, get_origin

from sluice.protocol.codec import request_schema
from sluice.protocol.versions import api_name


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    required: bool
    entity: type[Any] | None
    """The nested dataclass, when the field holds one entity or a tuple of them."""
    is_tuple: bool


def _strip_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (types.UnionType, Union):
        arguments = [a for a in get_args(annotation) if a is not type(None)]
        if len(arguments) == 1:
            return arguments[0]
    return annotation


_PLANS: dict[type[Any], tuple[_FieldPlan, ...]] = {}


def _plan(schema: type[Any]) -> tuple[_FieldPlan, ...]:
    known = _PLANS.get(schema)
    if known is not None:
        return known
    plans = []
    for schema_field in dataclasses.fields(schema):
        annotation = _strip_optional(schema_field.type)
        is_tuple = get_origin(annotation) is tuple
        inner = get_args(annotation)[0] if is_tuple else annotation
        required = (
            schema_field.default is dataclasses.MISSING
            and schema_field.default_factory is dataclasses.MISSING
        )
        entity = inner if isinstance(inner, type) and dataclasses.is_dataclass(inner) else None
        plans.append(_FieldPlan(schema_field.name, required, entity, is_tuple))
    _PLANS[schema] = plan = tuple(plans)
    return plan


def build_entity(schema: type[Any], data: Mapping[str, Any]) -> Any:
    """An instance of kio dataclass ``schema`` from ``data`` (see the module docstring)."""
    arguments: dict[str, Any] = {}
    for plan in _plan(schema):
        if plan.name not in data:
            if plan.required:
                raise KeyError(f"{schema.__name__} v{schema.__version__} needs field {plan.name!r}")
            continue
        value = data[plan.name]
        if plan.entity is not None and value is not None:
            if plan.is_tuple:
                value = tuple(build_entity(plan.entity, item) for item in value)
            else:
                value = build_entity(plan.entity, value)
        elif plan.is_tuple and value is not None:
            value = tuple(value)
        arguments[plan.name] = value
    return schema(**arguments)


def build_payload(api_key: int, version: int, data: Mapping[str, Any]) -> Any:
    """The kio request payload of ``api_key`` at ``version``, filled from ``data``."""
    schema = request_schema(api_key, version)
    if schema is None:
        raise LookupError(f"kio has no schema for {api_name(api_key)} v{version}")
    return build_entity(schema, data)


class VersionedRequest(Protocol):
    """Anything that can produce a request payload once the version is known."""

    @property
    def api_key(self) -> int: ...

    def build(self, version: int) -> Any: ...


@dataclass(frozen=True, slots=True)
class Request:
    """A request described as data; the connection picks the version when sending."""

    api_key: int
    fields: Mapping[str, Any] = field(default_factory=dict)

    def build(self, version: int) -> Any:
        return build_payload(self.api_key, version, self.fields)
