"""Consume-transform-produce, exactly once: each batch of input records, the records made
from them and the input offsets go into one transaction.

::

    consumer = sluice.Consumer("orders", group_id="enricher", delivery="exactly-once")
    producer = sluice.Producer(transactional_id="enricher-1")
    async with consumer, producer:
        await run_exactly_once(consumer, producer, lambda record: [
            Output("orders-enriched", enrich(record.value), key=record.key),
        ])

Per batch::

    getmany() ─▶ begin_transaction() ─▶ send every output ─▶ send_offsets_to_transaction(
        the batch's ends, consumer.group_metadata()) ─▶ commit_transaction()
      on an abortable failure (a send failed, the group rebalanced): abort_transaction(),
      rewind the consumer to the committed offsets, and go on (the batch is read again)
      on ProducerFencedError: raise (another instance took over)

A crash at any point leaves either the whole transaction (outputs and offsets) or none
of it: read_committed readers of the outputs see every input's outputs once.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from sluice.client.consumer_api import Consumer, ConsumerRecord
from sluice.client.errors import ClientError
from sluice.client.producer_api import Headers, Producer
from sluice.client.transactions import ProducerFencedError
from sluice.common.errors import KafkaError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Output:
    """A record to produce from an input record."""

    topic: str
    value: bytes | None
    key: bytes | None = None
    headers: Headers | None = None
    partition: int | None = None


Transform = Callable[[ConsumerRecord], Iterable[Output] | Awaitable[Iterable[Output]]]


async def run_exactly_once(
    consumer: Consumer,
    producer: Producer,
    transform: Transform,
    *,
    max_transactions: int | None = None,
    poll_timeout_ms: int = 500,
    stop: asyncio.Event | None = None,
) -> int:
    """Run the loop until ``stop`` is set or ``max_transactions`` committed; returns how
    many transactions committed. ``transform`` may be a coroutine function."""
    if consumer.delivery != "exactly-once":
        raise ValueError('run_exactly_once needs a Consumer with delivery="exactly-once"')
    committed = 0
    while (max_transactions is None or committed < max_transactions) and not (
        stop is not None and stop.is_set()
    ):
        batch = await consumer.getmany(timeout_ms=poll_timeout_ms)
        if not batch:
            continue
        await producer.begin_transaction()
        try:
            for records in batch.values():
                for record in records:
                    outputs = transform(record)
                    if inspect.isawaitable(outputs):
                        outputs = await outputs
                    for output in outputs:
                        await producer.send(
                            output.topic,
                            output.value,
                            key=output.key,
                            headers=output.headers,
                            partition=output.partition,
                        )
            ends = {tp: records[-1].offset + 1 for tp, records in batch.items()}
            await producer.send_offsets_to_transaction(ends, consumer.group_metadata())
            await producer.commit_transaction()
        except ProducerFencedError:
            raise
        except (KafkaError, ClientError) as e:
            log.warning("aborting a transaction and reading its input again: %s", e)
            await producer.abort_transaction()
            await consumer.rewind_to_committed()
            continue
        committed += 1
    return committed
