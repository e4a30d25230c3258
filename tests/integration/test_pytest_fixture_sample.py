"""A user's test, as docs/testing.md shows it: nothing but the ``sluice_broker`` fixture
(from the plugin installed with sluice) and the user's own Kafka client."""

import uuid

from confluent_kafka import Consumer, Producer, TopicPartition


def test_my_code_round_trips_through_a_real_broker(sluice_broker):
    topic = f"orders-{uuid.uuid4().hex}"
    sluice_broker.create_topic(topic, partitions=2)

    producer = Producer({"bootstrap.servers": sluice_broker.bootstrap})
    for number in range(3):
        producer.produce(topic, key=b"customer-1", value=f"order {number}".encode(), partition=1)
    assert producer.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": sluice_broker.bootstrap,
            "group.id": "my-tests",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 1, 0)])
    received = []
    for _ in range(60):
        received += [m.value() for m in consumer.consume(3 - len(received), 0.5) if not m.error()]
        if len(received) == 3:
            break
    consumer.close()
    assert received == [b"order 0", b"order 1", b"order 2"]
