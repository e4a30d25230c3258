"""Spark columns of a registry schema: the Spark type a schema's values read into, the
conversion of a decoded value into that type, and back for writing.

Pure functions of a parsed schema (no I/O), used on the driver (the type, at planning
time) and on executors (the conversions)::

    ParsedSchema ─► column_for() ─► ColumnPlan(data_type, convert)
                                        │           └─ decoded value ─► the Python value
                                        │              Arrow builds the column from
                                        └─ the Spark type of the key/value column

Avro (walking fastavro's parsed schema): record → struct, array → array, map →
map<string, …>, enum → string, bytes/fixed → binary, a union with null → its other
branch, nullable; a union of several types → struct ``member0, member1, …`` (as Spark's
``from_avro``); logical types date → date, timestamp-millis/micros → timestamp,
local-timestamp-* → timestamp_ntz, decimal → decimal(p, s) (string beyond precision 38),
uuid → string, time-millis → int and time-micros → long (of the day).

JSON Schema: an object's properties → struct fields (every field nullable: a property
may be absent), string/integer/number/boolean → string/long/double/boolean, array →
array; anything else (combinators, several types, objects without properties) → string
holding the value's compact JSON. Local ``$ref`` s are followed.

Protobuf: a message's fields → struct fields; 32-bit integers → int, 64-bit → long,
uint64 → decimal(20, 0), float/double, bool, string, bytes → binary, enum → string (its
name), repeated → array, map → map, nested message → struct, Timestamp → timestamp,
wrappers → their value; other well-known types → string (their JSON). A field without
presence that a message leaves out reads as its default (0, "", false), as in Protobuf.

Recursive schemas (a record inside itself) cannot be Spark types and are refused with
:class:`UnsupportedSchema`, as Spark's ``from_avro`` refuses them.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sluice.schemas.api import ParsedSchema, SchemaType

Convert = Callable[[Any], Any]

SPARK_DECIMAL_PRECISION_MAX: Final = 38
"""Spark's widest decimal; wider Avro decimals read as strings."""

JSON_REFERENCES_FOLLOWED_MAX: Final = 64
"""``$ref`` s followed along one path of a JSON Schema before the rest is JSON text."""


LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1
"""The range of Spark's long, which JSON integers read into."""


class UnsupportedSchema(ValueError):
    """A schema whose values cannot be a Spark column (a recursive type)."""


@dataclass(frozen=True, slots=True)
class ColumnPlan:
    """The Spark type of a schema's values, and how a decoded value becomes it."""

    data_type: DataType
    convert: Convert
    """Called with values that are not None."""
    nullable: bool = True
    absent: Any = None
    """The column's value where the decoded value is None or missing (Protobuf: the
    field's default), already converted."""

    def value_of(self, value: Any) -> Any:
        return self.absent if value is None else self.convert(value)


def _same(value: Any) -> Any:
    return value


def column_for(schema: ParsedSchema) -> ColumnPlan:
    """The column a value of ``schema`` reads into. Raises :class:`UnsupportedSchema`."""
    if schema.schema_type is SchemaType.AVRO:
        from sluice.schemas.avro import AvroSchema  # noqa: PLC0415

        assert isinstance(schema, AvroSchema)
        fastavro_schema = schema.writer_schema
        named: dict[str, Any] = {}
        _collect_named(fastavro_schema, named)
        return _avro(fastavro_schema, named, ())
    if schema.schema_type is SchemaType.JSON:
        from sluice.schemas.json_schema import JsonSchema  # noqa: PLC0415

        assert isinstance(schema, JsonSchema)
        root = schema.root
        return _json_schema(root, root, 0)
    from sluice.schemas.protobuf import ProtobufSchema  # noqa: PLC0415

    assert isinstance(schema, ProtobufSchema)
    return _message(schema.message_descriptor([0]), ())


# ── Avro ───────────────────────────────────────────────────────────────────────────────

_AVRO_PRIMITIVES: Final[dict[str, DataType]] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}


def _collect_named(node: Any, named: dict[str, Any]) -> None:
    """Every named type (record, enum, fixed) defined in fastavro's parsed ``node``, by
    full name (fastavro writes full names), for the places that use them by name."""
    if isinstance(node, list):
        for branch in node:
            _collect_named(branch, named)
        return
    if not isinstance(node, dict):
        return
    if node.get("type") in ("record", "error", "enum", "fixed") and "name" in node:
        if node["name"] in named:
            return
        named[node["name"]] = node
    for field in node.get("fields", ()):
        _collect_named(field["type"], named)
    for key in ("items", "values"):
        if key in node:
            _collect_named(node[key], named)
    if isinstance(node.get("type"), dict | list):
        _collect_named(node["type"], named)


def _microseconds_of_day(value: datetime.time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def _avro(node: Any, named: Mapping[str, Any], path: tuple[str, ...]) -> ColumnPlan:
    if isinstance(node, str):
        if node == "null":
            return ColumnPlan(StringType(), _same)
        if node in _AVRO_PRIMITIVES:
            return ColumnPlan(_AVRO_PRIMITIVES[node], _same, nullable=False)
        if node not in named:
            raise UnsupportedSchema(f"the Avro schema uses the type {node}, defined nowhere")
        return _avro(named[node], named, path)
    if isinstance(node, list):
        return _avro_union(node, named, path)
    kind = node["type"]
    logical = node.get("logicalType")
    if logical is not None:
        plan = _avro_logical(node, logical)
        if plan is not None:
            return plan
    if kind in {"record", "error"}:
        name = node["name"]
        if name in path:
            raise UnsupportedSchema(
                f"the Avro record {name} contains itself: a recursive type cannot be a Spark column"
            )
        inner = (*path, name)
        fields = [(f["name"], _avro(f["type"], named, inner)) for f in node["fields"]]
        return _struct(fields)
    if kind == "enum":
        return ColumnPlan(StringType(), _same, nullable=False)
    if kind == "fixed":
        return ColumnPlan(BinaryType(), _same, nullable=False)
    if kind == "array":
        items = _avro(node["items"], named, path)
        return _array(items)
    if kind == "map":
        values = _avro(node["values"], named, path)
        return _map(StringType(), _same, values)
    return _avro(kind, named, path)


def _avro_logical(node: Mapping[str, Any], logical: str) -> ColumnPlan | None:
    """The column of a logical type fastavro reads into a Python object; None for the
    logical types it leaves as their underlying type."""
    if logical == "date":
        return ColumnPlan(DateType(), _same, nullable=False)
    if logical in ("timestamp-millis", "timestamp-micros"):
        return ColumnPlan(TimestampType(), _same, nullable=False)
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return ColumnPlan(TimestampNTZType(), _same, nullable=False)
    if logical == "decimal":
        precision = int(node.get("precision", 0))
        scale = int(node.get("scale", 0))
        if 0 < precision <= SPARK_DECIMAL_PRECISION_MAX:
            return ColumnPlan(DecimalType(precision, scale), _same, nullable=False)
        return ColumnPlan(StringType(), str, nullable=False)
    if logical == "uuid":
        return ColumnPlan(StringType(), str, nullable=False)
    if logical == "time-millis":
        return ColumnPlan(IntegerType(), lambda v: _microseconds_of_day(v) // 1000, nullable=False)
    if logical == "time-micros":
        return ColumnPlan(LongType(), _microseconds_of_day, nullable=False)
    return None


def _avro_union(branches: list[Any], named: Mapping[str, Any], path: tuple[str, ...]) -> ColumnPlan:
    others = [b for b in branches if b != "null"]
    nullable = len(others) < len(branches)
    if len(others) == 1:
        only = _avro(others[0], named, path)
        return ColumnPlan(only.data_type, only.convert, nullable=nullable or only.nullable)
    plans = [_avro(b, named, path) for b in others]
    matchers = [_avro_matcher(b, named) for b in others]
    data_type = StructType(
        [StructField(f"member{i}", p.data_type, nullable=True) for i, p in enumerate(plans)]
    )

    def convert(value: Any) -> Any:
        for index, (matches, plan) in enumerate(zip(matchers, plans, strict=True)):
            if matches(value):
                return {f"member{index}": plan.convert(value)}
        raise ValueError(f"a {type(value).__name__} fits no branch of the union")

    return ColumnPlan(data_type, convert, nullable=True)


def _avro_matcher(node: Any, named: Mapping[str, Any]) -> Callable[[Any], bool]:
    """Whether a value fastavro read is one of the branch ``node``."""
    if isinstance(node, str) and node not in _AVRO_PRIMITIVES and node != "null":
        node = named[node]
    kind = node if isinstance(node, str) else node["type"]
    logical = None if isinstance(node, str) else node.get("logicalType")
    python_types: dict[str, tuple[type, ...]] = {
        "date": (datetime.date,),
        "timestamp-millis": (datetime.datetime,),
        "timestamp-micros": (datetime.datetime,),
        "local-timestamp-millis": (datetime.datetime,),
        "local-timestamp-micros": (datetime.datetime,),
        "decimal": (decimal.Decimal,),
        "time-millis": (datetime.time,),
        "time-micros": (datetime.time,),
    }
    if logical in python_types:
        wanted = python_types[logical]
        return lambda v: isinstance(v, wanted)
    if kind == "boolean":
        return lambda v: isinstance(v, bool)
    if kind in ("int", "long"):
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if kind in ("float", "double"):
        return lambda v: isinstance(v, float)
    if kind in ("string", "enum"):
        return lambda v: isinstance(v, str)
    if kind in ("bytes", "fixed"):
        return lambda v: isinstance(v, bytes)
    if kind == "array":
        return lambda v: isinstance(v, list)
    if kind in ("record", "error"):
        names = {f["name"] for f in node["fields"]}
        return lambda v: isinstance(v, dict) and set(v) == names
    return lambda v: isinstance(v, dict)  # map


# ── JSON Schema ────────────────────────────────────────────────────────────────────────


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_AS_JSON_TEXT: Final = ColumnPlan(StringType(), _json_text)


def _json_integer(value: Any) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not (math.isfinite(value) and value.is_integer()))
    ):
        raise ValueError(f"{_json_text(value)} is not an integer")
    if not LONG_MIN <= value <= LONG_MAX:
        raise ValueError(f"{_json_text(value)} is beyond a long, the type of its column")
    return int(value)


def _json_number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{_json_text(value)} is not a number")
    return float(value)


def _json_typed(expected: type, name: str) -> Convert:
    def convert(value: Any) -> Any:
        if not isinstance(value, expected):
            raise ValueError(f"{_json_text(value)} is not a {name}")
        return value

    return convert


def _follow_ref(root: Any, reference: str) -> Any | None:
    """The schema a local ``$ref`` (``#/definitions/x``) names, or None."""
    if not reference.startswith("#"):
        return None
    node = root
    for escaped in reference[1:].split("/")[1:]:
        token = escaped.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


def _json_schema(node: Any, root: Any, references_followed: int) -> ColumnPlan:
    if not isinstance(node, dict):
        return _AS_JSON_TEXT
    if "$ref" in node and isinstance(node["$ref"], str):
        if references_followed >= JSON_REFERENCES_FOLLOWED_MAX:
            return _AS_JSON_TEXT
        target = _follow_ref(root, node["$ref"])
        return _json_schema(target, root, references_followed + 1)
    kind = node.get("type")
    if isinstance(kind, list):
        others = [k for k in kind if k != "null"]
        kind = others[0] if len(others) == 1 else None
    if kind is None and isinstance(node.get("properties"), dict):
        kind = "object"
    if kind == "object":
        properties = node.get("properties")
        if not isinstance(properties, dict) or not properties:
            return _AS_JSON_TEXT
        fields = [
            (name, _json_schema(sub, root, references_followed)) for name, sub in properties.items()
        ]
        plan = _struct([(name, ColumnPlan(p.data_type, p.convert)) for name, p in fields])
        inner = plan.convert

        def convert_object(value: Any) -> Any:
            if not isinstance(value, dict):
                raise ValueError(f"{_json_text(value)} is not an object")
            return inner(value)

        return ColumnPlan(plan.data_type, convert_object)
    if kind == "array":
        items = node.get("items")
        if not isinstance(items, dict):
            return _AS_JSON_TEXT
        plan = _array(_json_schema(items, root, references_followed))
        inner_array = plan.convert

        def convert_array(value: Any) -> Any:
            if not isinstance(value, list):
                raise ValueError(f"{_json_text(value)} is not an array")
            return inner_array(value)

        return ColumnPlan(plan.data_type, convert_array)
    if kind == "string":
        return ColumnPlan(StringType(), _json_typed(str, "string"))
    if kind == "integer":
        return ColumnPlan(LongType(), _json_integer)
    if kind == "number":
        return ColumnPlan(DoubleType(), _json_number)
    if kind == "boolean":
        return ColumnPlan(BooleanType(), _json_typed(bool, "boolean"))
    return _AS_JSON_TEXT


# ── Protobuf ───────────────────────────────────────────────────────────────────────────

# FieldDescriptor.TYPE_* numbers (descriptor.proto)
_PROTOBUF_INT32: Final = frozenset({5, 15, 17})  # int32, sfixed32, sint32
_PROTOBUF_UINT32: Final = frozenset({7, 13})  # fixed32, uint32
_PROTOBUF_INT64: Final = frozenset({3, 16, 18})  # int64, sfixed64, sint64
_PROTOBUF_UINT64: Final = frozenset({4, 6})  # uint64, fixed64
_PROTOBUF_DOUBLE: Final = 1
_PROTOBUF_FLOAT: Final = 2
_PROTOBUF_BOOL: Final = 8
_PROTOBUF_STRING: Final = 9
_PROTOBUF_MESSAGE: Final = frozenset({10, 11})  # group, message
_PROTOBUF_BYTES: Final = 12
_PROTOBUF_ENUM: Final = 14

_WRAPPERS: Final = {
    "google.protobuf.DoubleValue": _PROTOBUF_DOUBLE,
    "google.protobuf.FloatValue": _PROTOBUF_FLOAT,
    "google.protobuf.Int64Value": 3,
    "google.protobuf.UInt64Value": 4,
    "google.protobuf.Int32Value": 5,
    "google.protobuf.UInt32Value": 13,
    "google.protobuf.BoolValue": _PROTOBUF_BOOL,
    "google.protobuf.StringValue": _PROTOBUF_STRING,
    "google.protobuf.BytesValue": _PROTOBUF_BYTES,
}


def _protobuf_float(value: Any) -> float:
    # Protobuf's JSON mapping writes NaN and the infinities as strings.
    return float(value)


def _parse_timestamp(value: Any) -> datetime.datetime:
    text = str(value).replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(text)


def _protobuf_scalar(field_type: int, enum_default: str | None) -> tuple[DataType, Convert, Any]:
    """(Spark type, conversion from Protobuf's JSON mapping, the field's default)."""
    if field_type in _PROTOBUF_INT32:
        return IntegerType(), int, 0
    if field_type in _PROTOBUF_UINT32 or field_type in _PROTOBUF_INT64:
        return LongType(), int, 0
    if field_type in _PROTOBUF_UINT64:
        return DecimalType(20, 0), lambda v: decimal.Decimal(int(v)), decimal.Decimal(0)
    if field_type == _PROTOBUF_DOUBLE:
        return DoubleType(), _protobuf_float, 0.0
    if field_type == _PROTOBUF_FLOAT:
        return FloatType(), _protobuf_float, 0.0
    if field_type == _PROTOBUF_BOOL:
        return BooleanType(), bool, False
    if field_type == _PROTOBUF_BYTES:
        return BinaryType(), base64.b64decode, b""
    if field_type == _PROTOBUF_ENUM:
        return StringType(), str, enum_default
    return StringType(), str, ""


def _field_plan(field: Any, path: tuple[str, ...]) -> tuple[ColumnPlan, Any]:
    """A field's column (without repetition) and the value it has when absent."""
    if field.type in _PROTOBUF_MESSAGE:
        message = field.message_type
        full_name = message.full_name
        if full_name in _WRAPPERS:
            data_type, convert, _ = _protobuf_scalar(_WRAPPERS[full_name], None)
            return ColumnPlan(data_type, convert), None
        if full_name == "google.protobuf.Timestamp":
            return ColumnPlan(TimestampType(), _parse_timestamp), None
        if full_name.startswith("google.protobuf."):
            return _AS_JSON_TEXT, None
        return _message(message, path), None
    enum_default = None
    if field.type == _PROTOBUF_ENUM:
        enum_default = field.enum_type.values[0].name
    data_type, convert, default = _protobuf_scalar(field.type, enum_default)
    return ColumnPlan(data_type, convert, nullable=field.has_presence), default


def _message(descriptor: Any, path: tuple[str, ...]) -> ColumnPlan:
    if descriptor.full_name in path:
        raise UnsupportedSchema(
            f"the Protobuf message {descriptor.full_name} contains itself: a recursive "
            "type cannot be a Spark column"
        )
    inner = (*path, descriptor.full_name)
    plans: list[tuple[str, ColumnPlan]] = []
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            entry = field.message_type
            key_plan, _ = _field_plan(entry.fields_by_name["key"], inner)
            value_plan, _ = _field_plan(entry.fields_by_name["value"], inner)
            map_plan = _map(key_plan.data_type, key_plan.convert, value_plan)
            plans.append((field.name, _defaulted(map_plan, [], nullable=False)))
            continue
        plan, default = _field_plan(field, inner)
        if field.is_repeated:
            plans.append((field.name, _defaulted(_array(plan), [], nullable=False)))
        elif field.has_presence:
            plans.append((field.name, plan))
        else:
            plans.append((field.name, _defaulted(plan, default, nullable=False)))
    return _struct(plans)


def _defaulted(plan: ColumnPlan, default: Any, *, nullable: bool) -> ColumnPlan:
    """``plan`` reading an absent (None) value as ``default`` (already converted)."""
    return ColumnPlan(plan.data_type, plan.convert, nullable=nullable, absent=default)


# ── shapes shared by the formats ───────────────────────────────────────────────────────


def _struct(fields: list[tuple[str, ColumnPlan]]) -> ColumnPlan:
    data_type = StructType(
        [StructField(name, plan.data_type, nullable=plan.nullable) for name, plan in fields]
    )

    def convert(value: Any) -> Any:
        return {name: plan.value_of(value.get(name)) for name, plan in fields}

    return ColumnPlan(data_type, convert, nullable=False)


def _array(items: ColumnPlan) -> ColumnPlan:
    def convert(value: Any) -> Any:
        return [items.value_of(item) for item in value]

    return ColumnPlan(ArrayType(items.data_type, items.nullable), convert, nullable=False)


def _map(key_type: DataType, convert_key: Convert, values: ColumnPlan) -> ColumnPlan:
    def convert(value: Any) -> Any:
        return [(convert_key(k), values.value_of(v)) for k, v in value.items()]

    return ColumnPlan(MapType(key_type, values.data_type, values.nullable), convert, nullable=False)


# ── writing: Spark values to a format's values, and an Avro schema for a Spark type ────


def format_value(data_type: DataType, value: Any, schema_type: SchemaType) -> Any:
    """A Spark value (``Row.asDict(recursive=True)``) as the value ``schema_type``'s
    encoder takes: Avro takes Python objects (dates, decimals, aware datetimes), JSON
    and Protobuf their JSON mapping (ISO 8601 text, base64 bytes)."""
    if value is None:
        return None
    if isinstance(data_type, StructType):
        return {
            field.name: format_value(field.dataType, value.get(field.name), schema_type)
            for field in data_type.fields
            if not (schema_type is not SchemaType.AVRO and value.get(field.name) is None)
        }
    if isinstance(data_type, ArrayType):
        return [format_value(data_type.elementType, item, schema_type) for item in value]
    if isinstance(data_type, MapType):
        return {str(k): format_value(data_type.valueType, v, schema_type) for k, v in value.items()}
    if isinstance(data_type, TimestampType) and isinstance(value, datetime.datetime):
        # Spark hands timestamps to Python as naive local times.
        aware = value.astimezone(datetime.UTC) if value.tzinfo is None else value
        if schema_type is SchemaType.AVRO:
            return aware
        return aware.isoformat().replace("+00:00", "Z")
    if schema_type is SchemaType.AVRO:
        return bytes(value) if isinstance(value, bytearray) else value
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value) if schema_type is SchemaType.PROTOBUF else float(value)
    return value


AVRO_TOP_LEVEL_RECORD_NAME: Final = "topLevelRecord"
"""The name of the record an auto-registered schema writes (Spark's ``to_avro``'s)."""


def avro_schema_for(data_type: DataType, name: str = AVRO_TOP_LEVEL_RECORD_NAME) -> Any:
    """The Avro schema (as JSON data) of a Spark type, as Spark's ``to_avro`` derives
    it: nullable fields are unions with null (default null), nested structs are records
    named after their path, timestamps timestamp-micros, decimals bytes decimals."""
    return _avro_type_of(data_type, name, nullable=False)


def _avro_type_of(data_type: DataType, name: str, *, nullable: bool) -> Any:
    found: Any
    if isinstance(data_type, StructType):
        found = {
            "type": "record",
            "name": name,
            "fields": [
                _avro_field(field.name, field.dataType, f"{name}_{field.name}", field.nullable)
                for field in data_type.fields
            ],
        }
    elif isinstance(data_type, ArrayType):
        found = {
            "type": "array",
            "items": _avro_type_of(
                data_type.elementType, f"{name}_item", nullable=data_type.containsNull
            ),
        }
    elif isinstance(data_type, MapType):
        if not isinstance(data_type.keyType, StringType):
            raise UnsupportedSchema(f"Avro maps have string keys, not {data_type.keyType}")
        found = {
            "type": "map",
            "values": _avro_type_of(
                data_type.valueType, f"{name}_value", nullable=data_type.valueContainsNull
            ),
        }
    elif isinstance(data_type, DecimalType):
        found = {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": data_type.precision,
            "scale": data_type.scale,
        }
    elif isinstance(data_type, DateType):
        found = {"type": "int", "logicalType": "date"}
    elif isinstance(data_type, TimestampType):
        found = {"type": "long", "logicalType": "timestamp-micros"}
    elif isinstance(data_type, TimestampNTZType):
        found = {"type": "long", "logicalType": "local-timestamp-micros"}
    else:
        found = _avro_primitive_of(data_type)
    return ["null", found] if nullable else found


def _avro_field(name: str, data_type: DataType, record_name: str, nullable: bool) -> Any:
    field: dict[str, Any] = {
        "name": name,
        "type": _avro_type_of(data_type, record_name, nullable=nullable),
    }
    if nullable:
        field["default"] = None
    return field


def _avro_primitive_of(data_type: DataType) -> str:
    for python_type, avro_name in (
        (BooleanType, "boolean"),
        (IntegerType, "int"),
        (LongType, "long"),
        (FloatType, "float"),
        (DoubleType, "double"),
        (StringType, "string"),
        (BinaryType, "bytes"),
    ):
        if isinstance(data_type, python_type):
            return avro_name
    if isinstance(data_type, ByteType | ShortType):
        return "int"
    raise UnsupportedSchema(f"no Avro type for the Spark type {data_type.simpleString()}")
