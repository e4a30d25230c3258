"""The two texts Confluent's registry derives from an Avro schema: canonical and normalized.

Both are computed from the schema's JSON (already checked by the Avro libraries) the way
Confluent's registry computes them with Avro's Java library, so that a schema registered
here is stored, answered and deduplicated with the same text as there:

* **canonical** — Avro Java's ``Schema.toString(referenced schemas, false)``: compact JSON
  in Java's key order (``type``, ``name``, ``namespace`` only where it differs from the
  enclosing one, ``doc``, ``fields``/``symbols``/``size``/``items``/``values``, a
  field's ``default`` and non-ascending ``order``, the custom properties in the order
  written, ``aliases`` last), a named type written in full the first time and by name
  after, the top-level types of the referenced schemas by name only. Whitespace, key
  order and redundant namespaces of the text do not matter; attributes (``doc``,
  defaults, aliases, logical types, custom properties) are kept. Numbers are written as
  Java writes doubles (``1.0E10``) and strings as Jackson escapes them.
* **normalized** — Confluent's ``normalize=true``: every named type by its full name,
  aliases and custom properties sorted, the logical type's attributes first, types the
  references define by full name. Confluent parses the result again, so a normalized
  schema's canonical text is Java's ``toString`` of it.

The JSON here comes from :func:`json.loads`: duplicate keys keep the first key's place
and the last value, as Jackson's tree does.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, TypeAlias

from sluice.schemas.api import InvalidSchema

Json: TypeAlias = "bool | int | float | str | list[Json] | dict[str, Json] | None"

PRIMITIVE_TYPES: Final = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
)
NAMED_TYPES: Final = frozenset({"record", "error", "enum", "fixed"})
# Java's Schema.Type names: a name equal to one is always written with its namespace
_TYPE_NAMES: Final = PRIMITIVE_TYPES | {"record", "enum", "array", "map", "union", "fixed"}
# what Avro Java does not keep as a custom property of a type, a field, an enum
_SCHEMA_RESERVED: Final = frozenset(
    {"doc", "fields", "items", "name", "namespace", "size", "symbols", "values", "type", "aliases"}
)
_ENUM_RESERVED: Final = _SCHEMA_RESERVED | {"default"}
_FIELD_RESERVED: Final = frozenset({"default", "doc", "name", "order", "type", "aliases"})
# Avro 1.12's logical types and the types each may annotate (others are ignored, as Java
# ignores them)
_LOGICAL_TYPES: Final[Mapping[str, frozenset[str]]] = {
    "decimal": frozenset({"bytes", "fixed"}),
    "big-decimal": frozenset({"bytes"}),
    "uuid": frozenset({"string", "fixed"}),
    "date": frozenset({"int"}),
    "time-millis": frozenset({"int"}),
    "time-micros": frozenset({"long"}),
    "timestamp-millis": frozenset({"long"}),
    "timestamp-micros": frozenset({"long"}),
    "timestamp-nanos": frozenset({"long"}),
    "local-timestamp-millis": frozenset({"long"}),
    "local-timestamp-micros": frozenset({"long"}),
    "local-timestamp-nanos": frozenset({"long"}),
    "duration": frozenset({"fixed"}),
}


@dataclass(frozen=True, slots=True)
class Name:
    """An Avro name split as Java splits it: a dotted name carries its own namespace,
    an empty namespace is none."""

    name: str
    space: str | None

    @staticmethod
    def of(name: str, space: str | None) -> Name:
        prefix, dot, last = name.rpartition(".")
        if dot:
            space = prefix
        return Name(last, space or None)

    @property
    def full(self) -> str:
        return self.name if self.space is None else f"{self.space}.{self.name}"

    def qualified(self, current_space: str | None) -> str:
        """How Java writes this name inside ``current_space``: short when it is the same
        space (unless the short name is a type's name), else in full."""
        if self.space is not None and self.space == current_space:
            return self.full if self.name in _TYPE_NAMES else self.name
        return self.full


@dataclass(frozen=True, slots=True)
class Definition:
    """A named type's JSON and the namespace it was defined in (what its unqualified
    name and the names inside it are relative to)."""

    node: dict[str, Json]
    enclosing_space: str | None

    @property
    def name(self) -> Name:
        return Name.of(_text(self.node["name"]), namespace_of(self.node, self.enclosing_space))

    @property
    def kind(self) -> str:
        return _text(self.node["type"])


def namespace_of(node: Mapping[str, Json], enclosing_space: str | None) -> str | None:
    """A named type's namespace as Java's parser takes it: its own ``namespace`` when
    it is a string, else the enclosing one."""
    space = node.get("namespace")
    return space if isinstance(space, str) else enclosing_space


def collect_definitions(node: Json, space: str | None, into: dict[str, Definition]) -> None:
    """Every named type ``node`` defines, by full name, into ``into``."""
    if isinstance(node, list):
        for branch in node:
            collect_definitions(branch, space, into)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind in NAMED_TYPES:
        definition = Definition(node, space)
        name = definition.name
        into[name.full] = definition
        fields = node.get("fields")
        if kind in ("record", "error") and isinstance(fields, list):
            for field in fields:
                if isinstance(field, dict):
                    collect_definitions(field.get("type"), name.space, into)
    elif kind == "array":
        collect_definitions(node.get("items"), space, into)
    elif kind == "map":
        collect_definitions(node.get("values"), space, into)
    elif isinstance(kind, (dict, list)):
        collect_definitions(kind, space, into)


def without_repeated_definitions(
    node: Json, space: str | None, definitions: Mapping[str, Definition], defined: dict[str, str]
) -> Json:
    """``node`` with each named type defined before and defined again the same way
    replaced by its full name, as Java's parser takes such a repetition (Confluent's
    normal form repeats the types a reference defines inside its own; fastavro and the
    apache package refuse any repetition). ``defined`` maps the full names defined so
    far to their definitions written out in full, and receives those ``node`` defines;
    ``definitions`` holds every named type, to write them. Raises
    :class:`InvalidSchema` when a type is defined again differently."""

    def walk(node: Json, space: str | None) -> Json:
        if isinstance(node, list):
            return [walk(branch, space) for branch in node]
        if not isinstance(node, dict):
            return node
        kind = node.get("type")
        if kind in NAMED_TYPES and isinstance(node.get("name"), str):
            definition = Definition(node, space)
            name = definition.name
            in_full = _written_in_full(definition, definitions)
            earlier = defined.get(name.full)
            if earlier is not None:
                if earlier != in_full:
                    raise InvalidSchema(f"can't redefine {name.full} differently")
                return name.full
            defined[name.full] = in_full
            fields = node.get("fields")
            if kind in ("record", "error") and isinstance(fields, list):
                return {**node, "fields": [_walk_field(field, name.space) for field in fields]}
            return node
        if kind == "array" and "items" in node:
            return {**node, "items": walk(node["items"], space)}
        if kind == "map" and "values" in node:
            return {**node, "values": walk(node["values"], space)}
        return node

    def _walk_field(field: Json, space: str | None) -> Json:
        if isinstance(field, dict) and "type" in field:
            return {**field, "type": walk(field["type"], space)}
        return field

    return walk(node, space)


def _written_in_full(definition: Definition, definitions: Mapping[str, Definition]) -> str:
    try:
        return to_json_text(_JavaWriter(_Schemas(definitions), set())._named(definition, None))
    except (KeyError, TypeError, InvalidSchema):  # malformed: the libraries will say how
        return json.dumps([definition.enclosing_space, definition.node], sort_keys=True)


def top_level_name(node: Json) -> str | None:
    """The full name of the named type ``node`` is, if it is one."""
    if isinstance(node, dict) and node.get("type") in NAMED_TYPES:
        return Definition(node, None).name.full
    return None


class _Schemas:
    """The named types a schema and its references define, and how a name used at some
    place resolves (Java's ``ParseContext.find``: in the current namespace, else as
    written)."""

    def __init__(self, definitions: Mapping[str, Definition]) -> None:
        self.definitions = definitions

    def resolve(self, name: str, space: str | None) -> str:
        if space is not None and "." not in name:
            candidate = f"{space}.{name}"
            if candidate in self.definitions:
                return candidate
        return name


def canonical_text(
    node: Json, definitions: Mapping[str, Definition], referenced_names: Iterable[str]
) -> str:
    """Java's ``Schema.toString(referenced, false)`` of the schema ``node``: see the
    module's docstring. ``referenced_names`` are the full names of the referenced
    schemas' top-level types, written by name."""
    writer = _JavaWriter(_Schemas(definitions), set(referenced_names))
    return to_json_text(writer.schema(node, None))


def normalized_text(
    node: Json, definitions: Mapping[str, Definition], referenced_names: Iterable[str]
) -> str:
    """Confluent's normalized text of the schema ``node`` (its
    ``AvroSchemaUtils.toNormalizedString``): see the module's docstring."""
    normalizer = _Normalizer(_Schemas(definitions), set(referenced_names))
    return to_json_text(normalizer.schema(node, None))


class _JavaWriter:
    """Avro Java's ``toJson`` over the schema's JSON."""

    def __init__(self, schemas: _Schemas, known_names: set[str]) -> None:
        self._schemas = schemas
        self._known_names = known_names

    def schema(self, node: Json, space: str | None) -> Json:
        if isinstance(node, str):
            if node in PRIMITIVE_TYPES:
                return node
            return self._reference(self._schemas.resolve(node, space), space)
        if isinstance(node, list):
            return [self.schema(branch, space) for branch in node]
        node = _object(node)
        kind = node.get("type")
        if kind in NAMED_TYPES:
            return self._named(Definition(node, space), space)
        props = _properties(node, _SCHEMA_RESERVED)
        if kind in PRIMITIVE_TYPES:
            return {"type": kind, **props} if props else kind
        if kind == "array":
            return {"type": "array", "items": self.schema(node["items"], space), **props}
        if kind == "map":
            return {"type": "map", "values": self.schema(node["values"], space), **props}
        if isinstance(kind, str):  # a named type's name as the "type" of an object
            return self.schema(kind, space)
        raise InvalidSchema(f"Invalid Avro schema: no type in {to_json_text(node)}")

    def _reference(self, full_name: str, space: str | None) -> Json:
        if full_name in self._known_names or full_name not in self._schemas.definitions:
            return Name.of(full_name, None).qualified(space)
        # a type defined by a reference inside one of its types: Java writes it in full
        return self._named(self._schemas.definitions[full_name], space)

    def _named(self, definition: Definition, current_space: str | None) -> Json:
        name = definition.name
        if name.full in self._known_names:
            return name.qualified(current_space)
        self._known_names.add(name.full)
        node = definition.node
        kind = definition.kind
        out: dict[str, Json] = {"type": kind, "name": name.name}
        if name.space is not None:
            if name.space != current_space:
                out["namespace"] = name.space
        elif current_space is not None:
            out["namespace"] = ""
        doc = node.get("doc")
        if isinstance(doc, str):
            out["doc"] = doc
        if kind == "enum":
            out["symbols"] = _object_list(node["symbols"])
            default = node.get("default")
            if isinstance(default, str):
                out["default"] = default
            out.update(_properties(node, _ENUM_RESERVED))
        elif kind == "fixed":
            out["size"] = node["size"]
            out.update(_properties(node, _SCHEMA_RESERVED))
        else:
            out["fields"] = [self._field(_object(f), name.space) for f in _list(node["fields"])]
            out.update(_properties(node, _SCHEMA_RESERVED))
        aliases = _type_aliases(node, name)
        if aliases:
            out["aliases"] = [alias.qualified(name.space) for alias in aliases]
        return out

    def _field(self, field: dict[str, Json], space: str | None) -> dict[str, Json]:
        out: dict[str, Json] = {"name": field["name"], "type": self.schema(field["type"], space)}
        doc = field.get("doc")
        if isinstance(doc, str):
            out["doc"] = doc
        if "default" in field:
            out["default"] = _field_default(field, floats_from_integers=False)
        order = field.get("order")
        if isinstance(order, str) and order.upper() != "ASCENDING":
            out["order"] = order.lower()
        aliases = _field_aliases(field)
        if aliases:
            out["aliases"] = list(aliases)
        out.update(_properties(field, _FIELD_RESERVED))
        return out


class _Normalizer:
    """Confluent's normal form (adapted by Confluent from Avro's Parsing Canonical Form,
    keeping documentation, defaults, aliases and properties)."""

    def __init__(self, schemas: _Schemas, written_names: set[str]) -> None:
        self._schemas = schemas
        self._written_names = written_names

    def schema(self, node: Json, space: str | None) -> Json:
        if isinstance(node, str):
            if node in PRIMITIVE_TYPES:
                return node
            full_name = self._schemas.resolve(node, space)
            if full_name in self._written_names or full_name not in self._schemas.definitions:
                return full_name
            return self._named(self._schemas.definitions[full_name])
        if isinstance(node, list):
            return [self.schema(branch, space) for branch in node]
        node = _object(node)
        kind = node.get("type")
        if kind in NAMED_TYPES:
            return self._named(Definition(node, space))
        if isinstance(kind, str) and kind not in PRIMITIVE_TYPES and kind not in ("array", "map"):
            return self.schema(kind, space)
        props = _properties(node, _SCHEMA_RESERVED)
        if kind == "array":
            out: dict[str, Json] = {"type": "array", "items": self.schema(node["items"], space)}
        elif kind == "map":
            out = {"type": "map", "values": self.schema(node["values"], space)}
        elif not props:
            return _text(kind)
        else:
            out = {"type": kind}
        out.update(_logical_properties(_text(kind), props) or {})
        _update_sorted(out, props)
        return out

    def _named(self, definition: Definition) -> Json:
        name = definition.name
        if name.full in self._written_names:
            return name.full
        self._written_names.add(name.full)
        node = definition.node
        kind = definition.kind
        out: dict[str, Json] = {"name": name.full, "type": kind}
        reserved = _SCHEMA_RESERVED
        if kind == "enum":
            out["symbols"] = _object_list(node["symbols"])
            reserved = _ENUM_RESERVED
        elif kind == "fixed":
            out["size"] = node["size"]
        else:
            out["fields"] = [self._field(_object(f), name.space) for f in _list(node["fields"])]
        props = _properties(node, reserved)
        out.update(_logical_properties(kind, props) or {})
        doc = node.get("doc")
        if isinstance(doc, str) and doc:
            out["doc"] = doc
        aliases = _type_aliases(node, name)
        if aliases:
            out["aliases"] = list[Json](
                sorted(
                    f".{alias.name}"
                    if alias.space is None and name.space is not None
                    else alias.full
                    for alias in aliases
                )
            )
        default = node.get("default")
        if kind == "enum" and isinstance(default, str):
            out["default"] = default
        _update_sorted(out, props)
        return out

    def _field(self, field: dict[str, Json], space: str | None) -> dict[str, Json]:
        order = field.get("order")
        out: dict[str, Json] = {
            "name": field["name"],
            "type": self.schema(field["type"], space),
            # Confluent writes Java's enum name (ASCENDING), which Java's parser takes in
            # any case and the apache avro package only in lower case
            "order": order.lower() if isinstance(order, str) else "ascending",
        }
        doc = field.get("doc")
        if isinstance(doc, str):
            out["doc"] = doc
        aliases = _field_aliases(field)
        if aliases:
            out["aliases"] = list[Json](sorted(aliases))
        if "default" in field:
            out["default"] = _field_default(field, floats_from_integers=True)
        _update_sorted(out, _properties(field, _FIELD_RESERVED))
        return out


def _update_sorted(out: dict[str, Json], props: Mapping[str, Json]) -> None:
    # a key already written (the logical type's) keeps its place and takes the value,
    # as Jackson reads a duplicate key
    for key in sorted(props):
        out[key] = props[key]


def _logical_properties(kind: str, props: Mapping[str, Json]) -> dict[str, Json] | None:
    """The logical type's attributes as Confluent writes them first, when it is one Avro
    knows on this type (Java ignores the others)."""
    logical_type = props.get("logicalType")
    if not isinstance(logical_type, str) or kind not in _LOGICAL_TYPES.get(logical_type, ()):
        return None
    out: dict[str, Json] = {"logicalType": logical_type}
    if logical_type == "decimal":
        precision = props.get("precision")
        scale = props.get("scale", 0)
        if not _is_int(precision) or not _is_int(scale):
            return None
        assert isinstance(precision, int) and isinstance(scale, int)
        if precision <= 0 or not 0 <= scale <= precision:
            return None
        out["precision"] = precision
        if scale != 0:
            out["scale"] = scale
    return out


def _is_int(value: Json) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _field_default(field: Mapping[str, Json], *, floats_from_integers: bool) -> Json:
    """A field's default as Java keeps it: a string default of a float or double field
    read as a number (Java's parser); an integer one written as a double (Java's
    ``defaultVal()``, which Confluent's normal form writes)."""
    default = field["default"]
    kind = field.get("type")
    if isinstance(kind, dict):
        kind = kind.get("type")
    elif isinstance(kind, list) and kind and floats_from_integers:
        kind = kind[0] if isinstance(kind[0], str) else None
    if kind in ("float", "double"):
        if isinstance(default, str):
            try:
                return float(default)
            except ValueError:
                return default
        if floats_from_integers and _is_int(default):
            assert isinstance(default, int)
            return float(default)
    return default


def _type_aliases(node: Mapping[str, Json], name: Name) -> list[Name]:
    aliases = node.get("aliases")
    if not isinstance(aliases, list):
        return []
    found: dict[Name, None] = {}
    for alias in aliases:
        if isinstance(alias, str):
            found[Name.of(alias, name.space)] = None
    return list(found)


def _field_aliases(field: Mapping[str, Json]) -> list[str]:
    aliases = field.get("aliases")
    if not isinstance(aliases, list):
        return []
    return list(dict.fromkeys(alias for alias in aliases if isinstance(alias, str)))


def _properties(node: Mapping[str, Json], reserved: frozenset[str]) -> dict[str, Json]:
    return {key: value for key, value in node.items() if key not in reserved}


def _object(node: Json) -> dict[str, Json]:
    if not isinstance(node, dict):
        raise InvalidSchema(f"Invalid Avro schema: expected an object, found {to_json_text(node)}")
    return node


def _list(node: Json) -> list[Json]:
    if not isinstance(node, list):
        raise InvalidSchema(f"Invalid Avro schema: expected an array, found {to_json_text(node)}")
    return node


def _object_list(node: Json) -> list[Json]:
    return list(_list(node))


def _text(node: Json) -> str:
    if not isinstance(node, str):
        raise InvalidSchema(f"Invalid Avro schema: expected a string, found {to_json_text(node)}")
    return node


# --- JSON as Jackson writes it -------------------------------------------------------

_ESCAPED: Final = re.compile(r'[\x00-\x1f"\\]')
_SHORT_ESCAPES: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT_ESCAPES.get(char) or f"\\u{ord(char):04X}"


def _string(text: str) -> str:
    return '"' + _ESCAPED.sub(_escape, text) + '"'


def java_double(value: float) -> str:
    """``value`` as Java's ``Double.toString`` writes it (what Jackson writes): the
    shortest digits, plain between 10^-3 and 10^7, else ``d.dddE±n``."""
    if math.isnan(value):
        return '"NaN"'
    if value in (float("inf"), float("-inf")):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    if value == 0:
        return "-0.0" if str(value).startswith("-") else "0.0"
    sign, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped
    point = len(digits) + exponent - 1  # the power of ten of the first digit
    prefix = "-" if sign else ""
    if 1e-3 <= abs(value) < 1e7:
        if point >= 0:
            whole = digits[: point + 1].ljust(point + 1, "0")
            fraction = digits[point + 1 :] or "0"
        else:
            whole = "0"
            fraction = "0" * (-point - 1) + digits
        return f"{prefix}{whole}.{fraction}"
    return f"{prefix}{digits[0]}.{digits[1:] or '0'}E{point}"


def to_json_text(value: Json) -> str:
    """Compact JSON as Avro Java writes it with Jackson."""
    parts: list[str] = []
    _write(value, parts.append)
    return "".join(parts)


def _write(value: Json, out: Callable[[str], None]) -> None:
    if value is None:
        out("null")
    elif value is True:
        out("true")
    elif value is False:
        out("false")
    elif isinstance(value, int):
        out(str(value))
    elif isinstance(value, float):
        out(java_double(value))
    elif isinstance(value, str):
        out(_string(value))
    elif isinstance(value, list):
        out("[")
        for index, item in enumerate(value):
            if index:
                out(",")
            _write(item, out)
        out("]")
    else:
        out("{")
        for index, (key, item) in enumerate(value.items()):
            if index:
                out(",")
            out(_string(key))
            out(":")
            _write(item, out)
        out("}")
