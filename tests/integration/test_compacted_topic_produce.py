"""Producing to a compacted topic: every record needs a key (Kafka refuses keyless records
there, since compaction could never remove them), and keyed records go in as usual."""

from __future__ import annotations

import pytest
from broker_process import BrokerProcess
from client_helpers import (
    DeliveryFailedError,
    consume_exactly,
    create_topic,
    produce_and_flush,
    producer_config,
)
from confluent_kafka import Producer


def test_keyless_record_on_a_compacted_topic_is_refused_with_invalid_record(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    producer = Producer(producer_config(broker.bootstrap, retries=0))
    with pytest.raises(DeliveryFailedError, match=r"(?i)invalid.record|without a key"):
        produce_and_flush(producer, topic, [{"value": b"no key"}])
    delivered = produce_and_flush(producer, topic, [{"key": b"k", "value": b"keyed"}])
    assert delivered[0].offset == 0, "the refused record took no offset"
    [message] = consume_exactly(broker.bootstrap, [(topic, 0)], 1)
    assert (message.key(), message.value()) == (b"k", b"keyed")


def test_keyless_records_are_fine_on_a_delete_policy_topic(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, config={"cleanup.policy": "delete"})
    producer = Producer(producer_config(broker.bootstrap))
    delivered = produce_and_flush(producer, topic, [{"value": b"no key"}])
    assert delivered[0].offset == 0
    [message] = consume_exactly(broker.bootstrap, [(topic, 0)], 1)
    assert (message.key(), message.value()) == (None, b"no key")
