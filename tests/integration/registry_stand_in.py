"""A stand-in for the registry's logic (``sluice.registry``'s shard, checks and routes),
so the broker's side of the registry (listener, authentication and authorization,
hosting on the leader of ``_schemas``-0, the topic, forwarding) is tested with a real
broker, real sockets and a real HTTP client, whatever the shard answers.

It keeps one id per subject: ``POST /subjects/<s>/versions`` appends a record
``{"subject", "id"}`` (ids count from 1, in commit order; a body's ``schema`` another
subject has keeps that subject's id, as Confluent's registry does) and answers ``{"id"}``
once the record is committed; ``GET /subjects`` lists the subjects, ``GET /schemas``
each subject's one version, ``GET /schemas/ids/<id>/subjects`` and ``…/versions`` the
subjects (versions) of an id; ``POST /check`` answers
what ``run_check`` (run in a worker thread) made of its body, and in which thread
(``{"block": name}``: once :func:`blocked_check` releases it); anything else 404.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from sluice.broker.app import Broker
from sluice.broker.registry.service import RegistryCore
from sluice.cli.loopback import HOST
from sluice.common import errors
from sluice.common.config import BrokerConfig
from sluice.common.errors import ErrorCode
from sluice.coordinator.api import Append, Effect, Reply, RequestToken, Task
from sluice.registry.api import Answer, Call


class StandInShard:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.schemas: dict[str, str] = {}
        self._pending: dict[int, tuple[RequestToken, str, int, bytes]] = {}
        self._next_append = 0
        self._tasks: dict[int, RequestToken] = {}

    def replay(self, key: bytes, value: bytes | None) -> None:
        try:
            record = json.loads(key)
            subject, schema_id = record["subject"], record["id"]
        except (ValueError, KeyError, TypeError):
            raise errors.CorruptMessage("not a stand-in record") from None
        self.ids[subject] = schema_id
        self._remember_schema(subject, value)

    def _remember_schema(self, subject: str, value: bytes | None) -> None:
        try:
            schema = json.loads(value or b"null").get("schema")
        except (ValueError, AttributeError):
            return
        if isinstance(schema, str):
            self.schemas[subject] = schema

    def replay_transactional(self, producer_id: int, key: bytes, value: bytes | None) -> None:
        raise AssertionError("no transactions in _schemas")

    def replay_marker(self, producer_id: int, committed: bool) -> None:
        raise AssertionError("no transactions in _schemas")

    def load_completed(self, now_ms: int) -> None:
        pass

    def next_deadline_ms(self) -> int | None:
        return None

    def poll(self, now_ms: int) -> list[Effect]:
        return []

    def append_completed(
        self, now_ms: int, append_id: int, error: ErrorCode | None
    ) -> list[Effect]:
        token, subject, schema_id, value = self._pending.pop(append_id)
        if error is not None:
            answer = Answer(
                500, {"error_code": 50001, "message": "Error in the backend data store"}
            )
            return [Reply(token, answer)]
        self.ids[subject] = schema_id
        self._remember_schema(subject, value)
        return [Reply(token, Answer(200, {"id": schema_id}))]

    def task_completed(self, now_ms: int, task_id: int, result: object) -> list[Effect]:
        return [Reply(self._tasks.pop(task_id), Answer(200, result))]

    def handle(self, now_ms: int, token: RequestToken, call: Call) -> list[Effect]:
        segments = call.segments
        if call.method == "GET" and segments == ("subjects",):
            return [Reply(token, Answer(200, sorted(self.ids)))]
        if call.method == "GET" and segments == ("schemas",):
            listing = [
                {"subject": s, "version": 1, "id": i, "schema": self.schemas.get(s, "")}
                for s, i in sorted(self.ids.items())
            ]
            return [Reply(token, Answer(200, listing))]
        if call.method == "GET" and len(segments) == 4 and segments[:2] == ("schemas", "ids"):
            subjects = [s for s, i in sorted(self.ids.items()) if str(i) == segments[2]]
            if segments[3] == "subjects":
                return [Reply(token, Answer(200, subjects))]
            if segments[3] == "versions":
                versions = [{"subject": s, "version": 1} for s in subjects]
                return [Reply(token, Answer(200, versions))]
        if (
            call.method == "POST"
            and len(segments) == 3
            and segments[::2] == ("subjects", "versions")
        ):
            subject = segments[1]
            if subject in self.ids:
                return [Reply(token, Answer(200, {"id": self.ids[subject]}))]
            schema = call.body.get("schema") if isinstance(call.body, dict) else None
            same = [self.ids[s] for s, text in self.schemas.items() if schema and text == schema]
            pending = [schema_id for _, _, schema_id, _ in self._pending.values()]
            schema_id = same[0] if same else max([0, *self.ids.values(), *pending]) + 1
            self._next_append += 1
            value = json.dumps(call.body).encode()
            self._pending[self._next_append] = (token, subject, schema_id, value)
            key = json.dumps({"subject": subject, "id": schema_id}).encode()
            return [Append(self._next_append, ((key, value),))]
        if call.method == "POST" and segments == ("check",):
            task_id = len(self._tasks) + 1
            self._tasks[task_id] = token
            return [Task(task_id, call.body)]
        return [Reply(token, Answer(404, {"error_code": 404, "message": "HTTP 404 Not Found"}))]


BLOCKED_CHECKS: dict[str, tuple[threading.Event, threading.Event]] = {}
"""``POST /check`` with ``{"block": name}``: its check sets the first event (started) and
waits for the second (released), at most ``READY_TIMEOUT_S`` (a slow parse)."""


def blocked_check(name: str) -> tuple[threading.Event, threading.Event]:
    """The (started, release) events of the check ``{"block": name}``."""
    return BLOCKED_CHECKS.setdefault(name, (threading.Event(), threading.Event()))


def run_check(work: object) -> object:
    if isinstance(work, dict) and isinstance(work.get("block"), str):
        started, release = blocked_check(work["block"])
        started.set()
        release.wait(READY_TIMEOUT_S)
    return {
        "work": work,
        "in_a_worker_thread": threading.current_thread() is not threading.main_thread(),
        "thread": threading.current_thread().name,
    }


def subject_of(call: Call) -> str | None:
    return call.segments[1] if len(call.segments) > 1 and call.segments[0] == "subjects" else None


def is_write(call: Call) -> bool:
    return call.method != "GET"


def _new_shard(_config: BrokerConfig) -> Any:
    return StandInShard


STAND_IN_CORE = RegistryCore(_new_shard, run_check, subject_of, is_write)


# ── a broker with the stand-in, in the caller's event loop ───────────────────────────

READY_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.05
STAND_IN_SCHEMA_MAX_BYTES = 2048


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def stand_in_config(data_dir: Path, settings: Mapping[str, str]) -> BrokerConfig:
    config = BrokerConfig()
    config.apply_properties(
        {
            "http.port": "0",
            "offsets.topic.num.partitions": "1",
            "schema.registry.listeners": f"http://{HOST}:0",
            "schema.registry.schema.max.bytes": str(STAND_IN_SCHEMA_MAX_BYTES),
            **settings,
        }
    )
    if "listeners" not in settings:
        config.set_address(HOST, 0, origin="test")
    config.data_dir = data_dir
    return config


@asynccontextmanager
async def running_broker(
    data_dir: Path, settings: Mapping[str, str] | None = None
) -> AsyncIterator[Broker]:
    """A broker in this event loop, with the stand-in registry, until the block ends."""
    broker = Broker(stand_in_config(data_dir, settings or {}), registry_core=STAND_IN_CORE)
    await broker.start()
    running = asyncio.create_task(broker.run())
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not await asyncio.to_thread(accepts_connections, broker.server.port):
            assert not running.done(), "the broker stopped while starting"
            assert time.monotonic() < deadline, "the broker never accepted connections"
            await asyncio.sleep(POLL_INTERVAL_S)  # polling interval, not a synchronization
        yield broker
    finally:
        broker.request_stop()
        await running


def registry_url(broker: Broker) -> str:
    assert broker.schema_registry is not None
    return broker.schema_registry.urls[0]


async def call_registry(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    data: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    auth: str | None = None,
) -> tuple[int, Any, Mapping[str, str]]:
    """The status, JSON body and headers of one request (``auth``: an Authorization)."""
    headers = {**(headers or {}), **({"Authorization": auth} if auth else {})}
    async with session.request(method, url, data=data, headers=headers) as response:
        body = await response.json(content_type=None)
        return response.status, body, response.headers
