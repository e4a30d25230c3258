"""The ``_schemas`` records: Confluent's bytes decode, and Sluice writes the same bytes."""

from __future__ import annotations

import pytest

from sluice.common.errors import CorruptMessage
from sluice.registry.records import (
    ClearSubjectKey,
    ClearSubjectValue,
    ConfigKey,
    ConfigValue,
    DeleteSubjectKey,
    DeleteSubjectValue,
    IgnoredKey,
    ModeKey,
    ModeValue,
    NoopKey,
    SchemaKey,
    SchemaValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from sluice.schemas.api import Reference, SchemaType

AVRO_TEXT = '{"type":"record","name":"myrecord","fields":[{"name":"f1","type":"string"}]}'

# (key bytes, value bytes, key, value) as Confluent's Schema Registry writes them.
GOLDEN = [
    (
        b'{"keytype":"SCHEMA","subject":"test","version":1,"magic":1}',
        b'{"subject":"test","version":1,"id":1,"schema":'
        b'"{\\"type\\":\\"record\\",\\"name\\":\\"myrecord\\",\\"fields\\":'
        b'[{\\"name\\":\\"f1\\",\\"type\\":\\"string\\"}]}","deleted":false}',
        SchemaKey("test", 1),
        SchemaValue("test", 1, 1, AVRO_TEXT),
    ),
    (
        b'{"keytype":"SCHEMA","subject":"orders-value","version":3,"magic":1}',
        b'{"subject":"orders-value","version":3,"id":7,"schemaType":"PROTOBUF",'
        b'"references":[{"name":"common.proto","subject":"common","version":2}],'
        b'"schema":"syntax = \\"proto3\\";","deleted":true}',
        SchemaKey("orders-value", 3),
        SchemaValue(
            "orders-value",
            3,
            7,
            'syntax = "proto3";',
            SchemaType.PROTOBUF,
            (Reference("common.proto", "common", 2),),
            deleted=True,
        ),
    ),
    (
        b'{"keytype":"CONFIG","magic":0}',
        b'{"compatibilityLevel":"FULL"}',
        ConfigKey(None),
        ConfigValue(None, "FULL"),
    ),
    (
        b'{"keytype":"CONFIG","subject":"t-value","magic":0}',
        b'{"subject":"t-value","compatibilityLevel":"NONE"}',
        ConfigKey("t-value"),
        ConfigValue("t-value", "NONE"),
    ),
    (
        b'{"keytype":"MODE","subject":"s","magic":0}',
        b'{"subject":"s","mode":"READONLY"}',
        ModeKey("s"),
        ModeValue("s", "READONLY"),
    ),
    (
        b'{"keytype":"DELETE_SUBJECT","subject":"s","magic":0}',
        b'{"subject":"s","version":4}',
        DeleteSubjectKey("s"),
        DeleteSubjectValue("s", 4),
    ),
    (
        b'{"keytype":"CLEAR_SUBJECT","subject":"s","magic":0}',
        b'{"subject":"s"}',
        ClearSubjectKey("s"),
        ClearSubjectValue("s"),
    ),
]


@pytest.mark.parametrize(("key_bytes", "value_bytes", "key", "value"), GOLDEN)
def test_confluents_records_decode_and_encode_byte_for_byte(
    key_bytes: bytes, value_bytes: bytes, key: object, value: object
) -> None:
    decoded_key = decode_key(key_bytes)
    assert decoded_key == key
    assert decode_value(decoded_key, value_bytes) == value
    assert encode_key(decoded_key) == key_bytes
    decoded_value = decode_value(decoded_key, value_bytes)
    assert decoded_value is not None
    assert encode_value(decoded_value) == value_bytes


def test_noop_key_and_tombstones() -> None:
    assert decode_key(b'{"keytype":"NOOP","magic":0}') == NoopKey()
    assert encode_key(NoopKey()) == b'{"keytype":"NOOP","magic":0}'
    assert decode_value(SchemaKey("s", 1), None) is None


def test_older_confluent_keys_with_a_null_subject_mean_the_global_config() -> None:
    assert decode_key(b'{"magic":0,"keytype":"CONFIG","subject":null}') == ConfigKey(None)
    assert decode_key(b'{"keytype":"MODE","subject":null,"magic":0}') == ModeKey(None)


def test_confluents_fields_sluice_does_not_use_are_kept_and_written_back() -> None:
    key = SchemaKey("s", 1)
    raw = (
        b'{"subject":"s","version":1,"id":2,"md5":"abc","schemaType":"JSON",'
        b'"metadata":{"properties":{"owner":"x"}},"ruleSet":{"domainRules":[]},'
        b'"schema":"{}","deleted":false,"timestamp":5}'
    )
    value = decode_value(key, raw)
    assert isinstance(value, SchemaValue)
    assert value.schema_type is SchemaType.JSON
    assert value.extra == {
        "md5": "abc",
        "metadata": {"properties": {"owner": "x"}},
        "ruleSet": {"domainRules": []},
        "timestamp": 5,
    }
    assert encode_value(value) == raw


def test_contexts_and_associations_are_ignored_not_corrupt() -> None:
    key = decode_key(b'{"keytype":"CONTEXT","tenant":"default","context":".ctx","magic":0}')
    assert key == IgnoredKey("CONTEXT")
    assert decode_value(key, b'{"tenant":"default","context":".ctx"}') is None


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xff\xfe",
        b"not json",
        b"[1,2]",
        b'{"magic":0}',
        b'{"keytype":"GROUP","magic":0}',
        b'{"keytype":"SCHEMA","subject":"s","version":"1","magic":1}',
        b'{"keytype":"SCHEMA","subject":"s","version":0,"magic":1}',
        b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":7}',
        b'{"keytype":"SCHEMA","version":1,"magic":1}',
        b'{"keytype":"DELETE_SUBJECT","subject":3,"magic":0}',
    ],
)
def test_keys_that_are_not_ours_are_corrupt(raw: bytes) -> None:
    with pytest.raises(CorruptMessage):
        decode_key(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"{",
        b'"text"',
        b'{"subject":"s","version":1,"id":1,"deleted":false}',
        b'{"subject":"s","version":2,"id":1,"schema":"x","deleted":false}',
        b'{"subject":"other","version":1,"id":1,"schema":"x","deleted":false}',
        b'{"subject":"s","version":1,"id":-1,"schema":"x","deleted":false}',
        b'{"subject":"s","version":1,"id":1,"schema":"x","deleted":"no"}',
        b'{"subject":"s","version":1,"id":1,"schema":"x","schemaType":"XML"}',
        b'{"subject":"s","version":1,"id":1,"schema":"x","references":[{"name":"a"}]}',
        b'{"subject":"s","version":1,"id":true,"schema":"x"}',
        b'{"subject":"s","version":1,"id":1,"schema":"\\ud800"}',
    ],
)
def test_schema_values_that_are_not_ours_are_corrupt(raw: bytes) -> None:
    with pytest.raises(CorruptMessage):
        decode_value(SchemaKey("s", 1), raw)


def test_every_split_of_a_record_is_corrupt_or_whole() -> None:
    _, value_bytes, key, value = GOLDEN[1]
    for end in range(len(value_bytes)):
        with pytest.raises(CorruptMessage):
            decode_value(key, value_bytes[:end])
    assert decode_value(key, value_bytes + b"  ") == value


@pytest.mark.parametrize(
    ("key", "raw"),
    [
        (ConfigKey(None), b'{"compatibilityLevel":"SOMETIMES"}'),
        (ConfigKey(None), b'{"compatibilityLevel":5}'),
        (ModeKey("s"), b'{"mode":"FORWARD"}'),
        (ModeKey("s"), b'{"mode":null}'),
        (DeleteSubjectKey("s"), b'{"subject":"s"}'),
    ],
)
def test_other_values_that_are_not_ours_are_corrupt(key: object, raw: bytes) -> None:
    with pytest.raises(CorruptMessage):
        decode_value(key, raw)  # type: ignore[arg-type]
