"""The console's clients: whom it acts as, and the client, sampler and caches it uses
for them.

::

    shared    (``sluice console``, a plain broker's console): one ConsoleClients,
              opened when the app starts, with the credentials the console was given
    as caller (a broker with SASL or ACLs): one ConsoleClients per user, opened on the
              user's first request with the user's own SASL credentials (the HTTP
              listener checked them), so the user's ACLs apply to every read and
              write; never the broker's identity

Only the shared clients keep their sampler's history in a file (``history_dir``); a
user's history lasts while their clients are open.

A ConsoleClients holds what must not leak from one user to another: the client, the
Schema Registry's client (with the same user's credentials: HTTP basic, which Sluice's
registry checks against the SCRAM users), the sampler (its topics, offsets and groups
are what that client may describe), the views found over each topic and the CSRF token
of the produce form (derived from the user's name with a secret of the app, so a form
of one user's page is refused for another).

Caller clients are bounded: at most ``CALLER_CLIENTS_MAX`` (the least recently used
is closed to make room), and each is closed once idle for ``CALLER_CLIENT_IDLE_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from yarl import URL

from sluice.client.admin_api import Admin
from sluice.client.schema_registry import SchemaRegistryClient
from sluice.common.http_caller import HttpCaller
from sluice.console import features
from sluice.console.history_file import HistoryFile
from sluice.console.sampler import Sampler

CLIENT_ID = "sluice-console"

CALLER_CLIENTS_MAX = 16
"""Users with open clients at once; one more closes the least recently used."""
CALLER_CLIENT_IDLE_S = 300.0
"""A user's clients are closed after this long without a request of theirs."""
IDLE_SWEEP_INTERVAL_S = 15.0
"""How often idle caller clients are looked for."""
REGISTRY_REQUEST_TIMEOUT_S = 5.0
"""How long one request to the Schema Registry may take: a page waits for it, so a
registry that does not answer is reported soon rather than after the client's 30 s."""

ViewsCache = dict[str, tuple[float, list[features.ViewOver], bool]]
"""Per topic: when its views were found (monotonic seconds), the views, and whether
more candidates than were checked existed."""


@dataclass
class ConsoleClients:
    """One identity's client, its sampler (running in ``task``) and caches."""

    admin: Admin
    sampler: Sampler
    task: asyncio.Task[None]
    csrf_token: str
    registry: SchemaRegistryClient | None = None
    """The Schema Registry's client; None when the console knows of no registry."""
    views: ViewsCache = field(default_factory=dict)
    last_used_s: float = 0.0

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.sampler.save()
        if self.registry is not None:
            await self.registry.close()
        await self.admin.close()


def open_clients(
    bootstrap: str,
    options: Mapping[str, object],
    interval_s: float,
    csrf_token: str,
    history_file: HistoryFile | None = None,
    registry_url: str | None = None,
) -> ConsoleClients:
    """A client with ``options`` and its sampler, sampling from now on (in a task),
    keeping its history in ``history_file`` if given, and a client of the registry at
    ``registry_url`` (if given) with the SASL user of ``options`` as its credentials."""
    admin = Admin(bootstrap, client_id=CLIENT_ID, **options)  # type: ignore[arg-type]
    registry = None if registry_url is None else registry_client(registry_url, options)
    sampler = Sampler(admin, interval_s=interval_s, history_file=history_file)
    task = asyncio.create_task(sampler.run(), name="console-sampler")
    return ConsoleClients(admin, sampler, task, csrf_token, registry)


def registry_client(url: str, options: Mapping[str, object]) -> SchemaRegistryClient:
    """A client of the registry at ``url``, authenticated (HTTP basic) as the SASL user
    of the client ``options`` when they name one; credentials in the URL win."""
    user = options.get("sasl_plain_username")
    password = options.get("sasl_plain_password")
    url_has_credentials = any(URL(part.strip()).user for part in url.split(",") if part.strip())
    user_info = None
    if not url_has_credentials and isinstance(user, str) and isinstance(password, str):
        user_info = f"{user}:{password}"
    return SchemaRegistryClient(
        url, user_info=user_info, request_timeout_s=REGISTRY_REQUEST_TIMEOUT_S
    )


class CallerClients:
    """The clients of each user the console acts as (bounded, expiring when idle)."""

    def __init__(
        self,
        bootstrap: str,
        options: Mapping[str, object],
        interval_s: float,
        *,
        registry_url: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._bootstrap = bootstrap
        self._registry_url = registry_url
        self._options = dict(options)
        self._interval_s = interval_s
        self._clock = clock
        self._secret = secrets.token_bytes(32)
        self._open: OrderedDict[tuple[str, str, bytes], ConsoleClients] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def csrf_token(self, user: str) -> str:
        """The produce form's token for ``user``: the same on every page of theirs,
        useless to anyone else."""
        return hmac.new(self._secret, b"csrf\0" + user.encode(), hashlib.sha256).hexdigest()

    async def of(self, caller: HttpCaller) -> ConsoleClients:
        """The caller's clients, opened now if they have none (with their password: a
        changed password opens new ones)."""
        password_digest = hmac.new(self._secret, caller.password.encode(), hashlib.sha256)
        key = (caller.user, caller.sasl_mechanism, password_digest.digest())
        now_s = self._clock()
        clients = self._open.get(key)
        if clients is None:
            options = {**self._options, **caller.client_options()}
            clients = open_clients(
                self._bootstrap,
                options,
                self._interval_s,
                self.csrf_token(caller.user),
                registry_url=self._registry_url,
            )
            self._open[key] = clients
        self._open.move_to_end(key)
        clients.last_used_s = now_s
        # Made room for only after the caller's own are in (no await before): two
        # first requests of one user at once share one client.
        while len(self._open) > CALLER_CLIENTS_MAX:
            _, oldest = self._open.popitem(last=False)
            await oldest.close()
        return clients

    async def close_idle(self) -> None:
        """Close the clients of users idle for ``CALLER_CLIENT_IDLE_S`` or more."""
        now_s = self._clock()
        idle = [k for k, c in self._open.items() if now_s - c.last_used_s >= CALLER_CLIENT_IDLE_S]
        closing = [self._open.pop(key) for key in idle]
        for clients in closing:
            await clients.close()

    async def sweep_idle(self) -> None:
        """Close idle clients every ``IDLE_SWEEP_INTERVAL_S`` until cancelled."""
        while True:
            await asyncio.sleep(IDLE_SWEEP_INTERVAL_S)
            await self.close_idle()

    async def close(self) -> None:
        while self._open:
            _, clients = self._open.popitem(last=False)
            await clients.close()
