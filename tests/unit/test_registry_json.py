"""The registry shard with the real JSON Schema format: registering, evolving under
BACKWARD, refusing a breaking change with the format's reasons, and normalize."""

from __future__ import annotations

import json

from registry_testing import Driver

from sluice.registry.api import Answer

OPEN = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
MORE = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "note": {"type": "string"}},
    "required": ["id"],
}
RETYPED = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}


def register(driver: Driver, subject: str, schema: object, **query: str) -> Answer:
    body = {"schema": json.dumps(schema), "schemaType": "JSON"}
    return driver.call("POST", f"subjects/{subject}/versions", body, **query)


def test_json_schemas_register_evolve_and_refuse_breaking_changes() -> None:
    driver = Driver()
    first = register(driver, "orders-value", OPEN)
    assert (first.status, first.body["id"]) == (200, 1), first
    assert driver.call("GET", "schemas/ids/1").body["schemaType"] == "JSON"
    assert json.loads(driver.call("GET", "schemas/ids/1/schema").body) == OPEN
    assert register(driver, "orders-value", OPEN).body["id"] == 1
    refused = register(driver, "orders-value", RETYPED)
    assert (refused.status, refused.body["error_code"]) == (409, 40901), refused
    check = driver.call(
        "POST",
        "compatibility/subjects/orders-value/versions",
        {"schema": json.dumps(RETYPED), "schemaType": "JSON"},
        verbose="true",
    )
    assert check.body["is_compatible"] is False
    assert check.body["messages"]
    invalid = register(driver, "other", {"type": 12})
    assert (invalid.status, invalid.body["error_code"]) == (422, 42201), invalid
    found = driver.call(
        "POST", "subjects/orders-value", {"schema": json.dumps(OPEN), "schemaType": "JSON"}
    )
    assert (found.status, found.body["version"]) == (200, 1)


def test_json_schema_keys_in_another_order_are_one_schema_once_normalized() -> None:
    driver = Driver()
    shuffled = dict(reversed(list(MORE.items())))
    first = register(driver, "s", MORE, normalize="true")
    again = register(driver, "s", shuffled, normalize="true")
    assert again.body["id"] == first.body["id"]
    assert driver.call("GET", "subjects/s/versions") == Answer(200, [1])
