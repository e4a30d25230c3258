"""The HTTP listener's authentication as pure logic over stored SCRAM credentials:
Basic against the user's SCRAM-SHA-512 (else SCRAM-SHA-256) credential, the bearer
token, the remembered successes (aged by an injected clock, forgotten when the stored
key changes) and the delay before refusing wrong credentials."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time

import pytest

from sluice.broker.observability.http_auth import (
    AUTHENTICATED_CACHE_TTL_S,
    HttpAuthenticator,
    HttpIdentity,
)
from sluice.common.config import BrokerConfig, BrokerConfigError
from sluice.common.http_caller import HttpCaller
from sluice.protocol.sasl import ScramCredential, ScramMechanism, make_credential

FAILED_AUTHENTICATION_DELAY_S = BrokerConfig().connection_failed_authentication_delay_ms / 1000
"""The broker's default connection.failed.authentication.delay.ms."""
SHA512 = ScramMechanism.SCRAM_SHA_512
SHA256 = ScramMechanism.SCRAM_SHA_256


class Store:
    """Stored credentials by user and mechanism, as the metadata store returns them."""

    def __init__(self) -> None:
        self.users: dict[str, dict[ScramMechanism, ScramCredential]] = {}

    async def lookup(self, user: str) -> dict[ScramMechanism, ScramCredential]:
        return dict(self.users.get(user, {}))


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def authenticate(authenticator: HttpAuthenticator, header: str | None) -> HttpIdentity | None:
    return asyncio.run(authenticator.authenticate(header))


def test_basic_checks_the_password_against_the_stored_credential() -> None:
    store = Store()
    store.users["alice"] = {m: make_credential(m, "alice-secret") for m in ScramMechanism}
    store.users["carol"] = {SHA256: make_credential(SHA256, "carol-secret")}
    authenticator = HttpAuthenticator(
        store.lookup, None, failed_authentication_delay_s=FAILED_AUTHENTICATION_DELAY_S
    )
    assert authenticate(authenticator, basic("alice", "alice-secret")) == HttpIdentity(
        HttpCaller("alice", "alice-secret", "SCRAM-SHA-512")
    )
    identity = authenticate(authenticator, basic("carol", "carol-secret"))
    assert identity is not None and identity.caller is not None
    assert identity.caller.sasl_mechanism == "SCRAM-SHA-256"
    assert identity.principal == "User:carol"
    for wrong in (
        basic("alice", "carol-secret"),
        basic("nobody", "alice-secret"),
        basic("", "alice-secret"),
        "Basic " + base64.b64encode(b"alice").decode(),  # no colon
        "Basic %%%",
        "Bearer anything",  # no token configured
        "Negotiate abc",
        "Basic " + "A" * 5000,
        None,
    ):
        assert authenticate(authenticator, wrong) is None, wrong


def test_the_bearer_token_is_no_user() -> None:
    authenticator = HttpAuthenticator(
        Store().lookup, "s3cret-token", failed_authentication_delay_s=FAILED_AUTHENTICATION_DELAY_S
    )
    identity = authenticate(authenticator, "Bearer s3cret-token")
    assert identity == HttpIdentity(caller=None)
    assert authenticate(authenticator, "bearer  s3cret-token ") == identity
    assert authenticate(authenticator, "Bearer s3cret-tokeN") is None
    assert authenticate(authenticator, "Bearer ") is None


def test_a_success_is_remembered_until_it_ages_or_the_credential_changes() -> None:
    store = Store()
    good = make_credential(SHA512, "alice-secret")
    store.users["alice"] = {SHA512: good}
    clock = Clock()
    authenticator = HttpAuthenticator(
        store.lookup, None, failed_authentication_delay_s=FAILED_AUTHENTICATION_DELAY_S, clock=clock
    )
    assert authenticate(authenticator, basic("alice", "alice-secret")) is not None
    # Same stored key, a salt the password no longer derives it from: only a remembered
    # success can accept it, and only for the cache's lifetime.
    store.users["alice"] = {SHA512: dataclasses.replace(good, salt=b"another salt")}
    assert authenticate(authenticator, basic("alice", "alice-secret")) is not None
    assert authenticate(authenticator, basic("alice", "wrong")) is None
    clock.now_s += AUTHENTICATED_CACHE_TTL_S
    assert authenticate(authenticator, basic("alice", "alice-secret")) is None
    # A changed password counts at once, remembered or not.
    store.users["alice"] = {SHA512: good}
    assert authenticate(authenticator, basic("alice", "alice-secret")) is not None
    store.users["alice"] = {SHA512: make_credential(SHA512, "new-secret")}
    assert authenticate(authenticator, basic("alice", "alice-secret")) is None
    assert authenticate(authenticator, basic("alice", "new-secret")) is not None
    store.users.pop("alice")
    assert authenticate(authenticator, basic("alice", "new-secret")) is None


def test_wrong_credentials_are_answered_after_the_delay() -> None:
    store = Store()
    store.users["alice"] = {SHA512: make_credential(SHA512, "alice-secret")}
    authenticator = HttpAuthenticator(
        store.lookup, "token", failed_authentication_delay_s=FAILED_AUTHENTICATION_DELAY_S
    )
    for wrong in (basic("alice", "guess"), "Bearer guess"):
        started = time.monotonic()
        assert authenticate(authenticator, wrong) is None
        assert time.monotonic() - started >= FAILED_AUTHENTICATION_DELAY_S


def test_the_bearer_token_setting_refuses_guessable_or_unsendable_tokens() -> None:
    config = BrokerConfig()
    config.apply_properties({"http.metrics.bearer.token": "a" * 16})
    assert config.http_metrics_bearer_token == "a" * 16
    for bad, reason in (("short", "too easy to guess"), ("a" * 20 + " b", "without spaces")):
        with pytest.raises(BrokerConfigError, match=reason):
            BrokerConfig().apply_properties({"http.metrics.bearer.token": bad})


@pytest.mark.parametrize(
    ("properties", "secured"),
    [
        ({}, False),
        ({"listeners": "SSL://127.0.0.1:9093", "ssl.keystore.location": "k.pem"}, False),
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:9092"}, True),
        ({"authorizer.enabled": "true"}, True),
    ],
    ids=["plain", "tls-only", "sasl", "acls"],
)
def test_http_is_secured_on_a_broker_with_sasl_or_acls(
    properties: dict[str, str], secured: bool
) -> None:
    config = BrokerConfig()
    config.apply_properties(properties)
    assert config.http_secured() is secured
