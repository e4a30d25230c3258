"""Transactions do not exist yet: every client must learn it at once, not by timing out.

The broker answers FindCoordinator(TRANSACTION), InitProducerId with a transactional id
and transactional produce batches with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the one
error each client treats as fatal at that step (COORDINATOR_NOT_AVAILABLE made
librdkafka's ``init_transactions()`` retry until its timeout, kafka-python block for
``max_block_ms`` and aiokafka's ``start()`` loop forever). Each client test gives the
client a timeout well above "at once" and asserts both the error and that it came long
before that timeout.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import TransactionalIdAuthorizationFailed
from confluent_kafka import KafkaError, KafkaException, Producer
from kafka import KafkaProducer
from kafka.errors import TransactionalIdAuthorizationFailedError
from kafka_wire import (
    KafkaConnection,
    Record,
    create_topics_request,
    encode_batch,
    produce_request,
)
from kio.schema.find_coordinator.v1 import request as find_coordinator_v1
from kio.schema.find_coordinator.v2 import request as find_coordinator_v2
from kio.schema.init_producer_id.v1.request import InitProducerIdRequest

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
TRANSACTION_KEY_TYPE = 1
ATTRIBUTE_TRANSACTIONAL = 0x10

CLIENT_TIMEOUT_S = 20.0
"""What each client is allowed to wait; the refusal must come well inside it."""

AT_ONCE_S = 5.0
"""How soon "at once" is: a few round trips and a metadata refresh, with room for a
loaded machine."""


def test_confluent_init_transactions_fails_fatally_at_once(broker) -> None:
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": "sluice-tests-tx-c"}
    )
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(CLIENT_TIMEOUT_S)
    elapsed_s = time.monotonic() - started
    error: KafkaError = raised.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error
    assert error.fatal() and not error.retriable(), error
    assert "transactions are not supported" in error.str()
    assert elapsed_s < AT_ONCE_S, f"init_transactions took {elapsed_s:.1f} s"


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_transactional_producer_fails_at_once(broker, topic: str) -> None:
    """kcat 1.7 (librdkafka 2.0) with ``-X transactional.id``: it calls
    ``init_transactions()`` before producing."""
    started = time.monotonic()
    completed = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-t", topic, "-P", "-X", "transactional.id=tx-kcat"],
        input="never written\n",
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S * 2,
        check=False,
    )
    elapsed_s = time.monotonic() - started
    assert completed.returncode != 0
    assert "Transactional Id authorization failed" in completed.stderr
    assert "transactions are not supported" in completed.stderr
    assert elapsed_s < AT_ONCE_S, f"kcat took {elapsed_s:.1f} s"


KAFKAJS_MODULES = Path(__file__).parents[1] / "js" / "node_modules"

KAFKAJS_TRANSACTION = """
const { Kafka, logLevel } = require("kafkajs");
(async () => {
  const kafka = new Kafka({
    clientId: "sluice-tests", brokers: [process.env.BOOTSTRAP], logLevel: logLevel.NOTHING,
  });
  const producer = kafka.producer({
    transactionalId: "sluice-tests-tx-js", idempotent: true, maxInFlightRequests: 1,
  });
  const started = Date.now();
  let outcome = { began: true };
  try {
    await producer.connect();
    await producer.transaction();
  } catch (e) {
    outcome = { name: e.name, retriable: e.retriable };
  }
  outcome.elapsed_s = (Date.now() - started) / 1000;
  await producer.disconnect();
  console.log(JSON.stringify(outcome));
})();
"""


@pytest.mark.skipif(
    shutil.which("node") is None or not (KAFKAJS_MODULES / "kafkajs").is_dir(),
    reason="Node.js or kafkajs (tests/js) is missing",
)
def test_kafkajs_transaction_fails_at_once(broker) -> None:
    """kafkajs gives up on any coordinator error but its few retriable ones."""
    completed = subprocess.run(
        ["node", "-e", KAFKAJS_TRANSACTION],
        capture_output=True,
        text=True,
        env=dict(os.environ, NODE_PATH=str(KAFKAJS_MODULES), BOOTSTRAP=broker.bootstrap),
        timeout=CLIENT_TIMEOUT_S * 3,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    outcome = json.loads(completed.stdout.strip().splitlines()[-1])
    assert "began" not in outcome, "a transaction began on a broker without transactions"
    assert outcome["retriable"] is False, outcome
    assert outcome["elapsed_s"] < AT_ONCE_S, outcome


def test_kafka_python_init_transactions_fails_at_once(broker) -> None:
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        transactional_id="sluice-tests-tx-kp",
        max_block_ms=int(CLIENT_TIMEOUT_S * 1000),
    )
    try:
        started = time.monotonic()
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
        elapsed_s = time.monotonic() - started
    finally:
        producer.close(timeout=5)
    assert elapsed_s < AT_ONCE_S, f"init_transactions took {elapsed_s:.1f} s"


def test_aiokafka_transactional_producer_start_fails_at_once(broker) -> None:
    async def start() -> float:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, transactional_id="sluice-tests-tx-aio"
        )
        started = time.monotonic()
        try:
            with pytest.raises(TransactionalIdAuthorizationFailed):
                await asyncio.wait_for(producer.start(), CLIENT_TIMEOUT_S)
        finally:
            await producer.stop()
        return time.monotonic() - started

    elapsed_s = asyncio.run(start())
    assert elapsed_s < AT_ONCE_S, f"start() took {elapsed_s:.1f} s"


@pytest.mark.parametrize("version", [1, 2])
def test_find_coordinator_for_a_transactional_id_is_refused(broker, version: int) -> None:
    module = {1: find_coordinator_v1, 2: find_coordinator_v2}[version]
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(
            module.FindCoordinatorRequest(key="sluice-tests-tx-raw", key_type=TRANSACTION_KEY_TYPE)
        )
    assert int(response.error_code) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert "transactions are not supported" in (response.error_message or "")
    assert int(response.node_id) == -1


def test_group_coordinator_lookup_still_works(broker) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(
            find_coordinator_v2.FindCoordinatorRequest(key="sluice-tests-group", key_type=0)
        )
    assert int(response.error_code) == 0
    assert int(response.port) == broker.port


def test_init_producer_id_with_a_transactional_id_is_refused(broker) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        transactional = connection.request(
            InitProducerIdRequest(
                transactional_id="sluice-tests-tx-raw",
                transaction_timeout=datetime.timedelta(seconds=60),
            )
        )
        idempotent = connection.request(
            InitProducerIdRequest(
                transactional_id=None, transaction_timeout=datetime.timedelta(milliseconds=-1)
            )
        )
    assert int(transactional.error_code) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert int(transactional.producer_id) == -1
    assert int(idempotent.error_code) == 0 and int(idempotent.producer_id) >= 0


def test_transactional_batches_are_refused_and_not_stored(broker, topic: str) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        created = connection.request(create_topics_request(topic))
        assert int(created.topics[0].error_code) == 0
        pid = connection.request(
            InitProducerIdRequest(
                transactional_id=None, transaction_timeout=datetime.timedelta(milliseconds=-1)
            )
        )
        batch = encode_batch(
            [Record(None, b"in a transaction")],
            producer_id=int(pid.producer_id),
            producer_epoch=int(pid.producer_epoch),
            base_sequence=0,
            attributes=ATTRIBUTE_TRANSACTIONAL,
        )
        refused = connection.request(produce_request(topic, 0, batch))
        plain = encode_batch(
            [Record(None, b"plain")],
            producer_id=int(pid.producer_id),
            producer_epoch=int(pid.producer_epoch),
            base_sequence=0,
        )
        accepted = connection.request(produce_request(topic, 0, plain))
    refused_partition = refused.responses[0].partition_responses[0]
    assert int(refused_partition.error_code) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert "transactions are not supported" in (refused_partition.error_message or "")
    accepted_partition = accepted.responses[0].partition_responses[0]
    assert int(accepted_partition.error_code) == 0
    assert int(accepted_partition.base_offset) == 0, "the refused batch took no offset"
