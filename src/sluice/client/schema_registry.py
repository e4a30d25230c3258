"""An asyncio client of Confluent's Schema Registry REST API, for Sluice's registry or any
compatible one (Confluent's own, Redpanda's, Karapace, Apicurio's ``/apis/ccompat/v7``).

::

    async with SchemaRegistryClient("http://127.0.0.1:8081") as registry:
        schema_id = await registry.register("orders-value", text, SchemaType.AVRO)
        parsed = await registry.parsed_schema(schema_id)

Every failure is one :class:`SchemaRegistryError` carrying the registry's
``error_code`` (Confluent's codes: 40401 subject not found, 40901 incompatible schema
(409 from Confluent 7.x), 42201 invalid schema, ...), the HTTP status and the message;
a registry that could not be reached at all has neither code nor status.

With several base URLs, a request goes to the first; one that cannot be reached or
answers 5xx, 408 or 429 is asked again at the next, as Confluent's clients do. HTTP
basic credentials come from ``user_info`` (``basic.auth.user.info`` style
``user:password``) or from the URL's own ``user:password@``. ``https`` URLs are
verified against ``tls`` (a :class:`~sluice.client.tls.TlsSettings`: the CA, and a client
certificate where the registry asks for one), else against the system's CAs.

Schemas by id are cached: a registry never gives an id to another schema, so an
answer stays true (bounded by :data:`SCHEMAS_CACHED_MAX`). Parsing a schema (with the
schemas it references, fetched and resolved here) runs in a worker thread, as it may
take milliseconds (Protobuf runs a compiler).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final
from urllib.parse import quote, urlencode

import aiohttp
from yarl import URL

from sluice.client.tls import TlsSettings
from sluice.schemas.api import (
    ParsedSchema,
    Reference,
    ResolvedReference,
    SchemaType,
    format_for,
)
from sluice.schemas.references import FetchedSchema, resolve_async
from sluice.schemas.wire import unframe

DEFAULT_REGISTRY_URL: Final = "http://127.0.0.1:8081"

REQUEST_TIMEOUT_S_DEFAULT: Final = 30.0
"""How long one request to one base URL may take, connecting included."""

RESPONSE_BYTES_MAX: Final = 64 * 1024 * 1024
"""The largest answer read from a registry. Answers hold schema texts and lists of
subjects; a larger one is a registry gone wrong, not something to hold in memory."""

SCHEMAS_CACHED_MAX: Final = 1000
"""Schemas by id kept in memory (unparsed and parsed alike), least recently used
dropped first (Confluent's clients keep 1000 too)."""

CONTENT_TYPE: Final = "application/vnd.schemaregistry.v1+json"
ACCEPT: Final = (
    "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json"
)

_RETRY_AT_NEXT_URL_STATUSES: Final = frozenset({408, 429, 500, 502, 503, 504})

Version = int | str
"""A version number, or ``"latest"`` (-1 means latest too)."""


class SchemaRegistryError(Exception):
    """A registry refused a request, answered nonsense, or could not be reached.

    ``error_code`` is the registry's (Confluent's five-digit codes, or the HTTP status
    when the answer carried none), ``status`` the HTTP status; both are None when no
    registry answered.
    """

    def __init__(self, message: str, *, error_code: int | None, status: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.error_code = error_code
        self.status = status

    def __str__(self) -> str:
        if self.error_code is None:
            return self.message
        return f"{self.message} (error code {self.error_code})"


@dataclass(frozen=True, slots=True)
class Schema:
    """A schema as the registry holds it: its text, type and references."""

    text: str
    schema_type: SchemaType
    references: tuple[Reference, ...] = ()


@dataclass(frozen=True, slots=True)
class RegisteredSchema:
    """One version of a subject."""

    subject: str
    version: int
    schema_id: int
    schema: Schema
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class SubjectVersion:
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class Compatibility:
    """A compatibility check's outcome: ``messages`` say why not (``verbose=true``)."""

    is_compatible: bool
    messages: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DecodedValue:
    """A key or value written by a schema-aware serializer, decoded."""

    schema_id: int
    value: object


def basic_authorization(user: str, password: str) -> str:
    """The ``Authorization`` header of HTTP basic auth (RFC 7617, UTF-8)."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def parse_user_info(user_info: str) -> str:
    """``user:password`` (Confluent's ``basic.auth.user.info``; the password may contain
    ':') as an ``Authorization`` header. Raises ValueError naming what is missing."""
    user, separator, password = user_info.partition(":")
    if not separator or not user:
        raise ValueError("the registry's credentials must be user:password")
    return basic_authorization(user, password)


def _base_urls(urls: str | Sequence[str]) -> tuple[list[URL], str | None]:
    """The base URLs (comma-separated or a list) and any credentials one of them holds."""
    texts = urls.split(",") if isinstance(urls, str) else list(urls)
    parsed: list[URL] = []
    auth: str | None = None
    for text in (text.strip() for text in texts):
        if not text:
            continue
        url = URL(text)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"registry URL {text!r} is not http(s)://host[:port][/path]")
        if url.user is not None:
            auth = basic_authorization(url.user, url.password or "")
            url = url.with_user(None)
        parsed.append(url.with_path(url.path.rstrip("/")).with_query(None).with_fragment(None))
    if not parsed:
        raise ValueError("no registry URL given")
    return parsed, auth


def _segment(text: str) -> str:
    """One path segment, percent-encoded ('/' too: subjects may contain it)."""
    return quote(text, safe="")


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _schema_body(schema: Schema) -> dict[str, Any]:
    """The request body naming a schema, as Confluent's API takes it (AVRO by omission)."""
    body: dict[str, Any] = {"schema": schema.text}
    if schema.schema_type is not SchemaType.AVRO:
        body["schemaType"] = schema.schema_type.value
    if schema.references:
        body["references"] = [
            {"name": r.name, "subject": r.subject, "version": r.version} for r in schema.references
        ]
    return body


def _malformed(what: str, document: object) -> SchemaRegistryError:
    shown = json.dumps(document)[:200]
    return SchemaRegistryError(
        f"the registry answered {what} with {shown}, not what Confluent's API answers",
        error_code=None,
        status=None,
    )


def _schema_of(document: Mapping[str, Any]) -> Schema:
    """The schema in an answer (``schema``, ``schemaType``, ``references``)."""
    text = document.get("schema")
    type_name = document.get("schemaType") or SchemaType.AVRO.value
    references = document.get("references") or []
    if not isinstance(text, str) or type_name not in SchemaType.__members__:
        raise _malformed("a schema", document)
    if not isinstance(references, list):
        raise _malformed("a schema", document)
    found: list[Reference] = []
    for reference in references:
        if not isinstance(reference, dict):
            raise _malformed("a schema", document)
        name, subject, version = (reference.get(k) for k in ("name", "subject", "version"))
        if not (isinstance(name, str) and isinstance(subject, str) and isinstance(version, int)):
            raise _malformed("a schema", document)
        found.append(Reference(name, subject, version))
    return Schema(text, SchemaType(type_name), tuple(found))


def _registered_of(document: object) -> RegisteredSchema:
    if not isinstance(document, dict):
        raise _malformed("a subject's version", document)
    subject, version, schema_id = (document.get(k) for k in ("subject", "version", "id"))
    if not (isinstance(subject, str) and isinstance(version, int) and isinstance(schema_id, int)):
        raise _malformed("a subject's version", document)
    return RegisteredSchema(
        subject, version, schema_id, _schema_of(document), bool(document.get("deleted", False))
    )


def _strings(document: object, what: str) -> list[str]:
    if not isinstance(document, list) or not all(isinstance(item, str) for item in document):
        raise _malformed(what, document)
    return list(document)


def _integers(document: object, what: str) -> list[int]:
    if not isinstance(document, list) or not all(isinstance(item, int) for item in document):
        raise _malformed(what, document)
    return list(document)


def _field(document: object, names: Sequence[str], what: str) -> Any:
    """The first of ``names`` the answer object holds."""
    if isinstance(document, dict):
        for name in names:
            if name in document:
                return document[name]
    raise _malformed(what, document)


def _level(document: object, what: str) -> str:
    value = _field(document, ("compatibilityLevel", "compatibility"), what)
    if not isinstance(value, str):
        raise _malformed(what, document)
    return value


def _mode(document: object) -> str:
    value = _field(document, ("mode",), "a mode")
    if not isinstance(value, str):
        raise _malformed("a mode", document)
    return value


class SchemaRegistryClient:
    """A client of one registry (one or more base URLs); see the module docstring.

    Use it as an async context manager, or call :meth:`close` when done.
    """

    def __init__(
        self,
        urls: str | Sequence[str] = DEFAULT_REGISTRY_URL,
        *,
        user_info: str | None = None,
        tls: TlsSettings | None = None,
        request_timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT,
    ) -> None:
        if request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be positive, not {request_timeout_s}")
        self.urls, auth = _base_urls(urls)
        self._auth = parse_user_info(user_info) if user_info is not None else auth
        self._ssl = tls.context() if tls is not None else None
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._schemas: OrderedDict[int, Schema] = OrderedDict()
        self._parsed: OrderedDict[int, ParsedSchema] = OrderedDict()

    async def __aenter__(self) -> SchemaRegistryClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ── HTTP ───────────────────────────────────────────────────────────────────────────

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else True)
            headers = {"Accept": ACCEPT}
            if self._auth is not None:
                headers["Authorization"] = self._auth
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, headers=headers
            )
        return self._session

    async def _request(
        self,
        method: str,
        segments: Sequence[str],
        query: Mapping[str, str] | None = None,
        body: object = None,
    ) -> Any:
        """The answer's JSON document; raises :class:`SchemaRegistryError`."""
        session = self._open_session()
        path = "/".join(_segment(segment) for segment in segments)
        query_text = f"?{urlencode(query)}" if query else ""
        data = None if body is None else json.dumps(body).encode()
        headers = {} if data is None else {"Content-Type": CONTENT_TYPE}
        failure: SchemaRegistryError | None = None
        for base in self.urls:
            url = URL(f"{base}/{path}{query_text}", encoded=True)
            try:
                async with session.request(method, url, data=data, headers=headers) as response:
                    content = await _read_bounded(response)
                    if response.status < 300:
                        return _json(content, method, url) if content.strip() else None
                    failure = _refusal(response.status, content)
                    if response.status not in _RETRY_AT_NEXT_URL_STATUSES:
                        raise failure
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                reason = str(e) or type(e).__name__
                failure = SchemaRegistryError(
                    f"cannot reach the schema registry at {base}: {reason}",
                    error_code=None,
                    status=None,
                )
        assert failure is not None
        raise failure

    # ── subjects and versions ──────────────────────────────────────────────────────────

    async def subjects(self, *, prefix: str | None = None, deleted: bool = False) -> list[str]:
        """The subjects (with ``deleted``, soft-deleted ones too)."""
        query = {"deleted": _flag(deleted)}
        if prefix is not None:
            query["subjectPrefix"] = prefix
        return _strings(await self._request("GET", ["subjects"], query), "the subjects")

    async def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        """The subject's version numbers, oldest first."""
        answer = await self._request(
            "GET", ["subjects", subject, "versions"], {"deleted": _flag(deleted)}
        )
        return _integers(answer, "a subject's versions")

    async def version(
        self, subject: str, version: Version = "latest", *, deleted: bool = False
    ) -> RegisteredSchema:
        """One version of the subject (``"latest"`` or -1: its newest)."""
        answer = await self._request(
            "GET", ["subjects", subject, "versions", str(version)], {"deleted": _flag(deleted)}
        )
        return _registered_of(answer)

    async def latest(self, subject: str) -> RegisteredSchema:
        return await self.version(subject, "latest")

    async def referenced_by(self, subject: str, version: Version) -> list[int]:
        """The ids of the schemas that reference this version."""
        answer = await self._request(
            "GET", ["subjects", subject, "versions", str(version), "referencedby"]
        )
        return _integers(answer, "the schemas referencing a version")

    async def register(self, subject: str, schema: Schema, *, normalize: bool = False) -> int:
        """Register ``schema`` under ``subject``: its id (the existing one when the
        subject holds it already; :meth:`lookup` gives the version)."""
        answer = await self._request(
            "POST",
            ["subjects", subject, "versions"],
            {"normalize": _flag(normalize)},
            _schema_body(schema),
        )
        schema_id = _field(answer, ("id",), "a registration")
        if not isinstance(schema_id, int):
            raise _malformed("a registration", answer)
        return schema_id

    async def lookup(
        self, subject: str, schema: Schema, *, normalize: bool = False, deleted: bool = False
    ) -> RegisteredSchema:
        """The version of ``subject`` that holds ``schema``; 40403 when none does."""
        answer = await self._request(
            "POST",
            ["subjects", subject],
            {"normalize": _flag(normalize), "deleted": _flag(deleted)},
            _schema_body(schema),
        )
        return _registered_of(answer)

    async def check_compatibility(
        self,
        subject: str,
        schema: Schema,
        *,
        version: Version | None = None,
        normalize: bool = False,
    ) -> Compatibility:
        """Whether ``schema`` could be registered under ``subject`` as its
        compatibility level says (against ``version`` alone when given), and why not."""
        segments = ["compatibility", "subjects", subject, "versions"]
        if version is not None:
            segments.append(str(version))
        answer = await self._request(
            "POST",
            segments,
            {"normalize": _flag(normalize), "verbose": "true"},
            _schema_body(schema),
        )
        compatible = _field(answer, ("is_compatible",), "a compatibility check")
        messages = answer.get("messages") or []
        if not isinstance(compatible, bool) or not isinstance(messages, list):
            raise _malformed("a compatibility check", answer)
        return Compatibility(compatible, tuple(str(message) for message in messages))

    async def delete_subject(self, subject: str, *, permanent: bool = False) -> list[int]:
        """Delete every version of ``subject`` (soft unless ``permanent``, which needs a
        soft delete first): the versions deleted."""
        answer = await self._request(
            "DELETE", ["subjects", subject], {"permanent": _flag(permanent)}
        )
        return _integers(answer, "a subject's deletion")

    async def delete_version(
        self, subject: str, version: Version, *, permanent: bool = False
    ) -> int:
        """Delete one version (soft unless ``permanent``): its number."""
        answer = await self._request(
            "DELETE",
            ["subjects", subject, "versions", str(version)],
            {"permanent": _flag(permanent)},
        )
        if not isinstance(answer, int):
            raise _malformed("a version's deletion", answer)
        return answer

    # ── schemas by id ──────────────────────────────────────────────────────────────────

    async def schema(self, schema_id: int) -> Schema:
        """The schema with this id (cached: ids never change meaning)."""
        cached = self._schemas.get(schema_id)
        if cached is not None:
            self._schemas.move_to_end(schema_id)
            return cached
        answer = await self._request("GET", ["schemas", "ids", str(schema_id)])
        if not isinstance(answer, dict):
            raise _malformed("a schema", answer)
        found = _schema_of(answer)
        _remember(self._schemas, schema_id, found)
        return found

    async def subject_versions(self, schema_id: int) -> list[SubjectVersion]:
        """The subjects and versions that hold the schema with this id."""
        answer = await self._request("GET", ["schemas", "ids", str(schema_id), "versions"])
        if not isinstance(answer, list):
            raise _malformed("a schema's versions", answer)
        found = []
        for item in answer:
            if not isinstance(item, dict):
                raise _malformed("a schema's versions", answer)
            subject, version = (item.get(k) for k in ("subject", "version"))
            if not (isinstance(subject, str) and isinstance(version, int)):
                raise _malformed("a schema's versions", answer)
            found.append(SubjectVersion(subject, version))
        return found

    async def resolve_references(self, schema: Schema) -> list[ResolvedReference]:
        """The texts of every schema ``schema`` references, directly or not, each after
        the schemas it references (the order :meth:`SchemaFormat.parse` wants), each
        version fetched once (:mod:`sluice.schemas.references`). Raises
        SchemaRegistryError, and :class:`~sluice.schemas.api.InvalidSchema` when it
        references more than :data:`~sluice.schemas.references.REFERENCED_SCHEMAS_MAX`
        schemas."""

        async def fetch(reference: Reference) -> FetchedSchema:
            found = await self.version(reference.subject, reference.version)
            return FetchedSchema(found.schema.text, found.schema.references)

        return list(await resolve_async(schema.references, fetch))

    async def parse(self, schema: Schema) -> ParsedSchema:
        """``schema`` parsed with its references resolved, in a worker thread. Raises
        :class:`~sluice.schemas.api.InvalidSchema`."""
        references = await self.resolve_references(schema)
        schema_format = format_for(schema.schema_type)
        return await asyncio.to_thread(schema_format.parse, schema.text, references)

    async def parsed_schema(self, schema_id: int) -> ParsedSchema:
        """The schema with this id, parsed (cached)."""
        cached = self._parsed.get(schema_id)
        if cached is not None:
            self._parsed.move_to_end(schema_id)
            return cached
        parsed = await self.parse(await self.schema(schema_id))
        _remember(self._parsed, schema_id, parsed)
        return parsed

    async def decode(self, data: bytes) -> DecodedValue:
        """A key or value a schema-aware serializer wrote (magic byte, schema id,
        payload), decoded with the schema of its id. Raises
        :class:`~sluice.schemas.wire.NotFramed`, :class:`SchemaRegistryError`, or
        ValueError when the payload does not fit its schema."""
        framed = unframe(data)
        parsed = await self.parsed_schema(framed.schema_id)
        value = format_for(parsed.schema_type).decode(parsed, bytes(framed.payload))
        return DecodedValue(framed.schema_id, value)

    async def schema_types(self) -> list[str]:
        return _strings(await self._request("GET", ["schemas", "types"]), "the schema types")

    # ── config and mode ────────────────────────────────────────────────────────────────

    async def compatibility_level(
        self, subject: str | None = None, *, default_to_global: bool = False
    ) -> str:
        """The compatibility level of ``subject`` (40408 when it has none of its own,
        unless ``default_to_global``), or the global one."""
        segments = ["config"] if subject is None else ["config", subject]
        query = {"defaultToGlobal": "true"} if subject is not None and default_to_global else None
        return _level(await self._request("GET", segments, query), "a compatibility level")

    async def set_compatibility_level(self, level: str, subject: str | None = None) -> str:
        """Set the level of ``subject``, or the global one: the level set."""
        segments = ["config"] if subject is None else ["config", subject]
        answer = await self._request("PUT", segments, body={"compatibility": level})
        return _level(answer, "a compatibility level")

    async def delete_compatibility_level(self, subject: str) -> str:
        """Remove the subject's own level (it then follows the global one): the level
        it had."""
        return _level(await self._request("DELETE", ["config", subject]), "a compatibility level")

    async def mode(self, subject: str | None = None) -> str:
        """READWRITE, READONLY or IMPORT, of ``subject`` or of the registry."""
        segments = ["mode"] if subject is None else ["mode", subject]
        return _mode(await self._request("GET", segments))

    async def set_mode(self, mode: str, subject: str | None = None, *, force: bool = False) -> str:
        segments = ["mode"] if subject is None else ["mode", subject]
        answer = await self._request("PUT", segments, {"force": _flag(force)}, {"mode": mode})
        return _mode(answer)

    async def delete_mode(self, subject: str) -> str:
        return _mode(await self._request("DELETE", ["mode", subject]))


def _remember(cache: OrderedDict[int, Any], key: int, value: object) -> None:
    cache[key] = value
    while len(cache) > SCHEMAS_CACHED_MAX:
        cache.popitem(last=False)


async def _read_bounded(response: aiohttp.ClientResponse) -> bytes:
    """The answer's body, refused past :data:`RESPONSE_BYTES_MAX`."""
    body = bytearray()
    async for chunk in response.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > RESPONSE_BYTES_MAX:
            raise SchemaRegistryError(
                f"the registry's answer is larger than {RESPONSE_BYTES_MAX} bytes",
                error_code=None,
                status=response.status,
            )
    return bytes(body)


def _json(content: bytes, method: str, url: URL) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        shown = content[:200].decode("utf-8", "replace")
        raise SchemaRegistryError(
            f"{method} {url} answered {shown!r}, not JSON: is this a schema registry?",
            error_code=None,
            status=None,
        ) from None


def _refusal(status: int, content: bytes) -> SchemaRegistryError:
    """The error of a refusal: Confluent's ``{"error_code", "message"}`` when the body is
    one, else the status and the start of the body."""
    try:
        document = json.loads(content)
    except ValueError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("message"), str):
        code = document.get("error_code")
        return SchemaRegistryError(
            document["message"],
            error_code=code if isinstance(code, int) else status,
            status=status,
        )
    shown = content[:200].decode("utf-8", "replace").strip()
    return SchemaRegistryError(
        f"the registry answered HTTP {status}" + (f": {shown}" if shown else ""),
        error_code=status,
        status=status,
    )


def encode_bytes_as_avro_json(value: object) -> object:
    """``value`` with bytes made JSON-printable as Avro's JSON encoding writes them:
    each byte one code point U+0000-U+00FF."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("latin-1")
    if isinstance(value, dict):
        return {str(k): encode_bytes_as_avro_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode_bytes_as_avro_json(item) for item in value]
    return value


__all__ = [
    "DEFAULT_REGISTRY_URL",
    "Compatibility",
    "DecodedValue",
    "RegisteredSchema",
    "Schema",
    "SchemaRegistryClient",
    "SchemaRegistryError",
    "SubjectVersion",
    "encode_bytes_as_avro_json",
]
