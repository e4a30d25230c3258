"""Helpers of the registry's unit tests: a shard driven call by call, its appends kept as
a log that a fresh shard can replay, and a small format for tests that must not depend
on a real one.

The format ("FAKE", registered in place of a type for the duration of a test) reads a
JSON object ``{"name": N, "fields": [{"name": F, "type": T, "default"?: D}]}``; a field's
type is ``int``, ``string`` or the name of a referenced schema; a reader reads a writer's
data when each of its fields is in the writer with the same type, or has a default.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pytest

from sluice.common.errors import ErrorCode
from sluice.coordinator.api import Append, Effect, Reply, Task
from sluice.registry import checks
from sluice.registry.api import Answer, Call
from sluice.registry.config import RegistryConfig
from sluice.registry.shard import RegistryShard
from sluice.schemas import api as schemas_api
from sluice.schemas.api import InvalidSchema, ResolvedReference, SchemaType

PRIMITIVES = ("int", "string")


@dataclass(frozen=True)
class FakeParsed:
    schema_type: SchemaType
    document: dict[str, Any]

    def canonical(self) -> str:
        return json.dumps(self.document, separators=(",", ":"))

    def normalized(self) -> FakeParsed:
        fields = sorted(self.document["fields"], key=lambda f: f["name"])
        return FakeParsed(self.schema_type, {**self.document, "fields": fields})

    def record_names(self) -> list[str]:
        return [self.document["name"]]

    def serialized(self) -> str:
        return "serialized:" + self.canonical()


class FakeFormat:
    def __init__(self, schema_type: SchemaType) -> None:
        self.schema_type = schema_type

    def parse(self, text: str, references: Sequence[ResolvedReference] = ()) -> FakeParsed:
        try:
            document = json.loads(text)
        except ValueError as e:
            raise InvalidSchema(f"not JSON: {e}") from None
        if not isinstance(document, dict) or not isinstance(document.get("fields"), list):
            raise InvalidSchema("a schema is an object with fields")
        known = {*PRIMITIVES, *(json.loads(ref.text)["name"] for ref in references)}
        for item in document["fields"]:
            if not isinstance(item, dict) or item.get("type") not in known:
                raise InvalidSchema(f"field {item!r} has an unknown type")
        return FakeParsed(self.schema_type, document)

    def compatibility_errors(self, reader: FakeParsed, writer: FakeParsed) -> list[str]:  # type: ignore[override]
        written = {f["name"]: f["type"] for f in writer.document["fields"]}
        problems = []
        for item in reader.document["fields"]:
            if written.get(item["name"]) == item["type"] or "default" in item:
                continue
            problems.append(f"/fields/{item['name']}: reader field has no default")
        return problems

    def decode(self, schema: FakeParsed, payload: bytes) -> object:
        return json.loads(payload)

    def encode(self, schema: FakeParsed, value: object) -> bytes:
        return json.dumps(value).encode()


def install_fake_formats(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every schema type parses with :class:`FakeFormat` until the test ends (with a
    cache of parsed schemas of its own, so none is shared with the real formats)."""
    uncached = checks._parse.__wrapped__
    monkeypatch.setattr(checks, "_parse", functools.lru_cache(maxsize=None)(uncached))
    for schema_type in SchemaType:
        module = ModuleType(f"sluice_test_fake_format_{schema_type.value.lower()}")
        module.FORMAT = FakeFormat(schema_type)  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, module.__name__, module)
        monkeypatch.setitem(schemas_api._FORMAT_MODULES, schema_type, module.__name__)


def record_schema(name: str, *fields: tuple[str, str] | tuple[str, str, object]) -> str:
    """A FAKE schema's text: fields as (name, type) or (name, type, default)."""
    items = []
    for item in fields:
        entry: dict[str, object] = {"name": item[0], "type": item[1]}
        if len(item) == 3:
            entry["default"] = item[2]
        items.append(entry)
    return json.dumps({"name": name, "fields": items})


def path(text: str) -> tuple[str, ...]:
    return tuple(part for part in text.split("/") if part)


@dataclass
class Driver:
    """A shard whose tasks run at once and whose appends commit at once (unless told
    otherwise), with every committed record kept in ``log``."""

    shard: RegistryShard = field(default_factory=RegistryShard)
    log: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    fail_appends_with: ErrorCode | None = None
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
                if self.fail_appends_with is None:
                    self.log.extend(records)
                return self.shard.append_completed(0, append_id, self.fail_appends_with)
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
