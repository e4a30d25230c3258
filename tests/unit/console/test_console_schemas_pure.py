"""The console's schema parts that need no registry: pretty-printing and diffing schema
texts, the message browser's view of framed and unframed bytes without a registry, the
registry URL a broker's console is given, and a bad ``--schema-registry``."""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner

from sluice.cli.console import console
from sluice.cli.serve import connectable_url
from sluice.client.schema_registry import RegisteredSchema, Schema
from sluice.console.pages_schemas import pretty_schema, unified_diff
from sluice.console.schema_decoding import PageDecoder
from sluice.schemas.api import SchemaType
from sluice.schemas.wire import frame

RECORD = {"type": "record", "name": "A", "fields": [{"name": "x", "type": "int"}]}


def _version(version: int, document: dict[str, object]) -> RegisteredSchema:
    text = json.dumps(document, separators=(",", ":"))
    return RegisteredSchema("a-value", version, 10 + version, Schema(text, SchemaType.AVRO))


def test_json_schemas_are_indented_and_protobuf_is_left_as_written() -> None:
    pretty = pretty_schema(json.dumps(RECORD, separators=(",", ":")))
    assert pretty.splitlines()[:3] == ["{", '  "type": "record",', '  "name": "A",']
    proto = 'syntax = "proto3";\nmessage A { int32 x = 1; }\n'
    assert pretty_schema(proto) == proto


def test_the_diff_shows_the_added_field_and_names_both_versions() -> None:
    fields = [{"name": "x", "type": "int"}, {"name": "y", "type": "string", "default": ""}]
    newer = {**RECORD, "fields": fields}
    lines = unified_diff(_version(1, RECORD), _version(2, newer))
    assert lines[:2] == ["--- a-value version 1 (id 11)", "+++ a-value version 2 (id 12)"]
    assert '+      "name": "y",' in lines
    assert not [line for line in lines[2:] if line.startswith("-")]
    assert unified_diff(_version(1, RECORD), _version(1, RECORD)) == []


def test_without_a_registry_framed_bytes_are_shown_as_stored_saying_why() -> None:
    decoder = PageDecoder(None, "orders")
    framed = frame(7, b'{"a": 1}')
    shown = asyncio.run(decoder.show(framed, "value", "text"))
    assert shown.text == framed.decode() and shown.badge == ""
    assert shown.note == "schema id 7: no Schema Registry to ask; shown as stored"
    plain = asyncio.run(decoder.show(b'{"a": 1}', "value", "json"))
    assert (plain.shown_as, plain.note) == ("json", "")
    raw = asyncio.run(decoder.show(framed, "value", "hex"))
    assert (raw.shown_as, raw.note) == ("hex", "")


def test_a_wildcard_registry_listener_is_asked_on_loopback() -> None:
    assert connectable_url("http://0.0.0.0:8081") == "http://127.0.0.1:8081"
    assert connectable_url("http://[::]:8081") == "http://[::1]:8081"
    assert connectable_url("http://10.0.0.5:8081") == "http://10.0.0.5:8081"


def test_sluice_console_refuses_a_registry_url_that_is_not_http() -> None:
    result = CliRunner().invoke(console, ["--schema-registry", "ftp://registry:8081"])
    assert result.exit_code == 2
    assert "Invalid value for --schema-registry" in result.output
    assert "is not http(s)://host[:port][/path]" in result.output
