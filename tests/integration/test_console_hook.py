"""The web console hook, with a broker run in this process (the hook is a Python
callable, so no command line can pass it): the factory is called once with the
broker's bootstrap address and client options, its application is served on the HTTP
port, and the broker's own ``/metrics``, ``/health`` and ``/ready`` win over its routes."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from aiohttp import web
from kafka_wire import KafkaConnection, api_versions_request
from metrics_scrape import get

from sluice.broker.app import Broker, ConsoleFactory
from sluice.cli.loopback import HOST, free_port
from sluice.common.config import BrokerConfig

READY_TIMEOUT_S = 60.0


def _console(calls: list[tuple[str, dict[str, object], bool, list[str]]]) -> ConsoleFactory:
    def factory(
        bootstrap: str, options: dict[str, object], as_caller: bool, registry_urls: list[str]
    ) -> web.Application:
        calls.append((bootstrap, options, as_caller, registry_urls))

        async def page(request: web.Request) -> web.Response:
            return web.Response(text=f"console at {request.path}")

        app = web.Application()
        app.router.add_get("/", page)
        app.router.add_get("/metrics", page)  # must lose to the broker's
        return app

    return factory


def test_the_console_is_served_beside_the_brokers_routes(tmp_path: Path) -> None:
    http_port = free_port(HOST)
    config = BrokerConfig()
    config.apply_properties(
        {
            "http.port": str(http_port),
            "group.initial.rebalance.delay.ms": "0",
            "schema.registry.listeners": "",
        }
    )
    config.set_address(HOST, 0, origin="test")
    config.data_dir = tmp_path / "data"
    calls: list[tuple[str, dict[str, object], bool, list[str]]] = []
    base = f"http://{HOST}:{http_port}"

    async def scenario() -> None:
        loop = asyncio.get_running_loop()

        async def fetch(path: str) -> tuple[int, str]:
            return await loop.run_in_executor(None, get, base + path)

        broker = Broker(config, console=_console(calls))
        await broker.start()
        running = asyncio.create_task(broker.run())
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while (await fetch("/ready"))[0] != 200:
                assert time.monotonic() < deadline, "the broker never became ready"
                await asyncio.sleep(0.05)  # polling interval for readiness, not a sync
            assert calls == [
                (f"{HOST}:{broker.server.port}", {"security_protocol": "PLAINTEXT"}, False, [])
            ]
            assert await fetch("/") == (200, "console at /")
            status, metrics = await fetch("/metrics")
            assert status == 200 and "sluice_requests_in_flight" in metrics
            status, health = await fetch("/health")
            assert (status, json.loads(health)) == (200, {"status": "ok"})

            def reach_bootstrap() -> int:
                host, port = calls[0][0].rsplit(":", 1)
                with KafkaConnection(host, int(port)) as connection:
                    return int(connection.request(api_versions_request()).error_code)

            assert await loop.run_in_executor(None, reach_bootstrap) == 0
        finally:
            broker.request_stop()
            await running
        assert broker.http is None  # stopped with the broker

    asyncio.run(scenario())
