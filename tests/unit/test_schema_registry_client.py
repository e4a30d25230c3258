"""The Schema Registry client against a small aiohttp server in the test that answers as
Confluent's registry does (a fake of the server only: the client's requests and its
reading of the answers are what is tested here; tests/integration/test_cli_schemas.py
runs it against Sluice's registry), with what ``sluice consume --decode-schemas`` does
with its answers and how ``sluice schemas`` reads schema files."""

from __future__ import annotations

import asyncio
import decimal
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest
from aiohttp import web

from sluice.cli.consume import record_json
from sluice.cli.consume_schemas import SchemaDecoding
from sluice.cli.schemas import read_schema
from sluice.client.consumer import ConsumedRecord
from sluice.client.schema_registry import (
    CONTENT_TYPE,
    Compatibility,
    Schema,
    SchemaRegistryClient,
    SchemaRegistryError,
    encode_bytes_as_avro_json,
)
from sluice.schemas.api import Reference, ResolvedReference, SchemaType, format_for
from sluice.schemas.wire import frame

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Seen:
    """What the fake registry was asked."""

    requests: list[tuple[str, str, str]] = field(default_factory=list)
    """(method, raw path with query, body)"""
    headers: list[dict[str, str]] = field(default_factory=list)


def _answer(document: object, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(document), content_type=CONTENT_TYPE)


@asynccontextmanager
async def registry(routes: Mapping[tuple[str, str], Handler]) -> AsyncIterator[tuple[str, Seen]]:
    """A server on a free loopback port: each request's (method, decoded path) picks its
    handler; anything else is Confluent's 404."""
    seen = Seen()

    async def dispatch(request: web.Request) -> web.StreamResponse:
        body = await request.text()
        seen.requests.append((request.method, request.raw_path, body))
        seen.headers.append(dict(request.headers))
        handler = routes.get((request.method, request.path))
        if handler is None:
            return _answer({"error_code": 404, "message": "HTTP 404 Not Found"}, 404)
        return await handler(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", dispatch)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert isinstance(server, asyncio.Server)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def answering(document: object, status: int = 200) -> Handler:
    async def handle(_request: web.Request) -> web.StreamResponse:
        return _answer(document, status)

    return handle


def test_register_sends_confluents_body_and_encodes_the_subject_in_the_path() -> None:
    async def scenario() -> None:
        routes = {("POST", "/subjects/a/b value/versions"): answering({"id": 7})}
        async with registry(routes) as (url, seen), SchemaRegistryClient(url) as client:
            schema = Schema(
                '{"type": "string"}',
                SchemaType.JSON,
                (Reference("other.json", "other", 2),),
            )
            assert await client.register("a/b value", schema, normalize=True) == 7
        method, path, body = seen.requests[0]
        assert (method, path) == ("POST", "/subjects/a%2Fb%20value/versions?normalize=true")
        assert json.loads(body) == {
            "schema": '{"type": "string"}',
            "schemaType": "JSON",
            "references": [{"name": "other.json", "subject": "other", "version": 2}],
        }
        assert seen.headers[0]["Content-Type"] == CONTENT_TYPE
        assert "application/vnd.schemaregistry.v1+json" in seen.headers[0]["Accept"]

    asyncio.run(scenario())


def test_avro_is_sent_without_a_schema_type() -> None:
    async def scenario() -> None:
        routes = {("POST", "/subjects/s/versions"): answering({"id": 1})}
        async with registry(routes) as (url, seen), SchemaRegistryClient(url) as client:
            await client.register("s", Schema('"string"', SchemaType.AVRO))
        assert json.loads(seen.requests[0][2]) == {"schema": '"string"'}

    asyncio.run(scenario())


def test_a_refusal_carries_the_error_code_the_status_and_the_message() -> None:
    async def scenario() -> None:
        refusal = {"error_code": 40401, "message": "Subject 'nope' not found."}
        routes = {("GET", "/subjects/nope/versions"): answering(refusal, 404)}
        async with registry(routes) as (url, _seen), SchemaRegistryClient(url) as client:
            with pytest.raises(SchemaRegistryError) as raised:
                await client.versions("nope")
        assert raised.value.error_code == 40401
        assert raised.value.status == 404
        assert raised.value.message == "Subject 'nope' not found."
        assert "40401" in str(raised.value)

    asyncio.run(scenario())


def test_a_refusal_that_is_not_confluents_json_keeps_the_status() -> None:
    async def bad_gateway(_request: web.Request) -> web.StreamResponse:
        return web.Response(status=502, text="<html>Bad Gateway</html>")

    async def scenario() -> None:
        routes = {("GET", "/subjects"): bad_gateway}
        async with registry(routes) as (url, _seen), SchemaRegistryClient(url) as client:
            with pytest.raises(SchemaRegistryError, match="HTTP 502: <html>Bad Gateway") as raised:
                await client.subjects()
        assert (raised.value.error_code, raised.value.status) == (502, 502)

    asyncio.run(scenario())


def test_an_answer_that_is_not_json_says_so() -> None:
    async def html(_request: web.Request) -> web.StreamResponse:
        return web.Response(text="<html>welcome</html>")

    async def scenario() -> None:
        routes = {("GET", "/subjects"): html}
        async with registry(routes) as (url, _seen), SchemaRegistryClient(url) as client:
            with pytest.raises(SchemaRegistryError, match="not JSON: is this a schema"):
                await client.subjects()

    asyncio.run(scenario())


def test_a_malformed_answer_is_an_error_not_a_crash() -> None:
    async def scenario() -> None:
        routes = {("GET", "/subjects/s/versions/latest"): answering({"subject": "s"})}
        async with registry(routes) as (url, _seen), SchemaRegistryClient(url) as client:
            with pytest.raises(SchemaRegistryError, match="not what Confluent's API answers"):
                await client.latest("s")

    asyncio.run(scenario())


def test_an_unreachable_url_is_skipped_for_the_next_and_5xx_moves_on_too() -> None:
    async def scenario() -> None:
        # A bound socket that does not listen: connections to it are refused, and no
        # other process can take its port while it is held.
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            refused = f"http://127.0.0.1:{closed.getsockname()[1]}"
            busy = {("GET", "/subjects"): answering({"error_code": 50003, "message": "x"}, 500)}
            fine = {("GET", "/subjects"): answering(["a", "b"])}
            async with registry(busy) as (busy_url, _), registry(fine) as (fine_url, _):
                urls = f"{refused}, {busy_url}/,{fine_url}"
                async with SchemaRegistryClient(urls) as client:
                    assert await client.subjects() == ["a", "b"]
                async with SchemaRegistryClient([refused]) as client:
                    with pytest.raises(SchemaRegistryError, match="cannot reach") as raised:
                        await client.subjects()
                    assert raised.value.error_code is None and raised.value.status is None

    asyncio.run(scenario())


def test_a_refusal_that_is_not_the_servers_fault_is_not_asked_elsewhere() -> None:
    async def scenario() -> None:
        refusal = {"error_code": 42201, "message": "Invalid schema"}
        first = {("POST", "/subjects/s/versions"): answering(refusal, 422)}
        second = {("POST", "/subjects/s/versions"): answering({"id": 1})}
        async with (
            registry(first) as (url_a, _),
            registry(second) as (url_b, seen_b),
            SchemaRegistryClient([url_a, url_b]) as client,
        ):
            with pytest.raises(SchemaRegistryError) as raised:
                await client.register("s", Schema("{", SchemaType.AVRO))
        assert raised.value.error_code == 42201
        assert seen_b.requests == []

    asyncio.run(scenario())


def test_a_registry_that_never_answers_times_out() -> None:
    never = asyncio.Event()

    async def hang(_request: web.Request) -> web.StreamResponse:
        await never.wait()
        raise AssertionError("unreachable")

    async def scenario() -> None:
        async with registry({("GET", "/subjects"): hang}) as (url, _seen):
            async with SchemaRegistryClient(url, request_timeout_s=0.2) as client:
                with pytest.raises(SchemaRegistryError, match="cannot reach"):
                    await client.subjects()
            never.set()  # the server's shutdown waits for its handlers

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("user_info", "url_credentials"),
    [("alice:pa:ss", ""), (None, "alice:pa%3Ass@")],
)
def test_basic_auth_from_user_info_or_the_url(user_info: str | None, url_credentials: str) -> None:
    async def scenario() -> None:
        async with registry({("GET", "/subjects"): answering([])}) as (url, seen):
            with_credentials = url.replace("http://", f"http://{url_credentials}")
            async with SchemaRegistryClient(with_credentials, user_info=user_info) as client:
                await client.subjects()
        # base64 of "alice:pa:ss"
        assert seen.headers[0]["Authorization"] == "Basic YWxpY2U6cGE6c3M="

    asyncio.run(scenario())


def test_bad_settings_are_refused_when_the_client_is_made() -> None:
    with pytest.raises(ValueError, match="user:password"):
        SchemaRegistryClient("http://127.0.0.1:1", user_info="alice")
    with pytest.raises(ValueError, match="not http"):
        SchemaRegistryClient("127.0.0.1:8081")
    with pytest.raises(ValueError, match="no registry URL"):
        SchemaRegistryClient(" , ")


def test_a_schema_by_id_is_asked_once() -> None:
    async def scenario() -> None:
        answer = {
            "schema": "syntax = 'proto3';",
            "schemaType": "PROTOBUF",
            "references": [{"name": "a.proto", "subject": "a", "version": 1}],
        }
        routes = {("GET", "/schemas/ids/5"): answering(answer)}
        async with registry(routes) as (url, seen), SchemaRegistryClient(url) as client:
            first = await client.schema(5)
            assert await client.schema(5) is first
        assert first == Schema(
            "syntax = 'proto3';", SchemaType.PROTOBUF, (Reference("a.proto", "a", 1),)
        )
        assert len(seen.requests) == 1

    asyncio.run(scenario())


def test_references_resolve_transitively_dependencies_first_each_once() -> None:
    def version(subject: str, number: int, text: str, refs: list[dict[str, Any]]) -> Handler:
        return answering(
            {
                "subject": subject,
                "version": number,
                "id": number,
                "schema": text,
                "references": refs,
            }
        )

    async def scenario() -> None:
        routes = {
            ("GET", "/subjects/b/versions/1"): version(
                "b", 1, "B", [{"name": "c.avsc", "subject": "c", "version": 3}]
            ),
            ("GET", "/subjects/c/versions/3"): version("c", 3, "C", []),
        }
        schema = Schema(
            "A",
            SchemaType.AVRO,
            (Reference("b.avsc", "b", 1), Reference("c-again", "c", 3)),
        )
        async with registry(routes) as (url, seen), SchemaRegistryClient(url) as client:
            resolved = await client.resolve_references(schema)
        # Each version fetched once; each name the schemas use resolved (as Confluent's
        # registry resolves them: by name), so the parse finds "c-again" too.
        assert resolved == [
            ResolvedReference("c.avsc", "C"),
            ResolvedReference("b.avsc", "B"),
            ResolvedReference("c-again", "C"),
        ]
        assert len(seen.requests) == 2

    asyncio.run(scenario())


def test_a_compatibility_check_is_verbose_and_reads_the_messages() -> None:
    async def scenario() -> None:
        answer = {"is_compatible": False, "messages": ["field x: removed without a default"]}
        routes = {
            ("POST", "/compatibility/subjects/s/versions"): answering(answer),
            ("POST", "/compatibility/subjects/s/versions/latest"): answering(
                {"is_compatible": True}
            ),
        }
        async with registry(routes) as (url, seen), SchemaRegistryClient(url) as client:
            schema = Schema('"int"', SchemaType.AVRO)
            assert await client.check_compatibility("s", schema) == Compatibility(
                False, ("field x: removed without a default",)
            )
            checked = await client.check_compatibility("s", schema, version="latest")
            assert checked == Compatibility(True)
        assert (
            seen.requests[0][1] == "/compatibility/subjects/s/versions?normalize=false&verbose=true"
        )

    asyncio.run(scenario())


def test_config_mode_and_deletes_speak_confluents_documents() -> None:
    async def scenario() -> None:
        routes = {
            ("GET", "/config"): answering({"compatibilityLevel": "BACKWARD"}),
            ("PUT", "/config/s"): answering({"compatibility": "FULL"}),
            ("DELETE", "/config/s"): answering({"compatibilityLevel": "FULL"}),
            ("GET", "/config/s"): answering({"compatibilityLevel": "BACKWARD"}),
            ("GET", "/mode"): answering({"mode": "READWRITE"}),
            ("PUT", "/mode/s"): answering({"mode": "READONLY"}),
            ("DELETE", "/subjects/s"): answering([1, 2]),
            ("DELETE", "/subjects/s/versions/2"): answering(2),
        }
        async with registry(routes) as (url, seen), SchemaRegistryClient(url) as client:
            assert await client.compatibility_level() == "BACKWARD"
            assert await client.set_compatibility_level("FULL", "s") == "FULL"
            assert await client.delete_compatibility_level("s") == "FULL"
            assert await client.compatibility_level("s", default_to_global=True) == "BACKWARD"
            assert await client.mode() == "READWRITE"
            assert await client.set_mode("READONLY", "s") == "READONLY"
            assert await client.delete_subject("s", permanent=True) == [1, 2]
            assert await client.delete_version("s", 2) == 2
        asked = [(method, path) for method, path, _body in seen.requests]
        assert asked == [
            ("GET", "/config"),
            ("PUT", "/config/s"),
            ("DELETE", "/config/s"),
            ("GET", "/config/s?defaultToGlobal=true"),
            ("GET", "/mode"),
            ("PUT", "/mode/s?force=false"),
            ("DELETE", "/subjects/s?permanent=true"),
            ("DELETE", "/subjects/s/versions/2?permanent=false"),
        ]
        assert json.loads(seen.requests[1][2]) == {"compatibility": "FULL"}

    asyncio.run(scenario())


def test_bytes_print_as_avros_json_encoding() -> None:
    value = {"id": b"\x00\xff", "items": [b"a", 1], "nested": {"ok": None}}
    assert encode_bytes_as_avro_json(value) == {
        "id": "\x00\xff",
        "items": ["a", 1],
        "nested": {"ok": None},
    }


# ── sluice consume --decode-schemas ────────────────────────────────────────────────────


def _record(offset: int, key: bytes | None, value: bytes | None) -> ConsumedRecord:
    return ConsumedRecord("t", 0, offset, 1_700_000_000_000, key, value)


def test_decoding_leaves_unframed_data_alone_and_asks_nothing() -> None:
    async def scenario() -> None:
        async with registry({}) as (url, seen), SchemaRegistryClient(url) as client:
            decoding = SchemaDecoding(client)
            records = [_record(0, None, b"plain"), _record(1, b"\x00\x00", b"\x01\x00\x00\x00\x07")]
            await decoding.prepare(records)
            assert [decoding.as_text(record) for record in records] == records
            line = decoding.json_formatter(record_json)(records[0], False)
            assert json.loads(line)["value"] == "plain"
        assert seen.requests == []

    asyncio.run(scenario())


def test_an_id_the_registry_lacks_is_asked_once_and_printed_as_stored_with_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def scenario() -> None:
        missing = {"error_code": 40403, "message": "Schema 7 not found"}
        routes = {("GET", "/schemas/ids/7"): answering(missing, 404)}
        async with registry(routes) as (url, seen), SchemaRegistryClient(url) as client:
            decoding = SchemaDecoding(client)
            framed = b"\x00\x00\x00\x00\x07payload"
            records = [_record(0, None, framed), _record(1, framed, framed)]
            await decoding.prepare(records)
            await decoding.prepare(records)
            document = json.loads(decoding.json_formatter(record_json)(records[1], False))
            assert document["value"] == document["key"] == "\x00\x00\x00\x00\x07payload"
            assert document["value_schema_id"] == 7
            assert document["value_schema_error"] == "schema id 7 is not in the registry"
            assert decoding.as_text(records[0]) == records[0]
            assert decoding.as_text(records[1]) == records[1]
        assert len(seen.requests) == 1

    asyncio.run(scenario())
    warnings = capsys.readouterr().err.splitlines()
    assert warnings == [
        "warning: value at t-0@0 printed as stored: schema id 7 is not in the registry"
    ]


def test_a_registry_that_refuses_stops_the_decoding() -> None:
    async def scenario() -> None:
        refusal = {"error_code": 40101, "message": "Unauthorized"}
        routes = {("GET", "/schemas/ids/1"): answering(refusal, 401)}
        async with registry(routes) as (url, _seen), SchemaRegistryClient(url) as client:
            decoding = SchemaDecoding(client)
            with pytest.raises(SchemaRegistryError) as raised:
                await decoding.prepare([_record(0, None, b"\x00\x00\x00\x00\x01")])
        assert raised.value.status == 401

    asyncio.run(scenario())


# ── sluice schemas: schema files and references ────────────────────────────────────────


@pytest.mark.parametrize(
    ("name", "type_name", "expected"),
    [
        ("order.avsc", None, SchemaType.AVRO),
        ("order.JSON", None, SchemaType.JSON),
        ("order.proto", None, SchemaType.PROTOBUF),
        ("order.txt", "protobuf", SchemaType.PROTOBUF),
    ],
)
def test_the_schema_type_comes_from_type_or_the_extension(
    tmp_path: Path, name: str, type_name: str | None, expected: SchemaType
) -> None:
    path = tmp_path / name
    path.write_text("text")
    assert read_schema(str(path), type_name, ["a.b.C=c-value:3"]) == Schema(
        "text", expected, (Reference("a.b.C", "c-value", 3),)
    )


def test_bad_schema_files_and_references_are_usage_errors(tmp_path: Path) -> None:
    unknown = tmp_path / "order.txt"
    unknown.write_text("text")
    with pytest.raises(click.UsageError, match="give --type avro, json or protobuf"):
        read_schema(str(unknown), None, [])
    with pytest.raises(click.UsageError, match="cannot read the schema file"):
        read_schema(str(tmp_path / "missing.avsc"), None, [])
    empty = tmp_path / "empty.avsc"
    empty.write_text(" \n")
    with pytest.raises(click.UsageError, match="is empty"):
        read_schema(str(empty), None, [])
    binary = tmp_path / "binary.avsc"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(click.UsageError, match="not UTF-8"):
        read_schema(str(binary), None, [])
    for bad in ("name", "name=subject", "=s:1", "name=s:one", "name=:1"):
        with pytest.raises(click.UsageError, match="NAME=SUBJECT:VERSION"):
            read_schema(str(unknown), "avro", [bad])


def test_a_framed_protobuf_value_decodes_with_its_schema_and_the_schemas_it_imports() -> None:
    common = (
        'syntax = "proto3";\npackage shop;\n'
        "message Money { string currency = 1; int32 cents = 2; }\n"
    )
    order = (
        'syntax = "proto3";\npackage shop;\nimport "common.proto";\n'
        "message Order { string id = 1; Money total = 2; }\n"
    )
    protobuf = format_for(SchemaType.PROTOBUF)
    parsed = protobuf.parse(order, [ResolvedReference("common.proto", common)])
    value = {"id": "o-1", "total": {"currency": "EUR", "cents": 1250}}
    framed = frame(3, protobuf.encode(parsed, value))

    async def scenario() -> None:
        routes = {
            ("GET", "/schemas/ids/3"): answering(
                {
                    "schema": order,
                    "schemaType": "PROTOBUF",
                    "references": [{"name": "common.proto", "subject": "common", "version": 1}],
                }
            ),
            ("GET", "/subjects/common/versions/1"): answering(
                {
                    "subject": "common",
                    "version": 1,
                    "id": 2,
                    "schema": common,
                    "schemaType": "PROTOBUF",
                }
            ),
        }
        async with registry(routes) as (url, seen), SchemaRegistryClient(url) as client:
            decoding = SchemaDecoding(client)
            records = [_record(0, b"o-1", framed), _record(1, None, framed)]
            await decoding.prepare(records)
            document = json.loads(decoding.json_formatter(record_json)(records[0], False))
            assert document["key"] == "o-1"
            assert document["value"] == value
            assert document["value_schema_id"] == 3
            assert "key_schema_id" not in document
            assert json.loads(decoding.as_text(records[1]).value or b"") == value
            assert (await client.decode(framed)).value == value
        assert len(seen.requests) == 2  # the schema and its import, each once

    asyncio.run(scenario())


def test_avro_bytes_decimals_and_timestamps_print_as_json() -> None:
    text = json.dumps(
        {
            "type": "record",
            "name": "Payment",
            "fields": [
                {"name": "token", "type": "bytes"},
                {
                    "name": "amount",
                    "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2},
                },
                {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            ],
        }
    )
    avro = format_for(SchemaType.AVRO)
    payload = avro.encode(
        avro.parse(text),
        {"token": b"\x00\xff", "amount": decimal.Decimal("12.50"), "at": 1_700_000_000_000},
    )

    async def scenario() -> None:
        routes = {("GET", "/schemas/ids/9"): answering({"schema": text})}
        async with registry(routes) as (url, _seen), SchemaRegistryClient(url) as client:
            decoding = SchemaDecoding(client)
            record = _record(0, None, frame(9, payload))
            await decoding.prepare([record])
            printed = json.loads(decoding.as_text(record).value or b"")
            document = json.loads(decoding.json_formatter(record_json)(record, False))
        expected = {"token": "\x00\xff", "amount": "12.50", "at": "2023-11-14 22:13:20+00:00"}
        assert printed == expected
        assert document["value"] == expected
        assert "value_encoding" not in document

    asyncio.run(scenario())
