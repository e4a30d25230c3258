"""The console's clients per caller: one set per user and password, at most
``CALLER_CLIENTS_MAX`` (the least recently used closed first), closed once idle, and a
CSRF token per user. The clients point at a port nothing listens on: opening them
connects to nothing until their sampler tries, which only records the failure."""

from __future__ import annotations

import asyncio

from sluice.cli.loopback import HOST, free_port
from sluice.common.http_caller import HttpCaller
from sluice.console.clients import CALLER_CLIENT_IDLE_S, CALLER_CLIENTS_MAX, CallerClients


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def caller(user: str, password: str = "secret") -> HttpCaller:
    return HttpCaller(user, password, "SCRAM-SHA-512")


def test_clients_are_per_user_bounded_and_closed_when_idle() -> None:
    clock = Clock()
    bootstrap = f"{HOST}:{free_port()}"

    async def scenario() -> None:
        callers = CallerClients(
            bootstrap, {"security_protocol": "SASL_PLAINTEXT"}, 60.0, clock=clock
        )
        try:
            alice = await callers.of(caller("alice"))
            assert await callers.of(caller("alice")) is alice
            assert alice.admin.cluster is not (await callers.of(caller("bob"))).admin.cluster
            # A new password is a new client (the old one ages out).
            assert await callers.of(caller("alice", "changed")) is not alice
            assert len(callers) == 3
            for n in range(CALLER_CLIENTS_MAX):
                clock.now_s += 1
                await callers.of(caller(f"user{n}"))
            assert len(callers) == CALLER_CLIENTS_MAX
            assert alice.task.done()  # the least recently used went first, closed
            assert await callers.of(caller("alice")) is not alice
            clock.now_s += CALLER_CLIENT_IDLE_S - 1
            recent = await callers.of(caller("user0"))
            clock.now_s += 1
            await callers.close_idle()
            assert len(callers) == 1
            assert await callers.of(caller("user0")) is recent
        finally:
            await callers.close()
        assert len(callers) == 0 and recent.task.done()

    asyncio.run(scenario())


def test_the_csrf_token_belongs_to_one_user() -> None:
    callers = CallerClients(f"{HOST}:9", {}, 60.0)
    assert callers.csrf_token("alice") == callers.csrf_token("alice")
    assert callers.csrf_token("alice") != callers.csrf_token("bob")
    assert callers.csrf_token("alice") != CallerClients(f"{HOST}:9", {}, 60.0).csrf_token("alice")
