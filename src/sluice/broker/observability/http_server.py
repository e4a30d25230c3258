"""The broker's HTTP listener (``http.host``, ``http.port``; port 0: none): Prometheus
metrics, liveness and readiness, and the web console when the broker was given one.

Routes::

    GET /metrics   the broker's registry in the Prometheus text format
    GET /health    200 {"status": "ok"} while the process serves HTTP (liveness)
    GET /ready     200 {"status": "ready"} once the broker serves clients (registered,
                   coordinators loaded, listeners accepting); 503 {"status": "not ready",
                   "reason": ...} before that and while it shuts down
    GET /          without a console: a small JSON index of the above

A console is an ``aiohttp.web.Application`` made by a :data:`ConsoleFactory` the broker
is given (the broker never imports a console package). It is called once the Kafka
listeners are bound, with a bootstrap address of this broker, the client security
options to reach it and whether it must act as each caller; the routes above are added
to the application it returns and win over its own: a console must not use
``/metrics``, ``/health`` or ``/ready``.

A port in use fails the start (:class:`BrokerFatalError`, one line naming the setting),
unless the broker did not choose it (``any_port_if_taken``: http.port left at its
default, 8080, which a second broker on the machine finds taken): then the listener binds
a port of the kernel's choice on the same host and :attr:`HttpListener.port_taken` says
which one it could not have.

On a broker with SASL or ACLs the listener is given an
:class:`~sluice.broker.observability.http_auth.HttpAuthenticator`: every route but ``/health`` and
``/ready`` then needs credentials (401 with a Basic challenge without them), ``/metrics``
needs DESCRIBE on the cluster (``may_read_metrics``), and a console request carries the
authenticated user (:data:`~sluice.common.http_caller.CALLER_REQUEST_KEY`) for the
console to act as. Without one (a plain broker) everything is open, as before.
"""

from __future__ import annotations

import errno
import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Handler

from sluice.broker.fatal import BrokerFatalError
from sluice.broker.observability.http_auth import CHALLENGE, HttpAuthenticator, HttpIdentity
from sluice.broker.observability.metrics.registry import CONTENT_TYPE, BrokerMetrics
from sluice.common.http_caller import CALLER_REQUEST_KEY

log = logging.getLogger(__name__)

ConsoleFactory = Callable[[str, dict[str, object], bool, list[str]], web.Application]
"""Makes the web console's application from (bootstrap ``host:port``, client security
options: ``security_protocol``, ``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``,
``ssl_password``, ``sasl_mechanism``, ``sasl_plain_username``, ``sasl_plain_password``,
those that apply, ``as_caller``, and the URLs this broker's Schema Registry listens on,
none when it serves none). With ``as_caller`` the options hold no
credentials: the console must connect as the user each request carries under
:data:`~sluice.common.http_caller.CALLER_REQUEST_KEY`, and never otherwise."""

LOOPBACK_HOST = "127.0.0.1"
"""Where a secured broker's HTTP listener binds unless ``http.host`` is given."""
RESERVED_PATHS = ("/metrics", "/health", "/ready")
OPEN_PATHS = ("/health", "/ready")
"""Served without credentials even on a secured listener: liveness and readiness probes
(an orchestrator's) carry none, and they tell nothing about topics, groups or users."""
SHUTDOWN_TIMEOUT_S = 5.0
DEFAULT_PORT = 8080
"""http.port's default. Taken (another broker on this machine), a listener not told a
port explicitly binds one of the kernel's choice instead (``any_port_if_taken``)."""


def everyone(_identity: HttpIdentity, _host: str) -> bool:
    """Metrics for every caller (a listener that asks for no credentials)."""
    return True


class HttpListener:
    """Serves ``app`` (the console's, or an empty one) with the broker's own routes.
    ``not_ready`` says why the broker does not serve clients yet, or None once it does."""

    def __init__(
        self,
        host: str,
        port: int,
        metrics: BrokerMetrics,
        not_ready: Callable[[], str | None],
        app: web.Application | None = None,
        *,
        authenticator: HttpAuthenticator | None = None,
        may_read_metrics: Callable[[HttpIdentity, str], bool] = everyone,
        any_port_if_taken: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self._any_port_if_taken = any_port_if_taken
        self.port_taken: int | None = None
        """The port asked for, when it was taken and the listener bound another."""
        self._metrics = metrics
        self._not_ready = not_ready
        self._authenticator = authenticator
        self._may_read_metrics = may_read_metrics
        self.has_console = app is not None
        self.app = app if app is not None else web.Application()
        self._add_routes(self.app)
        self._runner: web.AppRunner | None = None

    def _add_routes(self, app: web.Application) -> None:
        # A middleware, outermost, answers our paths before any console route is
        # looked at, so they win even over a console's catch-all route.
        own: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
            "/metrics": self._metrics_page,
            "/health": self._health,
            "/ready": self._ready,
        }

        @web.middleware
        async def broker_routes(request: web.Request, handler: Handler) -> web.StreamResponse:
            route = own.get(request.path)
            if self._authenticator is not None and request.path not in OPEN_PATHS:
                refusal = await self._refusal(request, self._authenticator)
                if refusal is not None:
                    return refusal
            if route is not None and request.method in ("GET", "HEAD"):
                return await route(request)
            return await handler(request)

        app.middlewares.insert(0, broker_routes)
        if not self.has_console:
            app.router.add_get("/", self._index)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        """Bind (a port in use fails the broker's start, naming the setting, unless
        ``any_port_if_taken``: then a port of the kernel's choice on the same host is
        bound and :attr:`port_taken` names the one asked for)."""
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        try:
            try:
                await site.start()
            except OSError as e:
                if e.errno != errno.EADDRINUSE or not self._any_port_if_taken or not self.port:
                    raise
                self.port_taken, self.port = self.port, 0
                site = web.TCPSite(runner, self.host, 0, reuse_address=True)
                await site.start()
        except OSError as e:
            await runner.cleanup()
            if e.errno == errno.EADDRINUSE:
                raise BrokerFatalError(
                    f"the HTTP port {self.port} on {self.host} (metrics, health, console) is "
                    "already in use: stop what uses it, or pass -o http.port=<a free port> "
                    "(-o http.port=0 turns the HTTP listener off)"
                ) from None
            raise BrokerFatalError(
                f"cannot listen for HTTP on {self.host}:{self.port}: {e.strerror}; pass "
                "-o http.host=... and -o http.port=... (0 turns the HTTP listener off)"
            ) from None
        self._runner = runner
        server = site._server  # the bound port of a port-0 listener
        sockets = getattr(server, "sockets", None)
        if self.port == 0 and sockets:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.shutdown()
            await runner.cleanup()

    async def _refusal(
        self, request: web.Request, authenticator: HttpAuthenticator
    ) -> web.Response | None:
        """None when the request may go on (a console request then carries its user),
        else the 401 or 403 that answers it."""
        authorization = request.headers.get("Authorization")
        identity = await authenticator.authenticate(authorization)
        if identity is None:
            if authorization is not None:
                log.info(
                    "HTTP %s %s from %s: authentication failed (wrong or unknown credentials)",
                    request.method,
                    request.path,
                    request.remote,
                )
            response = _json({"error": "authentication required"}, status=401)
            response.headers["WWW-Authenticate"] = CHALLENGE
            return response
        if request.path == "/metrics":
            if self._may_read_metrics(identity, request.remote or ""):
                return None
            return _json(
                {"error": f"{identity.principal} may not read metrics (DESCRIBE on the cluster)"},
                status=403,
            )
        if identity.caller is None:
            return _json(
                {"error": "the bearer token grants /metrics only; sign in as a user"},
                status=403,
            )
        request[CALLER_REQUEST_KEY] = identity.caller
        return None

    async def _metrics_page(self, request: web.Request) -> web.Response:
        response = web.Response(body=self._metrics.exposition())
        response.headers["Content-Type"] = CONTENT_TYPE
        return response

    async def _health(self, request: web.Request) -> web.Response:
        return _json({"status": "ok"})

    async def _ready(self, request: web.Request) -> web.Response:
        reason = self._not_ready()
        if reason is None:
            return _json({"status": "ready"})
        return _json({"status": "not ready", "reason": reason}, status=503)

    async def _index(self, request: web.Request) -> web.Response:
        return _json(
            {
                "service": "sluice broker",
                "links": {
                    "metrics": "/metrics",
                    "health": "/health",
                    "ready": "/ready",
                },
            }
        )


def _json(document: dict[str, object], status: int = 200) -> web.Response:
    """A JSON answer ending in a newline (a shell's ``curl`` prints it on a line of its
    own)."""
    return web.json_response(document, status=status, dumps=lambda d: json.dumps(d) + "\n")
