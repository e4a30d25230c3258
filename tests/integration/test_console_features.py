"""The console's pages about what Sluice adds, against a real broker and a real
``sluice console`` process: a share group with a live sluice.ShareConsumer (type, members,
lag, membership timeline), an open transaction of a confluent-kafka producer (Ongoing,
then CompleteCommit), a delayed record counted on the delays page, and a view's source
and filter on its topic page (and the view on its source's page).

Waits for the sampler poll the page with a deadline; nothing sleeps to synchronize."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator

import pytest
from broker_process import BrokerProcess
from client_helpers import unique_group_id, unique_topic_name
from confluent_kafka import Producer as KafkaProducer
from console_process import (
    ConsoleProcess,
    Page,
    accept_first,
    console_broker,
    rows,
    running_console,
)

import sluice
from sluice.client.admin import NewTopic
from sluice.client.admin_api import Admin as AsyncAdmin
from sluice.client.admin_share_groups import alter_share_group_configs
from sluice.sync import Admin, Producer

TIMEOUT_S = 30.0
SAMPLE_INTERVAL_S = "0.3"
POLL_PAUSE_S = 0.1
"""Between two loads of a page that waits for the next sample: pacing, not a wait."""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with console_broker(
        tmp_path_factory.mktemp("console-features-broker"),
        {"group.initial.rebalance.delay.ms": "0"},
    ) as process:
        yield process


@pytest.fixture(scope="module")
def console(broker: BrokerProcess) -> Iterator[ConsoleProcess]:
    with running_console(broker.bootstrap, "--interval", SAMPLE_INTERVAL_S) as process:
        yield process


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[Admin]:
    with Admin(broker.bootstrap) as opened:
        yield opened


def new_topic(admin: Admin, partitions: int = 1, **configs: str) -> str:
    name = unique_topic_name("features")
    admin.create_topics([NewTopic(name, partitions=partitions, configs=configs)])
    return name


def create_view(admin: Admin, source: str, view_filter: str) -> str:
    name = unique_topic_name("features-view")
    configs = {"sluice.view.source": source, "sluice.view.filter": view_filter}
    admin.create_topics([NewTopic(name, partitions=-1, replication_factor=-1, configs=configs)])
    return name


def page_until(console: ConsoleProcess, path: str, condition: Callable[[Page], bool]) -> Page:
    """The page at ``path`` once ``condition`` holds for it (the sampler catches up)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        page = console.get(path)
        if condition(page):
            return page
        assert time.monotonic() < deadline, f"{path} never showed what was expected:\n{page.text}"
        time.sleep(POLL_PAUSE_S)


def test_a_share_group_shows_its_type_members_lag_and_timeline(
    console: ConsoleProcess, admin: Admin, broker: BrokerProcess
) -> None:
    topic = new_topic(admin)
    with Producer(broker.bootstrap, linger_ms=0) as producer:
        for _ in range(10):
            producer.send_and_wait(topic, b"job", partition=0)
    group = unique_group_id()

    async def scenario() -> tuple[Page, Page]:
        async with AsyncAdmin(broker.bootstrap) as client:
            await alter_share_group_configs(
                client, group, set_configs={"share.auto.offset.reset": "earliest"}
            )
        async with sluice.ShareConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            client_id="console-share-member",
            acknowledgement_mode="explicit",
            max_poll_records=1,
        ) as member:
            await accept_first(member, 4, TIMEOUT_S)
            results = await member.commit()
            assert all(error is None for error in results.values()), results
            # The page is read while the member is in (urllib blocks: off the loop).
            in_group = await asyncio.to_thread(
                page_until,
                console,
                f"/groups/{group}",
                lambda page: "(console-share-member): " in page.text,  # a generation of it
            )
            listing = await asyncio.to_thread(console.get, "/groups")
        return in_group, listing

    in_group, listing = asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S * 3))
    assert in_group.status == 200
    assert re.search(r'<dd id="group-type">share</dd>', in_group.text)
    assert re.search(r'<dd id="group-state">Stable</dd>', in_group.text)
    (member,) = rows(in_group.text, "members")
    assert member[1] == "console-share-member"
    assert member[4] == f"{topic}[0]"
    assert re.search(r"new generation</b>: generation \d+ \(simple\)", in_group.text)
    assert [row[:3] for row in rows(listing.text, "groups") if row[0] == group] == [
        [group, "share", "Stable"]
    ]
    # Once the member left: four records done, six to go.
    left = page_until(
        console,
        f"/groups/{group}",
        lambda page: "member left" in page.text and 'id="group-state">Empty<' in page.text,
    )
    assert rows(left.text, "lag") == [[topic, "0", "4", "10", "6"]]
    assert re.search(r'<dd id="total-lag">6</dd>', left.text)
    assert "<polyline" in left.text  # the lag over time, from the sampler


def test_an_open_transaction_is_listed_ongoing_then_committed(
    console: ConsoleProcess, admin: Admin, broker: BrokerProcess
) -> None:
    topic = new_topic(admin, partitions=2)
    transactional_id = f"console-{topic}"
    producer = KafkaProducer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id}
    )
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"one", partition=1)
    producer.flush(TIMEOUT_S)

    page = console.get("/transactions")
    assert page.status == 200
    (row,) = [r for r in rows(page.text, "transactions") if r[0] == transactional_id]
    assert row[1] == "Ongoing"
    assert row[7] == f"{topic}-1"
    assert row[5] != "–"  # started
    assert 'class="open"' in page.text
    assert 'class="hanging"' not in page.text  # far from its timeout

    producer.commit_transaction(TIMEOUT_S)
    after = console.get("/transactions")
    (row,) = [r for r in rows(after.text, "transactions") if r[0] == transactional_id]
    assert row[1] == "CompleteCommit"
    assert row[7] == "–"


def test_a_delayed_record_is_counted_on_the_delays_pages(
    console: ConsoleProcess, admin: Admin, broker: BrokerProcess
) -> None:
    topic = new_topic(admin, partitions=2)
    with Producer(broker.bootstrap, linger_ms=0) as producer:
        producer.send_and_wait(
            topic, b"later", partition=1, headers=[("x-sluice-delay-ms", b"3600000")]
        )
        producer.send_and_wait(topic, b"now", partition=0)
    create_view(admin, topic, "tag = 'late'")
    page = console.get("/delays")
    assert page.status == 200
    assert "view(s) left out" in page.text  # a view has no leader of its own to ask
    assert "Not answered" not in page.text
    (row,) = [r for r in rows(page.text, "delays") if r[0] == topic]
    assert row[1:4] == ["1", "0", "1"]  # waiting, delivered, partitions waiting
    assert row[4].endswith("Z")  # next due, an hour from now
    topic_page = console.get(f"/topics/{topic}")
    assert "1 record(s) waiting, 0 delivered; next due" in topic_page.text
    assert [r[:3] for r in rows(topic_page.text, "topic-delays")] == [
        ["0", "0", "0"],
        ["1", "1", "0"],
    ]


def test_a_view_shows_its_source_and_filter_and_the_source_its_views(
    console: ConsoleProcess, admin: Admin
) -> None:
    source = new_topic(admin, partitions=2)
    view = create_view(admin, source, "tag = 'red'")
    page = console.get(f"/topics/{view}")
    assert page.status == 200
    link = f'<a href="/topics/{source}">{source}</a>'
    assert f'<dd id="view-source">{link}</dd>' in page.text
    assert '<code id="view-filter">tag = &#39;red&#39;</code>' in page.text
    source_page = console.get(f"/topics/{source}")
    assert rows(source_page.text, "views") == [[view, "tag = 'red'"]]
