"""Who may use the broker's HTTP listener on a broker with SASL or ACLs: HTTP Basic
against the SCRAM users of the metadata store, or the bearer token
``http.metrics.bearer.token``; what each may reach.

::

    request ──/health, /ready──────────────────────────────▶ served (liveness probes)
        │
        ├─ no Authorization ───────────────────────────────▶ 401 WWW-Authenticate: Basic
        ├─ wrong credentials ──(the failed-authentication delay)─▶ 401
        ├─ Bearer <http.metrics.bearer.token> ─────────────▶ /metrics only (403 elsewhere)
        └─ Basic user:password (a SCRAM credential matches) ─▶
              /metrics   DESCRIBE on the cluster (a super user; anyone without an
                         authorizer), else 403
              the rest   the console, acting as that user (an ``HttpCaller`` on the
                         request), so the user's ACLs apply to everything it does

A password is checked as SASL/PLAIN checks it (:func:`sluice.protocol.sasl.plain_password_matches`:
the salted password derived with the stored salt and iterations, SCRAM-SHA-512's
credential if the user has one, else SCRAM-SHA-256's, its stored key compared in
constant time; an unknown user's password costs the same), off the event loop; wrong
credentials are answered after ``connection.failed.authentication.delay.ms``, as on the
Kafka listeners. A
success is remembered for ``AUTHENTICATED_CACHE_TTL_S`` (keyed by a keyed hash of the
password and the stored key it matched, so a changed password or a deleted user counts
at once), so a scrape every few seconds does not cost thousands of PBKDF2 iterations
each time.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from sluice.broker.authorization import CLUSTER, Authorizer
from sluice.common.authorizer import Operation, ResourceType
from sluice.common.http_caller import HttpCaller
from sluice.protocol.sasl import (
    PLAIN_CREDENTIAL_ORDER,
    ScramCredential,
    ScramMechanism,
    password_matches,
    plain_password_matches,
)

REALM = "sluice"
CHALLENGE = f'Basic realm="{REALM}", charset="UTF-8"'
"""The ``WWW-Authenticate`` of every 401 (RFC 7617)."""

AUTHENTICATED_CACHE_TTL_S = 60.0
"""How long a checked password is taken as good without deriving it again."""
AUTHENTICATED_CACHE_USERS_MAX = 1024
"""Users remembered at most (least recently used forgotten first)."""
PASSWORD_CHECKS_CONCURRENT_MAX = 2
"""Password derivations (PBKDF2, milliseconds of CPU each) run at once at most, so a
flood of guesses cannot take every core from the broker."""
AUTHORIZATION_HEADER_BYTES_MAX = 4096
"""A longer ``Authorization`` header is refused without being decoded."""

TOKEN_PRINCIPAL = "http.metrics.bearer.token"
"""How a request that presented the bearer token is named in logs (it is no user)."""

CredentialLookup = Callable[[str], Awaitable[Mapping[ScramMechanism, ScramCredential]]]
"""A user's stored SCRAM credentials by mechanism (empty for an unknown user)."""


@dataclass(frozen=True)
class HttpIdentity:
    """An authenticated request: a user (``caller``) or the bearer token (no caller)."""

    caller: HttpCaller | None

    @property
    def principal(self) -> str:
        return TOKEN_PRINCIPAL if self.caller is None else self.caller.principal


@dataclass(frozen=True)
class _Verified:
    mechanism: ScramMechanism
    stored_key: bytes
    password_digest: bytes
    verified_at_s: float


class HttpAuthenticator:
    """Checks ``Authorization`` headers; ``clock`` (monotonic seconds) ages the cache."""

    def __init__(
        self,
        credentials: CredentialLookup,
        bearer_token: str | None,
        *,
        failed_authentication_delay_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._credentials = credentials
        self._failed_authentication_delay_s = failed_authentication_delay_s
        self._bearer_token = bearer_token.encode() if bearer_token else None
        self._clock = clock
        self._digest_key = secrets.token_bytes(32)
        self._verified: OrderedDict[str, _Verified] = OrderedDict()
        self._checks = asyncio.Semaphore(PASSWORD_CHECKS_CONCURRENT_MAX)

    async def authenticate(self, authorization: str | None) -> HttpIdentity | None:
        """The identity the header proves, or None (after the failed-authentication
        delay when credentials were given but are wrong)."""
        if authorization is None:
            return None
        identity = await self._identify(authorization)
        if identity is None:
            await asyncio.sleep(self._failed_authentication_delay_s)
        return identity

    async def _identify(self, authorization: str) -> HttpIdentity | None:
        if len(authorization) > AUTHORIZATION_HEADER_BYTES_MAX:
            return None
        scheme, _, value = authorization.strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer":
            given = value.encode()
            if self._bearer_token is not None and hmac.compare_digest(given, self._bearer_token):
                return HttpIdentity(caller=None)
            return None
        if scheme.lower() != "basic":
            return None
        try:
            decoded = base64.b64decode(value, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, separator, password = decoded.partition(":")
        if not separator or not user:
            return None
        mechanism = await self._check_password(user, password)
        if mechanism is None:
            return None
        return HttpIdentity(HttpCaller(user, password, mechanism.mechanism_name))

    async def _check_password(self, user: str, password: str) -> ScramMechanism | None:
        stored = await self._credentials(user)
        found = next(((m, stored[m]) for m in PLAIN_CREDENTIAL_ORDER if m in stored), None)
        if found is None:
            # As much work as a wrong password, so the time taken does not tell
            # whether the user exists.
            async with self._checks:
                await asyncio.to_thread(plain_password_matches, stored, user, password)
            return None
        mechanism, credential = found
        digest = hmac.new(self._digest_key, password.encode(), hashlib.sha256).digest()
        now_s = self._clock()
        cached = self._verified.get(user)
        if (
            cached is not None
            and cached.mechanism is mechanism
            and cached.stored_key == credential.stored_key
            and hmac.compare_digest(cached.password_digest, digest)
            and now_s - cached.verified_at_s < AUTHENTICATED_CACHE_TTL_S
        ):
            self._verified.move_to_end(user)
            return mechanism
        async with self._checks:
            # PBKDF2 takes milliseconds: off the event loop.
            matches = await asyncio.to_thread(password_matches, mechanism, credential, password)
        if not matches:
            return None
        self._verified[user] = _Verified(mechanism, credential.stored_key, digest, now_s)
        self._verified.move_to_end(user)
        while len(self._verified) > AUTHENTICATED_CACHE_USERS_MAX:
            self._verified.popitem(last=False)
        return mechanism


def metrics_access(authorizer: Authorizer) -> Callable[[HttpIdentity, str], bool]:
    """Who may read ``/metrics`` from a host: the bearer token; a user with DESCRIBE on
    the cluster (a super user; anyone without an authorizer, as every Kafka request).
    The series name every topic, group and client id, so they are all or nothing rather
    than filtered (a filter would have to follow each collector's labels)."""

    def may_read(identity: HttpIdentity, host: str) -> bool:
        if identity.caller is None or not authorizer.enabled:
            return True
        return authorizer.index().authorize(
            identity.principal, host, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER
        )

    return may_read
