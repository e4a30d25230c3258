"""Resolving references (:mod:`sluice.schemas.references`): dependencies first, each
schema fetched once however many paths lead to it, a bound on how many, cycles and
missing versions, the same answer synchronously and awaited."""

from __future__ import annotations

import asyncio

import pytest

from sluice.schemas.api import InvalidSchema, Reference, ResolvedReference
from sluice.schemas.references import (
    REFERENCED_SCHEMAS_MAX,
    FetchedSchema,
    ReferenceNotFound,
    TooManyReferences,
    resolve,
    resolve_async,
)

Registered = dict[tuple[str, int], FetchedSchema]


def ref(subject: str, version: int = 1) -> Reference:
    return Reference(f"{subject}.avsc", subject, version)


class CountingFetch:
    def __init__(self, registered: Registered) -> None:
        self.registered = registered
        self.fetched: list[tuple[str, int]] = []

    def __call__(self, reference: Reference) -> FetchedSchema | None:
        self.fetched.append((reference.subject, reference.version))
        return self.registered.get((reference.subject, reference.version))


def diamond_chain(levels: int) -> Registered:
    """``top`` references l0a and l0b; each level's two reference both of the next."""
    registered: Registered = {}
    for level in range(levels):
        below = (ref(f"l{level + 1}a"), ref(f"l{level + 1}b")) if level + 1 < levels else ()
        for side in "ab":
            registered[(f"l{level}{side}", 1)] = FetchedSchema(f"text l{level}{side}", below)
    return registered


def test_dependencies_come_first_and_each_name_once() -> None:
    registered = {
        ("b", 1): FetchedSchema("B", (ref("d"),)),
        ("c", 1): FetchedSchema("C", (ref("d"),)),
        ("d", 1): FetchedSchema("D"),
    }
    resolved = resolve((ref("b"), ref("c")), CountingFetch(registered))
    assert resolved == (
        ResolvedReference("d.avsc", "D"),
        ResolvedReference("b.avsc", "B"),
        ResolvedReference("c.avsc", "C"),
    )


def test_a_deep_diamond_chain_fetches_each_version_once() -> None:
    levels = 40  # 2**40 paths to the bottom: walking them would never end
    fetch = CountingFetch(diamond_chain(levels))
    resolved = resolve((ref("l0a"), ref("l0b")), fetch)
    assert len(resolved) == 2 * levels
    assert sorted(fetch.fetched) == sorted(set(fetch.fetched)), "each version fetched once"
    names = [item.name for item in resolved]
    for level in range(levels - 1):
        for side in "ab":
            below = [names.index(f"l{level + 1}{s}.avsc") for s in "ab"]
            assert max(below) < names.index(f"l{level}{side}.avsc"), "dependencies first"


def test_more_distinct_schemas_than_the_bound_are_refused_without_recursion() -> None:
    depth = REFERENCED_SCHEMAS_MAX + 1
    registered = {
        (f"s{n}", 1): FetchedSchema(f"S{n}", (ref(f"s{n + 1}"),) if n + 1 < depth else ())
        for n in range(depth)
    }
    with pytest.raises(TooManyReferences) as refused:
        resolve((ref("s0"),), CountingFetch(registered))
    assert isinstance(refused.value, InvalidSchema)
    assert str(REFERENCED_SCHEMAS_MAX) in str(refused.value)
    exactly = {key: value for key, value in registered.items() if key != (f"s{depth - 1}", 1)}
    exactly[(f"s{depth - 2}", 1)] = FetchedSchema(f"S{depth - 2}")
    assert len(resolve((ref("s0"),), CountingFetch(exactly))) == REFERENCED_SCHEMAS_MAX


def test_a_missing_version_is_named_and_a_cycle_ends() -> None:
    with pytest.raises(ReferenceNotFound, match="subject 'gone' version 3 was not found"):
        resolve((Reference("g", "gone", 3),), CountingFetch({}))
    cycle = {("a", 1): FetchedSchema("A", (ref("b"),)), ("b", 1): FetchedSchema("B", (ref("a"),))}
    fetch = CountingFetch(cycle)
    assert {item.name for item in resolve((ref("a"),), fetch)} == {"a.avsc", "b.avsc"}
    assert fetch.fetched == [("a", 1), ("b", 1)]


def test_the_awaited_resolution_answers_the_same() -> None:
    registered = diamond_chain(6)
    fetch = CountingFetch(registered)

    async def fetch_async(reference: Reference) -> FetchedSchema | None:
        await asyncio.sleep(0)
        return fetch(reference)

    awaited = asyncio.run(resolve_async((ref("l0a"),), fetch_async))
    assert awaited == resolve((ref("l0a"),), CountingFetch(registered))
