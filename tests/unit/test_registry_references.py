"""The registry resolves a schema's references from its state once per version, however
many paths lead to one (a diamond), and refuses too many with 42201."""

from __future__ import annotations

import pytest

from sluice.registry import reads
from sluice.registry.errors import ErrorCode, RegistryError
from sluice.registry.records import SchemaKey, SchemaValue
from sluice.registry.state import RegistryState
from sluice.schemas.api import Reference, SchemaType
from sluice.schemas.references import REFERENCED_SCHEMAS_MAX


class CountingState(RegistryState):
    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    def version(self, subject: str, version: int) -> SchemaValue | None:
        self.lookups += 1
        return super().version(subject, version)


def put(state: RegistryState, subject: str, references: tuple[Reference, ...] = ()) -> None:
    schema_id = state.max_id + 1
    value = SchemaValue(subject, 1, schema_id, f"text of {subject}", SchemaType.AVRO, references)
    state.apply(SchemaKey(subject, 1), value)


def test_a_diamond_chain_is_resolved_with_one_lookup_per_version() -> None:
    levels = 16  # 2**16 paths: the old walk made one lookup per path
    state = CountingState()
    for level in reversed(range(levels)):
        below = tuple(Reference(f"n{level + 1}{side}", f"l{level + 1}{side}", 1) for side in "ab")
        for side in "ab":
            put(state, f"l{level}{side}", below if level + 1 < levels else ())
    state.lookups = 0
    top = (Reference("n0a", "l0a", 1), Reference("n0b", "l0b", 1))
    resolved = reads.resolve_references(state, top)
    assert len(resolved) == 2 * levels
    assert state.lookups == 2 * levels


def test_more_referenced_schemas_than_the_bound_is_42201() -> None:
    state = RegistryState()
    count = REFERENCED_SCHEMAS_MAX + 1
    put(state, f"s{count - 1}")
    for n in reversed(range(count - 1)):
        put(state, f"s{n}", (Reference(f"n{n + 1}", f"s{n + 1}", 1),))
    with pytest.raises(RegistryError) as refused:
        reads.resolve_references(state, (Reference("n0", "s0", 1),))
    assert refused.value.code is ErrorCode.INVALID_SCHEMA
