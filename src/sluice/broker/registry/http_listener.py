"""The Schema Registry's REST API over HTTP (``schema.registry.listeners``): each request
made a :class:`~sluice.registry.api.Call` and answered by the registry, wherever it is
hosted.

::

    request ─▶ signed in? (a broker with SASL or ACLs: HTTP Basic, a SCRAM user) ─ no ─▶ 401
        ─▶ a body (POST, PUT): its content type one Confluent accepts ───────── no ─▶ 415
           at most the body bound ──────────────────────────────────────────── no ─▶ 413
           JSON, its text Unicode, not nested too deep ─────────────────────── no ─▶ 400
           at most the forwarding's bound once encoded ─────────────────────── no ─▶ 413
           a schema text within schema.registry.schema.max.bytes ───────────── no ─▶ 422 (42209)
        ─▶ Call(method, path segments percent-decoded, query, body)
        ─▶ may the caller? (by subject: :mod:`~sluice.broker.registry.access`) ─ no ─▶ 403
        ─▶ the registry's Answer (:mod:`~sluice.broker.registry.forwarding`)
           as application/vnd.schemaregistry.v1+json

Errors are Confluent's bodies, ``{"error_code": int, "message": str}``. Ports: each
listener binds its own; port 0 binds one of the kernel's choice (:attr:`urls` says
which). A port in use fails the broker's start in one line naming the setting.
"""

from __future__ import annotations

import errno
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final
from urllib.parse import unquote

from aiohttp import web

from sluice.broker.fatal import BrokerFatalError
from sluice.broker.observability.http_auth import CHALLENGE, HttpAuthenticator
from sluice.broker.registry.access import SubjectAccess
from sluice.broker.registry.answers import error_answer
from sluice.common.config import HttpEndpoint
from sluice.protocol.private import BODY_BYTES_MAX
from sluice.registry.api import Answer, Call
from sluice.registry.errors import (
    ErrorCode,
    answer_for,
    schema_too_large,
    store_error,
    unknown_path,
)
from sluice.registry.operations import NO_LIMIT
from sluice.registry.reads import page

log = logging.getLogger(__name__)

ANSWER_CONTENT_TYPE: Final = "application/vnd.schemaregistry.v1+json"
BODY_CONTENT_TYPES: Final = frozenset(
    {
        "application/vnd.schemaregistry.v1+json",
        "application/vnd.schemaregistry+json",
        "application/json",
        "application/octet-stream",
    }
)
"""The request bodies Confluent's registry accepts (a body without a content type is
taken as JSON too)."""
BODY_OVERHEAD_BYTES: Final = 64 * 1024
"""A request body may exceed twice ``schema.registry.schema.max.bytes`` (a schema's JSON
escaping) by this much: its references, schema type and other fields."""
PATH_SEGMENTS_MAX: Final = 16
"""Confluent's longest path has 6 segments; a longer one is answered 404 unread."""
SHUTDOWN_TIMEOUT_S: Final = 5.0
FORWARDED_ENVELOPE_BYTES: Final = 64 * 1024
"""Room a forwarded call needs beside its body: method, path, query and principal."""
FORWARDED_BODY_BYTES_MAX: Final = BODY_BYTES_MAX - FORWARDED_ENVELOPE_BYTES
"""The largest body (as compact JSON) a call may have: one any broker can forward to the
registry's leader (:data:`sluice.protocol.private.BODY_BYTES_MAX`)."""

Answerer = Callable[[Call, "str | None"], Awaitable[Answer]]
"""Answers a call made by a principal (None on a broker that asks for no credentials)."""


def body_bytes_max(schema_max_bytes: int) -> int:
    """The largest request body for ``schema.registry.schema.max.bytes``."""
    return 2 * schema_max_bytes + BODY_OVERHEAD_BYTES


class RegistryListener:
    """Serves the registry on ``endpoints``. With an ``authenticator`` (a broker with SASL
    or ACLs) every request needs a SCRAM user's password, and ``access`` decides by
    subject what each user may do; ``subject_of`` and ``is_write`` say what a call
    touches (:mod:`sluice.registry.routes`)."""

    def __init__(
        self,
        endpoints: Sequence[HttpEndpoint],
        answer: Answerer,
        *,
        schema_max_bytes: int,
        subject_of: Callable[[Call], str | None],
        is_write: Callable[[Call], bool],
        authenticator: HttpAuthenticator | None = None,
        access: SubjectAccess | None = None,
    ) -> None:
        self._endpoints = tuple(endpoints)
        self._answer = answer
        self._schema_max_bytes = schema_max_bytes
        self._body_bytes_max = body_bytes_max(schema_max_bytes)
        self._subject_of = subject_of
        self._is_write = is_write
        self._authenticator = authenticator
        self._access = access
        self._runner: web.AppRunner | None = None
        self.urls: list[str] = []
        """Where it listens, once started (a port-0 listener with its bound port)."""
        self.app = web.Application(client_max_size=self._body_bytes_max)
        self.app.router.add_route("*", "/{path:.*}", self._serve)

    async def start(self) -> None:
        """Bind every endpoint; one that cannot be bound raises BrokerFatalError naming
        the setting (nothing stays bound)."""
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        urls = []
        try:
            for endpoint in self._endpoints:
                site = web.TCPSite(runner, endpoint.host or None, endpoint.port)
                try:
                    await site.start()
                except OSError as e:
                    raise BrokerFatalError(_bind_failure(endpoint, e)) from None
                server = site._server  # the bound port of a port-0 listener
                sockets = getattr(server, "sockets", None) or []
                port = sockets[0].getsockname()[1] if sockets else endpoint.port
                urls.append(str(HttpEndpoint(endpoint.host or "0.0.0.0", port)))
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.urls = urls

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.shutdown()
            await runner.cleanup()

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        principal: str | None = None
        if self._authenticator is not None:
            identity = await self._authenticator.authenticate(request.headers.get("Authorization"))
            if identity is None:
                response = _respond(error_answer(ErrorCode.UNAUTHORIZED, "Unauthorized"))
                response.headers["WWW-Authenticate"] = CHALLENGE
                return response
            if identity.caller is None:
                return _respond(
                    error_answer(
                        ErrorCode.USER_NOT_AUTHORIZED,
                        "the metrics bearer token grants /metrics only",
                    )
                )
            principal = identity.caller.principal
        call = await self._call_of(request)
        if isinstance(call, Answer):
            return _respond(call)
        host = request.remote or ""
        if self._access is not None and principal is not None:
            refusal = self._access.refusal(
                principal, host, self._subject_of(call), self._is_write(call)
            )
            if refusal is not None:
                return _respond(error_answer(ErrorCode.USER_NOT_AUTHORIZED, refusal))
        filtered = self._access is not None and principal is not None
        paging = _listing_paging(call) if filtered else None
        try:
            answer = await self._answer(call if paging is None else paging[0], principal)
        except Exception:  # a bug: the caller gets a 500, the broker goes on
            log.exception("registry call %s %s failed", call.method, request.path)
            answer = answer_for(store_error())
        if filtered:
            assert principal is not None
            answer = self._visible(answer, call, principal, host)
        if paging is not None and answer.status == 200 and isinstance(answer.body, list):
            _, offset, limit = paging
            answer = Answer(200, page(answer.body, offset, limit))
        return _respond(answer)

    async def _call_of(self, request: web.Request) -> Call | Answer:
        """The request as a call, or the answer refusing it."""
        raw_segments = [part for part in request.rel_url.raw_path.split("/") if part]
        if len(raw_segments) > PATH_SEGMENTS_MAX:
            return answer_for(unknown_path())
        segments = tuple(unquote(part) for part in raw_segments)
        query = {key: request.rel_url.query[key] for key in request.rel_url.query}
        if request.method not in ("POST", "PUT"):
            return Call(request.method, segments, query)
        content_type = request.headers.get("Content-Type")
        if content_type is not None and request.content_type not in BODY_CONTENT_TYPES:
            return error_answer(
                ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                f"HTTP 415 Unsupported Media Type: send {ANSWER_CONTENT_TYPE} "
                "(or application/json)",
            )
        length = request.content_length
        if length is not None and length > self._body_bytes_max:
            return _too_large(self._body_bytes_max)
        data = await request.content.read(self._body_bytes_max + 1)
        while len(data) <= self._body_bytes_max and not request.content.at_eof():
            more = await request.content.read(self._body_bytes_max + 1 - len(data))
            if not more:
                break
            data += more
        if len(data) > self._body_bytes_max:
            return _too_large(self._body_bytes_max)
        if not data.strip():
            return Call(request.method, segments, query, None)
        try:
            body = json.loads(data)
        except (ValueError, RecursionError) as e:
            return error_answer(ErrorCode.BAD_REQUEST, f"Unexpected JSON: {e}")
        refusal = _unsendable(body)
        if refusal is not None:
            return refusal
        schema = body.get("schema") if isinstance(body, dict) else None
        if isinstance(schema, str) and len(schema.encode()) > self._schema_max_bytes:
            too_large = schema_too_large(self._schema_max_bytes)
            return error_answer(
                too_large.code,
                f"{too_large.message}: {len(schema.encode())} bytes, over "
                f"schema.registry.schema.max.bytes={self._schema_max_bytes}",
            )
        return Call(request.method, segments, query, body)

    def _visible(self, answer: Answer, call: Call, principal: str, host: str) -> Answer:
        """A listing shows only the entries of subjects the caller may read: ``GET
        /subjects``, ``GET /schemas`` (each version with its subject, id and text), ``GET
        /schemas/ids/{id}/subjects`` and ``…/versions``."""
        if not _is_listing(call) or answer.status != 200 or not isinstance(answer.body, list):
            return answer
        access = self._access
        assert access is not None

        def readable(entry: object) -> bool:
            subject = entry.get("subject") if isinstance(entry, dict) else entry
            return isinstance(subject, str) and access.may_read(principal, host, subject)

        return Answer(200, [entry for entry in answer.body if readable(entry)])


_PAGED_LISTINGS: Final = frozenset({("subjects",), ("schemas",)})
"""The listings whose ``offset`` and ``limit`` the registry applies."""


def _is_listing(call: Call) -> bool:
    """Whether ``call`` asks for a listing of subjects, or of entries naming one."""
    segments = call.segments
    if call.method != "GET":
        return False
    return segments in _PAGED_LISTINGS or (
        len(segments) == 4
        and segments[:2] == ("schemas", "ids")
        and segments[3] in ("subjects", "versions")
    )


def _listing_paging(call: Call) -> tuple[Call, int, int] | None:
    """For a paged listing (``GET /subjects``, ``GET /schemas``) with ``offset`` or
    ``limit``, the call without them and the two numbers: a listing filtered by what the
    caller may read is paged after the filter, so the registry must answer it whole.
    None for any other call (and for numbers that are not integers, which the registry
    refuses)."""
    if call.method != "GET" or call.segments not in _PAGED_LISTINGS:
        return None
    if "offset" not in call.query and "limit" not in call.query:
        return None
    try:
        offset = int(call.query.get("offset") or 0)
        limit = int(call.query.get("limit") or NO_LIMIT)
    except ValueError:
        return None
    query = {k: v for k, v in call.query.items() if k not in ("offset", "limit")}
    return Call(call.method, call.segments, query, call.body), offset, limit


def _unsendable(body: object) -> Answer | None:
    """The answer refusing a parsed body that could not go on to the registry's leader
    (400: text that is not Unicode, a lone surrogate escape such as ``"\\ud800"``,
    which has no UTF-8; nesting the encoder cannot follow back; 413: too large for the
    forwarding), else None. Checked here, on every broker alike, by encoding the body
    once as the forwarding would."""
    try:
        encoded = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return error_answer(
            ErrorCode.BAD_REQUEST,
            "Unexpected JSON: a string holds a lone surrogate escape (\\ud800-\\udfff), "
            "which is not Unicode text",
        )
    except RecursionError:
        return error_answer(ErrorCode.BAD_REQUEST, "Unexpected JSON: nested too deep")
    if len(encoded) > FORWARDED_BODY_BYTES_MAX:
        return error_answer(
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"Request body of {len(encoded)} bytes as JSON, over {FORWARDED_BODY_BYTES_MAX}",
        )
    return None


def _too_large(body_bytes_max: int) -> Answer:
    return error_answer(
        ErrorCode.PAYLOAD_TOO_LARGE,
        f"Request body over {body_bytes_max} bytes (twice schema.registry.schema.max.bytes "
        f"and {BODY_OVERHEAD_BYTES} bytes more)",
    )


def _respond(answer: Answer) -> web.Response:
    return web.Response(
        status=answer.status,
        body=json.dumps(answer.body).encode(),  # ASCII: any text, even a lone surrogate
        headers={"Content-Type": ANSWER_CONTENT_TYPE},
    )


def _bind_failure(endpoint: HttpEndpoint, error: OSError) -> str:
    if error.errno == errno.EADDRINUSE:
        return (
            f"the Schema Registry's port {endpoint.port} on {endpoint.host or '0.0.0.0'} is "
            "already in use (another registry or broker on this machine?): pass -o "
            "schema.registry.listeners=http://127.0.0.1:<a free port> (port 0: any free "
            "port; empty: no REST API on this broker)"
        )
    return (
        f"cannot listen for the Schema Registry on {endpoint}: {error.strerror}; change "
        "schema.registry.listeners (empty: no REST API on this broker)"
    )
