"""The console's aiohttp application: its route table, its client and sampler opened on
startup, security headers and error pages. The pages live in the ``pages_*`` modules and
the produce form in ``produce_form``.

Besides brokers, topics, records and consumer groups, pages show what Sluice adds and
Kafka's protocol can reach: share groups (KIP-932) on the group pages, open
transactions (``/transactions``), delayed records (``/delays`` and each topic's page)
and tag-filtered views (each topic's page). Against a cluster that lacks one (an older
Kafka, or ACLs that refuse it) the page says so instead of failing.

``make_app(bootstrap, client_options)`` builds the application; it opens its client
(one :class:`~sluice.client.admin_api.Admin`) and starts the sampler when the app starts,
and closes both when it stops (``cleanup_ctx``). With ``as_caller=True`` (a broker with
SASL or ACLs mounts it so) it has no client of its own: each request must carry the
user the broker's HTTP listener authenticated, and is served through that user's own
clients (:mod:`sluice.console.clients`), so the user's ACLs apply. Every read goes
through the client; the only write is the produce form, which must be confirmed, carries
a CSRF token (per app, or per user when acting as callers) and must come from a page of
this console (Origin or Referer), and is switched off entirely with ``read_only=True``.

The paths ``/metrics``, ``/health`` and ``/ready`` are left free: a broker that mounts the
console adds its own handlers there.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path

import jinja2
from aiohttp import web

from sluice import __version__
from sluice.client.errors import BrokerUnreachableError, ClientError
from sluice.client.schema_registry import SchemaRegistryError
from sluice.common import errors
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.http_caller import CALLER_REQUEST_KEY, HttpCaller
from sluice.console import formatting
from sluice.console.brokers import partition_state
from sluice.console.clients import CallerClients, open_clients
from sluice.console.history_file import HistoryFile
from sluice.console.keys import (
    CALLER_CLIENTS_KEY,
    CLIENTS_KEY,
    SETTINGS_KEY,
    SHARED_CLIENTS_KEY,
    TEMPLATES_KEY,
)
from sluice.console.pages_cluster import cluster_page, topic_page, topics_page
from sluice.console.pages_delays import delays_page
from sluice.console.pages_groups import group_page, groups_page
from sluice.console.pages_messages import messages_page
from sluice.console.pages_schemas import NoRegistry, diff_page, subject_page, subjects_page
from sluice.console.pages_transactions import transactions_page
from sluice.console.produce_form import produce, produced_page
from sluice.console.rendering import error_page, format_rate, kafka_detail
from sluice.console.sampler import INTERVAL_S_DEFAULT

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"

RESERVED_PATHS = ("/metrics", "/health", "/ready")
"""Served by the broker when it mounts the console; never routes of the console."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def make_app(
    bootstrap: str,
    client_options: Mapping[str, object],
    *,
    read_only: bool = False,
    sample_interval_s: float = INTERVAL_S_DEFAULT,
    as_caller: bool = False,
    history_dir: Path | None = None,
    schema_registry_url: str | None = None,
) -> web.Application:
    """The console for the cluster at ``bootstrap``. ``client_options`` are the client's
    security keywords (``security_protocol``, ``ssl_*``, ``sasl_*``); with ``as_caller``
    they hold none of the ``sasl_*`` credentials: each request's
    :class:`~sluice.common.http_caller.HttpCaller` brings them. With ``history_dir``
    the sampler's history is kept there and survives a restart (not when acting as
    callers: each user's history is their own, and lasts while their clients do).
    ``schema_registry_url`` (one or more base URLs, comma-separated) is the Schema
    Registry the schema pages and the message browser ask; None: no registry."""
    app = web.Application(middlewares=[_security_headers, _error_pages, _acting_clients])
    app[SETTINGS_KEY] = {
        "bootstrap": bootstrap,
        "read_only": read_only,
        "interval_s": sample_interval_s,
        "as_caller": as_caller,
        "schema_registry": schema_registry_url,
    }
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.globals.update(
        version=__version__,
        format_size=formatting.format_size,
        format_time_ms=formatting.format_timestamp_ms,
        format_time_s=lambda s: formatting.format_timestamp_ms(int(s * 1000)),
        format_duration_ms=formatting.format_duration_ms,
        format_rate=format_rate,
        partition_state=partition_state,
    )
    app[TEMPLATES_KEY] = environment

    async def client_context(app: web.Application) -> AsyncIterator[None]:
        if not as_caller:
            csrf_token = secrets.token_urlsafe(32)
            history_file = None if history_dir is None else HistoryFile(history_dir)
            shared = open_clients(
                bootstrap,
                client_options,
                sample_interval_s,
                csrf_token,
                history_file,
                registry_url=schema_registry_url,
            )
            app[SHARED_CLIENTS_KEY] = shared
            try:
                yield
            finally:
                await shared.close()
            return
        callers = CallerClients(
            bootstrap, client_options, sample_interval_s, registry_url=schema_registry_url
        )
        app[CALLER_CLIENTS_KEY] = callers
        sweeper = asyncio.create_task(callers.sweep_idle(), name="console-idle-clients")
        try:
            yield
        finally:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
            await callers.close()

    app.cleanup_ctx.append(client_context)
    app.router.add_get("/", cluster_page)
    app.router.add_get("/topics", topics_page)
    app.router.add_get("/topics/{name}", topic_page)
    app.router.add_get("/topics/{name}/messages", messages_page)
    app.router.add_post("/topics/{name}/produce", produce)
    app.router.add_get("/topics/{name}/produced", produced_page)
    app.router.add_get("/groups", groups_page)
    app.router.add_get("/groups/{group_id:.+}", group_page)  # group ids may hold "/"
    app.router.add_get("/transactions", transactions_page)
    app.router.add_get("/delays", delays_page)
    app.router.add_get("/schemas", subjects_page)
    app.router.add_get("/schemas/subjects/{subject:.+}", subject_page)  # subjects may hold "/"
    app.router.add_get("/schemas/diff/{subject:.+}", diff_page)
    app.router.add_static("/static", STATIC)
    return app


AUTHORIZATION_FAILURES = frozenset(
    {
        ErrorCode.topic_authorization_failed,
        ErrorCode.group_authorization_failed,
        ErrorCode.cluster_authorization_failed,
        ErrorCode.transactional_id_authorization_failed,
    }
)
"""Refusals by the cluster's ACLs: answered 403, naming what was refused."""

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; object-src 'none'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}
"""Only the console's own scripts, styles and forms; never inside another site's frame."""


@web.middleware
async def _security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    response.headers.update(SECURITY_HEADERS)
    return response


@web.middleware
async def _acting_clients(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Put the clients acting for the request on it: the console's own, or the
    caller's; a console acting as callers refuses a request that names none (it was
    mounted without the broker's authentication in front)."""
    if request.path.startswith("/static/"):
        return await handler(request)
    if not request.app[SETTINGS_KEY]["as_caller"]:
        request[CLIENTS_KEY] = request.app[SHARED_CLIENTS_KEY]
        return await handler(request)
    caller = request.get(CALLER_REQUEST_KEY)
    if not isinstance(caller, HttpCaller):
        response = error_page(
            request, 401, "Sign in", "This console acts as each signed-in user; sign in first."
        )
        response.headers["WWW-Authenticate"] = 'Basic realm="sluice", charset="UTF-8"'
        return response
    request[CLIENTS_KEY] = await request.app[CALLER_CLIENTS_KEY].of(caller)
    return await handler(request)


@web.middleware
async def _error_pages(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Failures as pages: 404 for what does not exist, 403 for what the ACLs refuse
    (the console's credentials', or the signed-in user's), 503 when the cluster cannot be
    reached (naming the bootstrap address), 502 for other refusals of the cluster."""
    bootstrap = request.app[SETTINGS_KEY]["bootstrap"]
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return error_page(request, 404, "Not found", f"There is no page at {request.path}.")
    except web.HTTPBadRequest as e:
        return error_page(request, 400, "Bad request", e.text or "The request does not make sense.")
    except NoRegistry:
        return error_page(
            request,
            503,
            "No Schema Registry",
            "This console was started without a Schema Registry to ask (sluice console "
            "--schema-registry URL; a broker's console asks the broker's own, which serves "
            "none when schema.registry.listeners is empty).",
        )
    except SchemaRegistryError as e:
        return _registry_failure(request, e)
    except errors.UnknownTopicOrPartition as e:
        return error_page(request, 404, "Unknown topic or partition", kafka_detail(e))
    except BrokerUnreachableError as e:
        return error_page(
            request, 503, "Cluster unreachable", f"Bootstrap {bootstrap} did not answer: {e}"
        )
    except ClientError as e:
        return error_page(request, 503, "Cluster unreachable", f"Bootstrap {bootstrap}: {e}")
    except KafkaError as e:
        if e.code in AUTHORIZATION_FAILURES:
            detail = f"{e.code.name.upper()}: {kafka_detail(e)}"
            return error_page(request, 403, "Not allowed", detail)
        return error_page(request, 502, "The cluster refused", kafka_detail(e))


def _registry_failure(request: web.Request, error: SchemaRegistryError) -> web.Response:
    """The Schema Registry's failures: 503 when it cannot be reached (naming where it
    was looked for), 404 for a subject or version it does not hold, 403 when it refuses
    the user, 502 for any other refusal."""
    if error.status is None:  # the message names where (without credentials), and why
        return error_page(request, 503, "Schema Registry unreachable", str(error))
    if error.status == 404:
        return error_page(request, 404, "Not in the Schema Registry", str(error))
    if error.status in (401, 403):
        return error_page(request, 403, "Not allowed by the Schema Registry", str(error))
    return error_page(request, 502, "The Schema Registry refused", str(error))
