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
and closes both when it stops (``cleanup_ctx``). Every read goes through the client; the
only write is the produce form, which must be confirmed, carries a per-app CSRF token and
must come from a page of this console (Origin or Referer), and is switched off entirely
with ``read_only=True``.

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
from sluice.client.admin_api import Admin as OwningAdmin
from sluice.client.errors import BrokerUnreachableError, ClientError
from sluice.common import errors
from sluice.common.errors import KafkaError
from sluice.console import formatting
from sluice.console.keys import ADMIN_KEY, SAMPLER_KEY, SETTINGS_KEY, TEMPLATES_KEY, VIEWS_KEY
from sluice.console.pages_cluster import cluster_page, topic_page, topics_page
from sluice.console.pages_delays import delays_page
from sluice.console.pages_groups import group_page, groups_page
from sluice.console.pages_messages import messages_page
from sluice.console.pages_transactions import transactions_page
from sluice.console.produce_form import produce, produced_page
from sluice.console.rendering import error_page, format_rate, kafka_detail
from sluice.console.sampler import INTERVAL_S_DEFAULT, Sampler

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"

CLIENT_ID = "sluice-console"

RESERVED_PATHS = ("/metrics", "/health", "/ready")
"""Served by the broker when it mounts the console; never routes of the console."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def make_app(
    bootstrap: str,
    client_options: Mapping[str, object],
    *,
    read_only: bool = False,
    sample_interval_s: float = INTERVAL_S_DEFAULT,
) -> web.Application:
    """The console for the cluster at ``bootstrap``. ``client_options`` are the client's
    security keywords (``security_protocol``, ``ssl_*``, ``sasl_*``)."""
    app = web.Application(middlewares=[_security_headers, _error_pages])
    app[SETTINGS_KEY] = {
        "bootstrap": bootstrap,
        "read_only": read_only,
        "csrf_token": secrets.token_urlsafe(32),
        "interval_s": sample_interval_s,
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
    )
    app[TEMPLATES_KEY] = environment
    app[VIEWS_KEY] = {}

    async def client_context(app: web.Application) -> AsyncIterator[None]:
        admin = OwningAdmin(bootstrap, client_id=CLIENT_ID, **client_options)  # type: ignore[arg-type]
        sampler = Sampler(admin, interval_s=sample_interval_s)
        app[ADMIN_KEY] = admin
        app[SAMPLER_KEY] = sampler
        task = asyncio.create_task(sampler.run(), name="console-sampler")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await admin.close()

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
    app.router.add_static("/static", STATIC)
    return app


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
async def _error_pages(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Failures as pages: 404 for what does not exist, 503 when the cluster cannot be
    reached (naming the bootstrap address), 502 for other refusals of the cluster."""
    bootstrap = request.app[SETTINGS_KEY]["bootstrap"]
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return error_page(request, 404, "Not found", f"There is no page at {request.path}.")
    except web.HTTPBadRequest as e:
        return error_page(request, 400, "Bad request", e.text or "The request does not make sense.")
    except errors.UnknownTopicOrPartition as e:
        return error_page(request, 404, "Unknown topic or partition", kafka_detail(e))
    except BrokerUnreachableError as e:
        return error_page(
            request, 503, "Cluster unreachable", f"Bootstrap {bootstrap} did not answer: {e}"
        )
    except ClientError as e:
        return error_page(request, 503, "Cluster unreachable", f"Bootstrap {bootstrap}: {e}")
    except KafkaError as e:
        return error_page(request, 502, "The cluster refused", kafka_detail(e))
