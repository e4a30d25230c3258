"""Record the Produce and Fetch request frames real clients send, as golden fixtures for
the unit tests of the hand-written codecs (``tests/unit/golden/produce_fetch/``).

Run once by hand when a client changes (not part of the test suite)::

    .venv/bin/python tests/integration/record_golden_frames.py

It starts one broker that advertises a recording proxy's port (``delaying_proxy``, never
told to hold anything), so every connection of every client passes through the proxy;
then confluent-kafka, kafka-python, aiokafka and kafkajs each produce to a topic of
three partitions (one client a transactional id, compressed batches) and read it back in
a group. For each client it keeps, per (API, version), up to ``FRAMES_PER_VERSION``
frames of distinct body sizes, and writes them as hex, one JSON file per client, with
the client's version in its name.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

import aiokafka
import confluent_kafka
import kafka
from broker_process import BrokerProcess
from client_helpers import consumer_config, create_topic, producer_config, unique_group_id
from delaying_proxy import DelayingProxy

GOLDEN_DIRECTORY = Path(__file__).parents[1] / "unit" / "golden" / "produce_fetch"
JS_DIRECTORY = Path(__file__).parents[1] / "js"
PRODUCE, FETCH = 0, 1
FRAMES_PER_VERSION = 3
MESSAGES = 6
PARTITIONS = 3
CLIENT_TIMEOUT_S = 60.0
_HEAD = struct.Struct(">hhi")


def _confluent(bootstrap: str, topic: str) -> None:
    producer = confluent_kafka.Producer(
        producer_config(bootstrap, **{"compression.type": "lz4", "linger.ms": 0})
    )
    for i in range(MESSAGES):
        producer.produce(topic, key=f"k{i}".encode(), value=b"v" * (10 * i), partition=i % 3)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer(
        consumer_config(bootstrap, **{"auto.offset.reset": "earliest"})
    )
    consumer.subscribe([topic])
    _drain(lambda: consumer.consume(MESSAGES, 1.0), MESSAGES)
    consumer.close()


def _kafka_python(bootstrap: str, topic: str) -> None:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip")
    for i in range(MESSAGES):
        producer.send(topic, key=f"k{i}".encode(), value=b"v" * (10 * i), partition=i % 3)
    producer.flush(CLIENT_TIMEOUT_S)
    producer.close()
    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=unique_group_id(),
        auto_offset_reset="earliest",
    )
    _drain(lambda: [m for ms in consumer.poll(1000).values() for m in ms], MESSAGES)
    consumer.close()


async def _aiokafka(bootstrap: str, topic: str) -> None:
    producer = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id="golden-frames", enable_idempotence=True
    )
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(MESSAGES):
                await producer.send(topic, key=f"k{i}".encode(), value=b"v" * i, partition=i % 3)
    finally:
        await producer.stop()
    consumer = aiokafka.AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=unique_group_id(),
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        seen = 0
        async with asyncio.timeout(CLIENT_TIMEOUT_S):
            while seen < MESSAGES:
                batches = await consumer.getmany(timeout_ms=1000)
                seen += sum(len(messages) for messages in batches.values())
    finally:
        await consumer.stop()


def _kafkajs(bootstrap: str, topic: str) -> None:
    node = shutil.which("node")
    assert node is not None, "Node.js is missing: run `make install`"
    script = str(JS_DIRECTORY / "kafkajs_client.js")
    messages = [{"key": f"k{i}", "value": "v" * i, "partition": i % 3} for i in range(MESSAGES)]
    runs = [
        ("produce", {"bootstrap": bootstrap, "topic": topic, "acks": -1, "messages": messages}),
        (
            "consume",
            {
                "bootstrap": bootstrap,
                "topic": topic,
                "group": unique_group_id(),
                "count": MESSAGES,
                "timeoutMs": int(CLIENT_TIMEOUT_S * 1000),
            },
        ),
    ]
    for command, arguments in runs:
        subprocess.run(
            [node, script, command, json.dumps(arguments)],
            check=True,
            capture_output=True,
            timeout=CLIENT_TIMEOUT_S * 2,
            env={**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"},
        )


def _drain(poll: Any, count: int) -> None:
    seen = 0
    for _ in range(int(CLIENT_TIMEOUT_S)):
        seen += len(poll())
        if seen >= count:
            return
    raise TimeoutError(f"read {seen} of {count} messages")


def _kept(frames: list[bytes]) -> list[dict[str, Any]]:
    kept: dict[tuple[int, int], list[bytes]] = {}
    for frame in frames:
        api_key, api_version, _ = _HEAD.unpack_from(frame)
        if api_key not in (PRODUCE, FETCH):
            continue
        same = kept.setdefault((api_key, api_version), [])
        if len(same) < FRAMES_PER_VERSION and all(len(f) != len(frame) for f in same):
            same.append(frame)
    return [
        {"api_key": key, "api_version": api_version, "frame": frame.hex()}
        for (key, api_version), same in sorted(kept.items())
        for frame in same
    ]


async def _record(data_directory: Path) -> None:
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        broker = BrokerProcess(
            data_directory / "broker",
            overrides={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"},
        )
        broker.start()
        proxy = DelayingProxy(broker.host, broker.port)
        try:
            await proxy.start(bound)
            bootstrap = f"127.0.0.1:{port}"
            clients: list[tuple[str, Any]] = [
                (
                    f"confluent-kafka-{version('confluent-kafka')}"
                    f"-librdkafka-{confluent_kafka.libversion()[0]}",
                    _confluent,
                ),
                (f"kafka-python-{version('kafka-python')}", _kafka_python),
                (f"aiokafka-{version('aiokafka')}", _aiokafka),
                (f"kafkajs-{_kafkajs_version()}", _kafkajs),
            ]
            GOLDEN_DIRECTORY.mkdir(parents=True, exist_ok=True)
            for name, run in clients:
                topic = f"golden-{name.split('-')[0]}"
                await asyncio.to_thread(create_topic, broker.bootstrap, topic, PARTITIONS)
                proxy.requests.clear()
                if asyncio.iscoroutinefunction(run):
                    await run(bootstrap, topic)
                else:
                    await asyncio.to_thread(run, bootstrap, topic)
                document = {"client": name, "requests": _kept(proxy.requests)}
                path = GOLDEN_DIRECTORY / f"{name}.json"
                path.write_text(json.dumps(document, indent=1) + "\n")
                print(f"{path.name}: {len(document['requests'])} frames")
        finally:
            await proxy.close()
            broker.stop()


def _kafkajs_version() -> str:
    package = JS_DIRECTORY / "node_modules" / "kafkajs" / "package.json"
    return str(json.loads(package.read_text())["version"])


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_record(Path(directory)))


if __name__ == "__main__":
    sys.exit(main())
