"""The registry shard with the real Protobuf format: a schema registered as text and as
confluent-kafka's base64 descriptor is one schema with one id, ``format=serialized``
answers the descriptor, references resolve, and compatibility is the format's."""

from __future__ import annotations

import base64

from google.protobuf import descriptor_pb2
from registry_testing import Driver

from sluice.registry.api import Answer

MONEY = 'syntax = "proto3";\npackage shop;\nmessage Money { int64 cents = 1; }\n'
ORDER = (
    'syntax = "proto3";\npackage shop;\nimport "money.proto";\n'
    "message Order { string id = 1; shop.Money total = 2; }\n"
)
ORDER_RETYPED = (
    'syntax = "proto3";\npackage shop;\nimport "money.proto";\n'
    "message Order { int64 id = 1; shop.Money total = 2; }\n"
)
REFERENCES = [{"name": "money.proto", "subject": "money", "version": 1}]


def register(driver: Driver, subject: str, text: str, **extra: object) -> Answer:
    body = {"schema": text, "schemaType": "PROTOBUF", **extra}
    return driver.call("POST", f"subjects/{subject}/versions", body)


def test_protobuf_text_and_descriptor_are_one_schema_and_serialized_is_the_descriptor() -> None:
    driver = Driver()
    assert register(driver, "money", MONEY).status == 200
    order = register(driver, "orders-value", ORDER, references=REFERENCES)
    assert order.status == 200, order
    schema_id = order.body["id"]
    got = driver.call("GET", f"schemas/ids/{schema_id}")
    assert got.body["schemaType"] == "PROTOBUF"
    assert got.body["references"] == REFERENCES
    serialized = driver.call("GET", f"schemas/ids/{schema_id}", format="serialized")
    assert serialized.status == 200, serialized
    descriptor = descriptor_pb2.FileDescriptorProto.FromString(
        base64.b64decode(serialized.body["schema"])
    )
    assert [message.name for message in descriptor.message_type] == ["Order"]
    version = driver.call("GET", "subjects/orders-value/versions/1", format="serialized")
    assert version.body["schema"] == serialized.body["schema"]
    # confluent-kafka-python registers the base64 descriptor: the same schema, same id.
    again = register(driver, "orders-value", serialized.body["schema"], references=REFERENCES)
    assert (again.body["id"], again.body["version"]) == (schema_id, 1)
    assert driver.call("GET", "subjects/orders-value/versions") == Answer(200, [1])


def test_protobuf_compatibility_and_invalid_schemas() -> None:
    driver = Driver()
    register(driver, "money", MONEY)
    register(driver, "orders-value", ORDER, references=REFERENCES)
    refused = register(driver, "orders-value", ORDER_RETYPED, references=REFERENCES)
    assert (refused.status, refused.body["error_code"]) == (409, 40901), refused
    check = driver.call(
        "POST",
        "compatibility/subjects/orders-value/versions/latest",
        {"schema": ORDER_RETYPED, "schemaType": "PROTOBUF", "references": REFERENCES},
        verbose="true",
    )
    assert check.body["is_compatible"] is False
    assert check.body["messages"]
    invalid = register(driver, "other", 'syntax = "proto3";\nmessage A { strin x = 1; }\n')
    assert (invalid.status, invalid.body["error_code"]) == (422, 42201)
    assert "strin" in invalid.body["message"]
    missing = register(driver, "other", ORDER)
    assert (missing.status, missing.body["error_code"]) == (422, 42201)
