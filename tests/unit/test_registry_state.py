"""The registry's state finds a schema's id and a version's referrers from its indexes,
never by scanning every version (a registration asks both, once per version of its
subject), and the indexes follow every kind of record."""

from __future__ import annotations

from collections.abc import Iterator

from registry_testing import Driver, record_schema

from sluice.registry.api import Answer
from sluice.registry.records import (
    ClearSubjectKey,
    ClearSubjectValue,
    DeleteSubjectKey,
    DeleteSubjectValue,
    SchemaKey,
    SchemaValue,
)
from sluice.registry.state import RegistryState
from sluice.schemas.api import Reference, SchemaType

CUSTOMER = record_schema("Customer", ("id", "int"))


class NoScanState(RegistryState):
    def all_versions(self) -> Iterator[SchemaValue]:
        raise AssertionError("scanned every version")


def value(subject: str, version: int, schema_id: int, *refs: Reference) -> SchemaValue:
    return SchemaValue(subject, version, schema_id, f"text {schema_id}", SchemaType.AVRO, refs)


def candidate(text: str, *refs: Reference) -> SchemaValue:
    return SchemaValue("new", 1, 0, text, SchemaType.AVRO, refs)


def test_registering_and_deleting_never_scan_every_version() -> None:
    driver = Driver()
    driver.shard.state = NoScanState()
    assert driver.call("POST", "subjects/customer/versions", {"schema": CUSTOMER}).status == 200
    body = {
        "schema": record_schema("Order", ("buyer", "Customer")),
        "references": [{"name": "Customer", "subject": "customer", "version": 1}],
    }
    order = driver.call("POST", "subjects/order/versions", body)
    assert order.status == 200, order
    again = driver.call("POST", "subjects/other/versions", {"schema": CUSTOMER})
    assert again.body["id"] == 1, "the same schema elsewhere keeps its id"
    assert driver.call("GET", "subjects/customer/versions/1/referencedby") == Answer(
        200, [order.body["id"]]
    )
    assert driver.call("DELETE", "subjects/customer/versions/1").status == 422
    assert driver.call("DELETE", "subjects/order").status == 200
    assert driver.call("DELETE", "subjects/order", permanent="true").status == 200
    assert driver.call("DELETE", "subjects/customer/versions/1").status == 200
    driver.shard.state.check_invariants()


def test_the_indexes_follow_every_kind_of_record() -> None:
    state = NoScanState()
    base = Reference("Base", "base", 1)
    state.apply(SchemaKey("base", 1), value("base", 1, 1))
    state.apply(SchemaKey("a", 1), value("a", 1, 2, base))
    state.apply(SchemaKey("a", 2), value("a", 2, 3, base))
    state.apply(SchemaKey("b", 1), value("b", 1, 2, base))
    state.check_invariants()
    assert [(v.subject, v.version) for v in state.referenced_by("base", 1)] == [
        ("a", 1),
        ("a", 2),
        ("b", 1),
    ]
    assert state.find_id(candidate("text 2", base)) == 2
    state.apply(DeleteSubjectKey("a"), DeleteSubjectValue("a", 2))
    state.check_invariants()
    assert [(v.subject, v.version) for v in state.referenced_by("base", 1)] == [("b", 1)]
    assert len(state.referenced_by("base", 1, deleted=True)) == 3
    state.apply(ClearSubjectKey("a"), ClearSubjectValue("a"))
    state.check_invariants()
    assert len(state.referenced_by("base", 1, deleted=True)) == 1
    state.apply(SchemaKey("b", 1), None)
    state.check_invariants()
    assert state.referenced_by("base", 1, deleted=True) == []
    assert state.find_id(candidate("text 2", base)) is None
    assert state.find_id(candidate("text 1")) == 1
