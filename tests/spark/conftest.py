"""Fixtures of the Spark suite: one local Spark session and one real broker per session.

The broker is the integration suite's :class:`BrokerProcess` (a real ``sluice serve``
process). ``tests/integration`` is not a package, so its directory is put on
``sys.path`` to import it; nothing there is changed.

Spark runs ``local[2]`` with its Python workers on this interpreter (so they import
this checkout's ``sluice``). Starting the JVM costs seconds, so the session is shared.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

_INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
if str(_INTEGRATION) not in sys.path:
    sys.path.insert(0, str(_INTEGRATION))

from broker_process import BrokerProcess  # noqa: E402
from client_helpers import unique_topic_name  # noqa: E402

from sluice.client.admin import Admin, NewTopic  # noqa: E402
from sluice.client.cluster import Cluster  # noqa: E402
from sluice.client.producer_api import Producer, RecordMetadata  # noqa: E402
from sluice.protocol.records.record import Header  # noqa: E402

_THIS_DIRECTORY = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _THIS_DIRECTORY in item.path.parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("spark-broker") / "data")
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # noqa: PLC0415

    from sluice.spark import register  # noqa: PLC0415

    session = (
        SparkSession.builder.master("local[2]")
        .appName("sluice-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return unique_topic_name(request.node.name.removeprefix("test_"))


def create_topic(
    bootstrap: str, name: str, partitions: int, configs: dict[str, str] | None = None
) -> None:
    async def main() -> None:
        async with Cluster(bootstrap) as cluster:
            await Admin(cluster).create_topics(
                [NewTopic(name, partitions=partitions, configs=configs or {})]
            )

    asyncio.run(main())


Row = tuple[int, bytes | None, bytes | None, tuple[Header, ...], int]
"""(partition, key, value, headers, timestamp_ms) of a record to produce."""


def produce(bootstrap: str, topic: str, rows: Sequence[Row]) -> list[RecordMetadata]:
    """Produce ``rows`` in order and return where each one landed."""

    async def main() -> list[RecordMetadata]:
        async with Producer(bootstrap, linger_ms=2) as producer:
            futures = [
                await producer.send(topic, value, key, headers, partition, timestamp_ms)
                for partition, key, value, headers, timestamp_ms in rows
            ]
            await producer.flush()
            return [await f for f in futures]

    return asyncio.run(main())
