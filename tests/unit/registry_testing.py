"""Helpers of the registry's unit tests: a shard driven call by call, its appends kept as
a log that a fresh shard can replay, and Avro record texts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sluice.common.errors import ErrorCode
from sluice.coordinator.api import Append, Effect, Reload, Reply, Task
from sluice.registry import checks
from sluice.registry.api import Answer, Call
from sluice.registry.config import RegistryConfig
from sluice.registry.shard import RegistryShard


def record_schema(name: str, *fields: tuple[str, str] | tuple[str, str, object]) -> str:
    """An Avro record's text: fields as (name, type) or (name, type, default)."""
    items = []
    for item in fields:
        entry: dict[str, object] = {"name": item[0], "type": item[1]}
        if len(item) == 3:
            entry["default"] = item[2]
        items.append(entry)
    return json.dumps({"type": "record", "name": name, "fields": items})


def path(text: str) -> tuple[str, ...]:
    return tuple(part for part in text.split("/") if part)


@dataclass
class Driver:
    """A shard whose tasks run at once and whose appends commit at once (unless told
    otherwise), with every committed record kept in ``log``."""

    shard: RegistryShard = field(default_factory=RegistryShard)
    log: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    fail_appends_with: ErrorCode | None = None
    failed_appends_reach_the_log: bool = False
    """A failed append's records are in the log all the same (a write that timed out
    waiting for its replicas, committed later)."""
    reloads: int = 0
    """How many times the shard asked to be reloaded (and was: replayed from ``log``)."""
    hold: bool = False
    """Keep tasks and appends in ``held`` instead of completing them."""
    held: list[Effect] = field(default_factory=list)
    answers: dict[int, Answer] = field(default_factory=dict)
    next_token: int = 0

    @classmethod
    def with_config(cls, config: RegistryConfig) -> Driver:
        return cls(RegistryShard(config))

    def send(
        self,
        method: str,
        target: str,
        body: Any = None,
        **query: str,
    ) -> int:
        """Hand a call in; its token (the answer lands in ``answers``)."""
        self.next_token += 1
        token = self.next_token
        self.run(self.shard.handle(0, token, Call(method, path(target), query, body)))
        return token

    def call(self, method: str, target: str, body: Any = None, **query: str) -> Answer:
        token = self.send(method, target, body, **query)
        return self.answers.pop(token)

    def run(self, effects: list[Effect]) -> None:
        pending = list(effects)
        while pending:
            effect = pending.pop(0)
            if self.hold and not isinstance(effect, Reply):
                self.held.append(effect)
                continue
            pending.extend(self.complete(effect))

    def complete(self, effect: Effect) -> list[Effect]:
        match effect:
            case Reply(token, response):
                assert isinstance(response, Answer)
                assert token not in self.answers
                self.answers[token] = response
                return []
            case Task(task_id, work):
                assert isinstance(work, checks.CheckWork)
                return self.shard.task_completed(0, task_id, checks.run(work))
            case Append(append_id, records):
                if self.fail_appends_with is None or self.failed_appends_reach_the_log:
                    self.log.extend(records)
                return self.shard.append_completed(0, append_id, self.fail_appends_with)
            case Reload():
                self.reloads += 1
                self.shard = self.replayed()
                return []
        raise AssertionError(effect)

    def release(self) -> Iterator[Effect]:
        """Complete held effects one at a time, in order, until none is left (what they
        lead to is held too, and completed in its turn)."""
        while self.held:
            effect = self.held.pop(0)
            yield effect
            self.run(self.complete(effect))
        self.hold = False

    def replayed(self) -> RegistryShard:
        """A fresh shard loaded from the records committed so far."""
        shard = RegistryShard(self.shard.config)
        for key, value in self.log:
            shard.replay(key, value)
        shard.load_completed(0)
        return shard
