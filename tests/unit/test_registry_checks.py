"""The registry's parse cache: registered versions only, never a client's candidate, and
bounded by the bytes of the texts it holds."""

from __future__ import annotations

import json

from registry_testing import record_schema

from sluice.registry import checks
from sluice.registry.checks import CheckWork, ParsedCache, Prior, SchemaText, text_bytes
from sluice.schemas.api import SchemaType


def avro(name: str) -> SchemaText:
    return SchemaText(SchemaType.AVRO, record_schema(name, ("id", "int")))


def test_candidates_never_enter_the_cache_only_registered_versions_do() -> None:
    checks.PARSED.clear()
    registered = Prior(1, avro("Registered"))
    for n in range(50):
        work = CheckWork(avro(f"Candidate{n}"), level="BACKWARD", against=(registered,))
        assert checks.run(work).invalid is None
        lookup = CheckWork(avro(f"Looked{n}"), existing=(registered,))
        assert checks.run(lookup).same_as == ()
    assert len(checks.PARSED) == 1
    assert checks.PARSED.bytes == text_bytes(registered.schema)


def test_the_cache_is_bounded_by_bytes_and_drops_the_least_recently_used() -> None:
    schemas = [avro(f"R{n}") for n in range(4)]
    size = text_bytes(schemas[0])
    cache = ParsedCache(bytes_max=3 * size)
    for schema in schemas[:3]:
        cache.parse(schema, False)
    cache.parse(schemas[0], False)  # used again: R1 is now the oldest
    cache.parse(schemas[3], False)
    assert (len(cache), cache.bytes) == (3, 3 * size)
    assert cache.parse(schemas[0], False) is cache.parse(schemas[0], False), "R0 kept"
    huge = SchemaText(
        SchemaType.AVRO,
        json.dumps({"type": "record", "name": "Huge", "doc": "x" * 4 * size, "fields": []}),
    )
    cache.parse(huge, False)
    assert cache.bytes <= 3 * size, "a text over the whole bound is not kept"
