"""FindCoordinator's share keys (key type 2): ``group:topic id:partition``, the topic id
in Kafka's base64 form or as a UUID; the group id may itself contain colons."""

from __future__ import annotations

import base64
import uuid

from sluice.broker.handlers.groups import parse_share_key
from sluice.share.state import ShareStateKey

TOPIC_ID = uuid.UUID("6f1c2e0a-9d4b-4e33-a1f2-0c1d2e3f4a5b")
KAFKA_TEXT = base64.urlsafe_b64encode(TOPIC_ID.bytes).decode().rstrip("=")


def test_both_topic_id_forms_and_colons_in_the_group() -> None:
    assert parse_share_key(f"orders:{KAFKA_TEXT}:3") == ShareStateKey("orders", TOPIC_ID, 3)
    assert parse_share_key(f"a:b:{TOPIC_ID}:0") == ShareStateKey("a:b", TOPIC_ID, 0)


def test_the_key_hashes_as_the_share_coordinator_places_it() -> None:
    key = parse_share_key(f"orders:{KAFKA_TEXT}:3")
    assert key is not None
    assert key.coordinator_key() == f"orders:{TOPIC_ID}:3"


def test_malformed_keys() -> None:
    for key in (
        "",
        "orders",
        f":{KAFKA_TEXT}:0",
        f"orders:{KAFKA_TEXT}",
        f"orders:{KAFKA_TEXT}:x",
        f"orders:{KAFKA_TEXT}:-1",
        "orders:not-a-topic-id:0",
    ):
        assert parse_share_key(key) is None, key
