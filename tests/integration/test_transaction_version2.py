"""Transaction version 2 (KIP-890 part 2) on the wire, as Kafka's Java 4.x client speaks
it: InitProducerId v4, Produce v12 and TxnOffsetCommit v5 that add their partitions to
the transaction without AddPartitionsToTxn or AddOffsetsToTxn, EndTxn v5 that returns
a bumped epoch; a Produce of the finished transaction is then fenced."""

from __future__ import annotations

import datetime
import time

from client_helpers import consume_exactly, create_topic, unique_group_id
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kafka_wire import KafkaConnection, Record, encode_batch
from kio.schema.end_txn.v5 import request as end_txn_v5
from kio.schema.find_coordinator.v3 import request as find_coordinator_v3
from kio.schema.init_producer_id.v4 import request as init_producer_id_v4
from kio.schema.produce.v12 import request as produce_v12
from kio.schema.txn_offset_commit.v5 import request as txn_offset_commit_v5

from sluice.common.errors import ErrorCode

TRANSACTIONAL = 0x10
COORDINATOR_TIMEOUT_S = 30.0


def find_coordinator(connection: KafkaConnection, transactional_id: str) -> None:
    """As a client starts: the coordinator's topic is made on this first lookup, and the
    broker answers COORDINATOR_NOT_AVAILABLE until it leads its partition."""
    deadline = time.monotonic() + COORDINATOR_TIMEOUT_S
    while True:
        found = connection.request(
            find_coordinator_v3.FindCoordinatorRequest(key=transactional_id, key_type=1)
        )
        if found.error_code == ErrorCode.none or time.monotonic() > deadline:
            assert found.error_code == ErrorCode.none, found
            return
        time.sleep(0.05)  # the retry interval a client would use


def produce(topic: str, transactional_id: str, records: bytes) -> produce_v12.ProduceRequest:
    return produce_v12.ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            produce_v12.TopicProduceData(
                name=topic,
                partition_data=(produce_v12.PartitionProduceData(index=0, records=records),),
            ),
        ),
    )


def test_implicit_adds_and_an_epoch_per_transaction(broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    transactional_id, group = f"v2-{topic}", unique_group_id()
    with KafkaConnection(broker.host, broker.port) as connection:
        find_coordinator(connection, transactional_id)
        init = connection.request(
            init_producer_id_v4.InitProducerIdRequest(
                transactional_id=transactional_id,
                transaction_timeout=datetime.timedelta(seconds=60),
            )
        )
        assert init.error_code == ErrorCode.none
        producer_id, epoch = int(init.producer_id), int(init.producer_epoch)

        def batch(value: bytes, sequence: int, at_epoch: int) -> bytes:
            return encode_batch(
                [Record(key=None, value=value)],
                producer_id=producer_id,
                producer_epoch=at_epoch,
                base_sequence=sequence,
                attributes=TRANSACTIONAL,
            )

        answer = connection.request(produce(topic, transactional_id, batch(b"v2", 0, epoch)))
        (partition,) = answer.responses[0].partition_responses
        assert partition.error_code == ErrorCode.none, "Produce v12 adds the partition itself"
        committed = connection.request(
            txn_offset_commit_v5.TxnOffsetCommitRequest(
                transactional_id=transactional_id,
                group_id=group,
                producer_id=producer_id,
                producer_epoch=epoch,
                topics=(
                    txn_offset_commit_v5.TxnOffsetCommitRequestTopic(
                        name=topic,
                        partitions=(
                            txn_offset_commit_v5.TxnOffsetCommitRequestPartition(
                                partition_index=0, committed_offset=7, committed_metadata=""
                            ),
                        ),
                    ),
                ),
            )
        )
        assert committed.topics[0].partitions[0].error_code == ErrorCode.none
        ended = connection.request(
            end_txn_v5.EndTxnRequest(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=epoch,
                committed=True,
            )
        )
        assert ended.error_code == ErrorCode.none
        assert (int(ended.producer_id), int(ended.producer_epoch)) == (producer_id, epoch + 1)
        # A Produce of the finished transaction, arriving late, is fenced.
        late = connection.request(produce(topic, transactional_id, batch(b"late", 1, epoch)))
        (refused,) = late.responses[0].partition_responses
        assert refused.error_code == ErrorCode.invalid_producer_epoch
    (message,) = consume_exactly(broker.bootstrap, [(topic, 0)], 1, extra_wait_s=0.5)
    assert message.value() == b"v2"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        (found,) = consumer.committed([ConfluentTopicPartition(topic, 0)], 30)
        assert found.offset == 7
    finally:
        consumer.close()
