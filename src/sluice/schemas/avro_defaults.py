"""Which field's default fastavro refused, for an error that says where.

fastavro refuses a default that does not fit its field's type with the value and the
type but not the field. When it does, the schema is parsed again with one field's
default at a time (the others left out) until the one refused is found, and the error
names it by a JSON Pointer into the schema's text (``/fields/2/type/fields/0``). This
runs only on the way to an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fastavro

from sluice.schemas.avro_text import Json


def field_of_refused_default(node: Json, named_schemas: dict[str, Any]) -> str | None:
    """The JSON Pointer and name of the first field in ``node`` whose default fastavro
    refuses, as ``/fields/1 ('amount')``; ``named_schemas`` are the types the schema may
    use (not changed)."""
    for pointer, name in _fields_with_defaults(node, ""):
        probe = _with_defaults_only_at(node, "", pointer)
        if not isinstance(probe, (str, list, dict)):
            return None
        try:
            fastavro.parse_schema(probe, dict(named_schemas))
        except Exception as error:
            if str(error).startswith("Default value"):
                return f"{pointer} ({name!r})"
    return None


def _fields_with_defaults(node: Json, pointer: str) -> Iterator[tuple[str, str]]:
    for child_pointer, child, is_field in _children(node, pointer):
        if is_field and isinstance(child, dict):
            if "default" in child:
                yield child_pointer, str(child.get("name"))
            yield from _fields_with_defaults(child.get("type"), f"{child_pointer}/type")
        elif not is_field:
            yield from _fields_with_defaults(child, child_pointer)


def _children(node: Json, pointer: str) -> Iterator[tuple[str, Json, bool]]:
    """The schemas and fields (flagged) directly inside ``node``."""
    if isinstance(node, list):
        for index, branch in enumerate(node):
            yield f"{pointer}/{index}", branch, False
    elif isinstance(node, dict):
        fields = node.get("fields")
        if isinstance(fields, list):
            for index, field in enumerate(fields):
                yield f"{pointer}/fields/{index}", field, True
        for key in ("items", "values"):
            if key in node:
                yield f"{pointer}/{key}", node[key], False


def _with_defaults_only_at(node: Json, pointer: str, kept: str) -> Json:
    """``node`` without the fields' defaults, but the one of the field at ``kept``."""
    if isinstance(node, list):
        return [
            _with_defaults_only_at(branch, f"{pointer}/{index}", kept)
            for index, branch in enumerate(node)
        ]
    if not isinstance(node, dict):
        return node
    out = dict(node)
    fields = node.get("fields")
    if isinstance(fields, list):
        out["fields"] = [
            _field_with_default_only_at(field, f"{pointer}/fields/{index}", kept)
            for index, field in enumerate(fields)
        ]
    for key in ("items", "values"):
        if key in node:
            out[key] = _with_defaults_only_at(node[key], f"{pointer}/{key}", kept)
    return out


def _field_with_default_only_at(field: Json, pointer: str, kept: str) -> Json:
    if not isinstance(field, dict):
        return field
    out = {key: value for key, value in field.items() if key != "default" or pointer == kept}
    if "type" in field:
        out["type"] = _with_defaults_only_at(field["type"], f"{pointer}/type", kept)
    return out
