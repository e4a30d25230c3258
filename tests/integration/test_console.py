"""``sluice console`` and ``sluice top`` run as a user runs them (subprocesses) against a
real broker: the pages show what the cluster holds, the message browser finds records by
offset and by time, the group page shows lag, and the produce form writes exactly one
record, only once confirmed, only with the form's token, never in read-only mode."""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess
from client_helpers import unique_group_id, unique_topic_name
from console_process import ConsoleProcess, console_broker, rows, running_console

from sluice.cli.loopback import free_port
from sluice.client.admin import NewTopic, OffsetSpec
from sluice.client.admin_api import Admin as AsyncAdmin
from sluice.client.groups import OffsetAndMetadata
from sluice.common.ids import TopicPartition
from sluice.console.sampler import Sampler
from sluice.sync import Admin, Producer

BASE_TIMESTAMP_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with console_broker(tmp_path_factory.mktemp("console-broker")) as process:
        yield process


@pytest.fixture(scope="module")
def console(broker: BrokerProcess) -> Iterator[ConsoleProcess]:
    with running_console(broker.bootstrap) as process:
        yield process


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[Admin]:
    with Admin(broker.bootstrap) as opened:
        yield opened


@pytest.fixture(scope="module")
def producer(broker: BrokerProcess) -> Iterator[Producer]:
    with Producer(broker.bootstrap, linger_ms=0) as opened:
        yield opened


def new_topic(admin: Admin, partitions: int = 1, **configs: str) -> str:
    name = unique_topic_name("console")
    admin.create_topics([NewTopic(name, partitions=partitions, configs=configs)])
    return name


def end_offset(admin: Admin, topic: str, partition: int = 0) -> int:
    tp = TopicPartition(topic, partition)
    return admin.list_offsets([tp], OffsetSpec.LATEST)[tp].offset


def test_it_prints_its_url(console: ConsoleProcess, broker: BrokerProcess) -> None:
    assert console.first_line == f"Sluice console for {broker.bootstrap} at {console.url}/"


def test_cluster_page_shows_the_broker_and_partitions(
    console: ConsoleProcess, admin: Admin, broker: BrokerProcess
) -> None:
    topic = new_topic(admin, partitions=2)
    page = console.get("/")
    assert page.status == 200
    brokers = rows(page.text, "brokers")
    assert brokers[0][1] == broker.bootstrap
    partitions = [row for row in rows(page.text, "partitions") if row[0] == topic]
    assert [row[1] for row in partitions] == ["0", "1"]
    assert all(row[3] == row[4] == "0" for row in partitions)  # replicas and ISR: broker 0


def test_topic_page_lists_partitions_offsets_and_configs(
    console: ConsoleProcess, admin: Admin, producer: Producer
) -> None:
    topic = new_topic(admin, partitions=3, **{"retention.ms": "123456"})
    for _ in range(4):
        producer.send_and_wait(topic, b"v", partition=1)
    page = console.get(f"/topics/{topic}")
    assert page.status == 200
    partitions = rows(page.text, "topic-partitions")
    assert [row[0] for row in partitions] == ["0", "1", "2"]
    assert partitions[1][4:7] == ["0", "4", "4"]  # start, end, records
    assert partitions[0][5] == "0"
    assert "<svg" in page.text
    assert page.headers["X-Frame-Options"] == "DENY"
    assert "script-src" not in page.headers["Content-Security-Policy"]  # default-src 'self'
    assert page.headers["Content-Security-Policy"].startswith("default-src 'self'")
    configs = re.findall(r'<tr class="non-default"><td>([^<]+)</td>\s*<td>([^<]*)</td>', page.text)
    assert ("retention.ms", "123456") in configs
    listing = console.get("/topics")
    assert topic in [row[0] for row in rows(listing.text, "topics")]


def test_unknown_topic_is_a_404_page_saying_so(console: ConsoleProcess) -> None:
    page = console.get("/topics/no-such-topic-here")
    assert page.status == 404
    assert "topic &#39;no-such-topic-here&#39; does not exist" in page.text
    assert console.get("/topics/no-such-topic-here/messages").status == 404
    assert console.get("/groups/no-such-group-here").status == 404
    assert console.get("/nothing/here").status == 404


def test_a_bad_query_is_a_400_page_saying_why(console: ConsoleProcess, admin: Admin) -> None:
    topic = new_topic(admin)
    bad_offset = console.get(f"/topics/{topic}/messages?offset=abc")
    assert bad_offset.status == 400
    assert "offset must be a whole number, not &#39;abc&#39;" in bad_offset.text
    bad_time = console.get(f"/topics/{topic}/messages?timestamp=yesterday")
    assert bad_time.status == 400
    assert "neither milliseconds nor ISO 8601" in bad_time.text


def _produce_browsable(producer: Producer, topic: str) -> None:
    for index in range(5):
        producer.send_and_wait(
            topic,
            json.dumps({"n": index, "name": "<b>bold</b>"}).encode(),
            key=f"<key-{index}>".encode(),
            headers=[("trace", f"t{index}".encode())],
            partition=0,
            timestamp_ms=BASE_TIMESTAMP_MS + index * 1000,
        )
    producer.send_and_wait(topic, b"\xff\x00binary", partition=0)


def test_message_browser_by_offset_and_by_timestamp(
    console: ConsoleProcess, admin: Admin, producer: Producer
) -> None:
    topic = new_topic(admin)
    _produce_browsable(producer, topic)
    by_offset = console.get(f"/topics/{topic}/messages?partition=0&offset=2&limit=2")
    assert by_offset.status == 200
    found = rows(by_offset.text, "messages")
    assert [row[:2] for row in found] == [["0", "2"], ["0", "3"]]  # partition, offset
    assert found[0][3] == "<key-2>"
    assert found[0][4] == "trace: t2"
    assert json.loads(found[0][5]) == {"n": 2, "name": "<b>bold</b>"}
    assert "&lt;b&gt;bold&lt;/b&gt;" in by_offset.text and "<b>bold</b>" not in by_offset.text
    next_page = re.search(r'id="next-page" href="([^"]+)"', by_offset.text)
    assert next_page is not None
    assert html.unescape(next_page.group(1)) == (
        f"/topics/{topic}/messages?partition=0&limit=2&format=text&offset=4"
    )
    at_time = console.get(
        f"/topics/{topic}/messages?partition=0&timestamp={BASE_TIMESTAMP_MS + 3000}&limit=1"
    )
    assert [row[1] for row in rows(at_time.text, "messages")] == ["3"]
    iso = console.get(f"/topics/{topic}/messages?partition=0&timestamp=2023-11-14T22:13:21Z")
    assert rows(iso.text, "messages")[0][1] == "1"


def test_message_browser_hex_and_json_views(
    console: ConsoleProcess, admin: Admin, producer: Producer
) -> None:
    topic = new_topic(admin)
    _produce_browsable(producer, topic)
    as_json = console.get(f"/topics/{topic}/messages?partition=0&offset=0&limit=1&format=json")
    value = rows(as_json.text, "messages")[0][5]
    assert value == json.dumps({"n": 0, "name": "<b>bold</b>"}, indent=2)
    as_hex = console.get(f"/topics/{topic}/messages?partition=0&offset=0&limit=1&format=hex")
    expected = json.dumps({"n": 0, "name": "<b>bold</b>"}).encode()[:16].hex(" ")
    assert rows(as_hex.text, "messages")[0][5].startswith(f"00000000  {expected}")
    binary = console.get(f"/topics/{topic}/messages?partition=0&offset=5&format=text")
    cell = rows(binary.text, "messages")[0][5]
    assert cell.startswith("00000000  ff 00 62 69 6e")
    assert "not UTF-8, shown as hex" in cell


def test_group_page_shows_lag_as_produced_minus_committed(
    console: ConsoleProcess, admin: Admin, producer: Producer
) -> None:
    topic = new_topic(admin, partitions=2)
    for index in range(10):
        producer.send_and_wait(topic, b"x", partition=index % 2)
    group = unique_group_id()
    admin.alter_group_offsets(
        group,
        {
            TopicPartition(topic, 0): OffsetAndMetadata(2),
            TopicPartition(topic, 1): OffsetAndMetadata(5),
        },
    )
    page = console.get(f"/groups/{group}")
    assert page.status == 200
    assert rows(page.text, "lag") == [[topic, "0", "2", "5", "3"], [topic, "1", "5", "5", "0"]]
    assert re.search(r'<dd id="total-lag">3</dd>', page.text)
    groups = console.get("/groups")
    assert group in [row[0] for row in rows(groups.text, "groups")]


def _token(page: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert match is not None
    return match.group(1)


def test_produce_writes_exactly_one_record_only_once_confirmed(
    console: ConsoleProcess, admin: Admin
) -> None:
    topic = new_topic(admin, partitions=2)
    token = _token(console.get(f"/topics/{topic}").text)
    fields = {
        "csrf_token": token,
        "partition": "1",
        "key": "k<1>",
        "value": '{"hello": "world"}',
        "headers": "source=console\nother=2",
    }
    review = console.post(f"/topics/{topic}/produce", fields)
    assert review.status == 200
    assert "Write this record" in review.text
    assert '<td id="confirm-partition">1</td>' in review.text
    assert "k&lt;1&gt;" in review.text
    assert end_offset(admin, topic, 1) == 0  # nothing written yet
    confirmed = console.post(f"/topics/{topic}/produce", {**fields, "confirm": "yes"})
    assert confirmed.status == 200
    assert re.search(
        r'partition <b id="produced-partition">1</b> at offset <b id="produced-offset">0</b>',
        confirmed.text,
    )
    assert end_offset(admin, topic, 1) == 1
    assert end_offset(admin, topic, 0) == 0
    # The result is a page of its own (post/redirect/get): loading it again writes nothing.
    again = console.get(f"/topics/{topic}/produced?partition=1&offset=0")
    assert 'at offset <b id="produced-offset">0</b>' in again.text
    assert end_offset(admin, topic, 1) == 1
    shown = rows(console.get(f"/topics/{topic}/messages?partition=1&offset=0").text, "messages")
    assert len(shown) == 1
    assert shown[0][3] == "k<1>" and shown[0][5] == '{"hello": "world"}'
    assert shown[0][4] == "source: console\nother: 2"


def test_produce_is_refused_without_the_token_or_from_another_origin(
    console: ConsoleProcess, admin: Admin
) -> None:
    topic = new_topic(admin)
    token = _token(console.get(f"/topics/{topic}").text)
    fields = {"partition": "0", "key": "", "value": "v", "headers": "", "confirm": "yes"}
    without = console.post(f"/topics/{topic}/produce", fields)
    wrong = console.post(f"/topics/{topic}/produce", {**fields, "csrf_token": "guess"})
    elsewhere = console.post(
        f"/topics/{topic}/produce", {**fields, "csrf_token": token}, origin="http://evil.example"
    )
    no_origin = console.post(
        f"/topics/{topic}/produce", {**fields, "csrf_token": token}, origin=None
    )
    for refused in (without, wrong, elsewhere, no_origin):
        assert refused.status == 403
        assert "did not come from this console" in refused.text
    assert end_offset(admin, topic) == 0


def test_read_only_console_never_writes(broker: BrokerProcess, admin: Admin) -> None:
    topic = new_topic(admin)
    read_only = ConsoleProcess(broker.bootstrap, "--read-only")
    try:
        page = read_only.get(f"/topics/{topic}")
        assert page.status == 200
        assert 'id="produce-form"' not in page.text
        assert "read-only" in page.text
        refused = read_only.post(
            f"/topics/{topic}/produce",
            {"partition": "0", "value": "v", "confirm": "yes", "csrf_token": "x"},
        )
        assert refused.status == 403
        assert "does not write" in refused.text
    finally:
        read_only.stop()
    assert end_offset(admin, topic) == 0


def test_unreachable_cluster_page_names_the_bootstrap() -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    console = ConsoleProcess(bootstrap)
    try:
        page = console.get("/topics")
    finally:
        console.stop()
    assert page.status == 503
    assert f"Bootstrap {bootstrap} did not answer" in page.text


def test_top_prints_topic_rates_and_group_lag(
    broker: BrokerProcess, admin: Admin, producer: Producer
) -> None:
    topic = new_topic(admin, partitions=2)
    for _ in range(7):
        producer.send_and_wait(topic, b"x", partition=1)
    group = unique_group_id()
    admin.alter_group_offsets(group, {TopicPartition(topic, 1): OffsetAndMetadata(3)})
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sluice",
            "top",
            "--bootstrap",
            broker.bootstrap,
            "--iterations",
            "2",
            "--interval",
            "0.2",
        ],
        capture_output=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "120"},  # wide enough for every column
    )
    output = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert output.count("Topics") == 2 and output.count("Groups") == 2
    last = output[output.rindex("Topics") :]
    topic_line = next(line for line in last.splitlines() if topic in line and "│" in line)
    assert topic_line.split("│")[2].strip() == "2"  # partitions
    group_line = next(line for line in last.splitlines() if group in line)
    cells = [cell.strip() for cell in group_line.split("│")]
    assert cells[5] == "4"  # total lag: 7 produced - 3 committed
    assert cells[6] == "="  # the same in both refreshes
    assert cells[7] == f"{topic}-1 (4)"


def test_sampler_rates_lag_and_timeline_from_a_real_broker(
    broker: BrokerProcess, admin: Admin, producer: Producer
) -> None:
    topic = new_topic(admin, partitions=2)
    group = unique_group_id()
    admin.alter_group_offsets(group, {TopicPartition(topic, 0): OffsetAndMetadata(0)})
    times = iter([99.0, 100.0, 102.0])  # created, first sample, second sample

    async def scenario() -> Sampler:
        async with AsyncAdmin(broker.bootstrap) as client:
            sampler = Sampler(client, clock=lambda: next(times))
            await sampler.sample_once()
            for _ in range(6):
                producer.send_and_wait(topic, b"x", partition=0)
            await sampler.sample_once()
            return sampler

    sampler = asyncio.run(scenario())
    assert sampler.partition_rate(TopicPartition(topic, 0)) == 3.0  # 6 records in 2 s
    assert sampler.partition_rate(TopicPartition(topic, 1)) == 0.0
    (rate,) = [rate for rate in sampler.topic_rates() if rate.topic == topic]
    assert (rate.partitions, rate.records_per_s) == (2, 3.0)
    assert sampler.topic_rate_series(topic) == [(102.0, 3.0)]
    history = sampler.group(group)
    assert history is not None
    assert [lag.lag for lag in history.lag.values()] == [6]
    assert list(history.total_lag) == [(100.0, 0.0), (102.0, 6.0)]
    (first_seen,) = sampler.timeline(group)
    assert first_seen.summary == "first seen: Empty, 0 member(s)"
