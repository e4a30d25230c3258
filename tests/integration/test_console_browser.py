"""The web console in a real headless browser (Debian's chromium through chromedriver):
every page loads and shows what the cluster holds (Sluice's share groups, transactions,
delayed records and views too; consumer groups of KIP-848 mid-rebalance), the live
parts refresh themselves, and the produce form
is clicked through its confirmation. A screenshot of each page is saved
as a test artifact (``SLUICE_TEST_ARTIFACTS``, default ``test-artifacts/console/``).

Every wait is on an element or its text (WebDriverWait), never a sleep.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from client_helpers import unique_group_id, unique_topic_name
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.schema_registry import Schema as ConfluentSchema
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from console_process import ConsoleProcess, accept_first, console_broker, running_console
from consumer_group_wire import CONSUMER_PROTOCOL_LONG_SESSIONS, rebalancing_group

import sluice
from sluice.client.admin import NewTopic
from sluice.client.admin_api import Admin as AsyncAdmin
from sluice.client.admin_share_groups import alter_share_group_configs
from sluice.client.groups import OffsetAndMetadata
from sluice.common.ids import TopicPartition
from sluice.sync import Admin, Consumer, Producer

SAMPLE_INTERVAL_S = "0.5"
PAYMENT_FIELDS = [{"name": "id", "type": "string"}, {"name": "cents", "type": "long"}]
PAYMENT_NOTE = {"name": "note", "type": "string", "default": ""}
REPO_ROOT = Path(__file__).resolve().parents[2]

webdriver = pytest.importorskip("selenium.webdriver")
from headless_browser import WAIT_S, chromium, missing_browser, wait_for_text  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def artifacts() -> Path:
    directory = Path(
        os.environ.get("SLUICE_TEST_ARTIFACTS") or REPO_ROOT / "test-artifacts" / "console"
    )
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    reason = missing_browser()
    if reason is not None:
        print(reason)
        pytest.skip(reason)
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as driver:
        yield driver


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    if missing_browser() is not None:
        pytest.skip(missing_browser() or "")
    with console_broker(
        tmp_path_factory.mktemp("console-browser-broker"),
        {"group.initial.rebalance.delay.ms": "0", **CONSUMER_PROTOCOL_LONG_SESSIONS},
    ) as process:
        yield process


@pytest.fixture(scope="module")
def console(broker: BrokerProcess) -> Iterator[ConsoleProcess]:
    assert broker.schema_registry_url is not None, "the broker serves no Schema Registry"
    with running_console(
        broker.bootstrap,
        "--interval",
        SAMPLE_INTERVAL_S,
        "--schema-registry",
        broker.schema_registry_url,
    ) as process:
        yield process


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[Admin]:
    with Admin(broker.bootstrap) as opened:
        yield opened


def wait_for_exact_text(driver: WebDriver, element_id: str, text: str) -> None:
    WebDriverWait(driver, WAIT_S).until(
        lambda driver: driver.find_element(By.ID, element_id).text.strip() == text
    )


def screenshot(driver: WebDriver, artifacts: Path, name: str) -> None:
    path = artifacts / f"console-{name}.png"
    assert driver.save_screenshot(str(path)), f"no screenshot {path}"


def test_every_page_in_a_browser(
    browser: WebDriver,
    console: ConsoleProcess,
    admin: Admin,
    broker: BrokerProcess,
    artifacts: Path,
) -> None:
    topic = unique_topic_name("orders")
    admin.create_topics([NewTopic(topic, partitions=3, configs={"retention.ms": "86400000"})])
    with Producer(broker.bootstrap, linger_ms=0) as producer:
        for index in range(12):
            producer.send_and_wait(
                topic,
                f'{{"order": {index}, "item": "widget"}}'.encode(),
                key=f"customer-{index % 4}".encode(),
                headers=[("source", b"browser-test")],
                partition=index % 3,
            )

    browser.get(console.url + "/")
    wait_for_text(browser, "brokers", broker.bootstrap)
    wait_for_text(browser, "partitions", topic)
    screenshot(browser, artifacts, "cluster")

    browser.get(console.url + "/topics")
    wait_for_text(browser, "topics", topic)
    screenshot(browser, artifacts, "topics")

    browser.get(f"{console.url}/topics/{topic}")
    wait_for_text(browser, "topic-partitions", "4")
    assert "retention.ms" in browser.find_element(By.ID, "topic-configs").text
    # The produce rate's chart appears once the sampler has two samples.
    WebDriverWait(browser, WAIT_S).until(
        lambda driver: driver.find_elements(By.CSS_SELECTOR, "#topic-live svg polyline")
    )
    screenshot(browser, artifacts, "topic")

    browser.get(f"{console.url}/topics/{topic}/messages?partition=1&offset=1&limit=5")
    wait_for_text(browser, "messages", '"order": 4')
    first = browser.find_element(By.CSS_SELECTOR, "#messages tr.record")
    assert first.get_attribute("data-offset") == "1"
    assert "customer-0" in first.text and "browser-test" in first.text
    screenshot(browser, artifacts, "messages")
    browser.find_element(By.ID, "format").send_keys("hex")
    browser.find_element(By.CSS_SELECTOR, "#browse-form button").click()
    wait_for_text(browser, "messages", "00000000  7b 22 6f 72")  # {"or
    screenshot(browser, artifacts, "messages-hex")


def test_group_lag_and_rebalance_timeline_in_a_browser(
    browser: WebDriver,
    console: ConsoleProcess,
    admin: Admin,
    broker: BrokerProcess,
    artifacts: Path,
) -> None:
    topic = unique_topic_name("payments")
    admin.create_topics([NewTopic(topic, partitions=2)])
    with Producer(broker.bootstrap, linger_ms=0) as producer:
        for index in range(9):
            producer.send_and_wait(topic, b"payment", partition=index % 2)
    group = unique_group_id()
    admin.alter_group_offsets(
        group,
        {
            TopicPartition(topic, 0): OffsetAndMetadata(1),
            TopicPartition(topic, 1): OffsetAndMetadata(4),
        },
    )
    browser.get(f"{console.url}/groups/{group}")
    wait_for_exact_text(browser, "total-lag", "4")  # (5 - 1) + (4 - 4)
    # The sampler sees the group empty before anyone joins (the page refreshes itself).
    wait_for_text(browser, "timeline", "first seen: Empty")
    with Consumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        client_id="browser-test-consumer",
    ) as consumer:
        assert consumer.wait_for_assignment() == {
            TopicPartition(topic, 0),
            TopicPartition(topic, 1),
        }
        wait_for_text(browser, "timeline", "joined (browser-test-consumer from")
        wait_for_text(browser, "timeline", "new generation")
        wait_for_exact_text(browser, "group-state", "Stable")
        assert f"{topic}[0,1]" in browser.find_element(By.ID, "timeline").text
        assert "browser-test-consumer" in browser.find_element(By.ID, "members").text
        screenshot(browser, artifacts, "group")
    browser.get(console.url + "/groups")
    wait_for_text(browser, "groups", group)
    screenshot(browser, artifacts, "groups")


def wait_for_cell(driver: WebDriver, selector: str, text: str) -> None:
    """Until a cell matching ``selector`` reads ``text`` (the live part of a page is
    replaced as it refreshes itself: a cell read may be gone by then)."""
    WebDriverWait(driver, WAIT_S, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda driver: any(
            cell.text.strip() == text for cell in driver.find_elements(By.CSS_SELECTOR, selector)
        )
    )


def test_consumer_group_page_in_a_browser(
    browser: WebDriver,
    console: ConsoleProcess,
    broker: BrokerProcess,
    artifacts: Path,
) -> None:
    """A consumer group (KIP-848) caught mid-rebalance: its epochs, a member behind the
    assignment epoch still holding the partitions the other awaits, offsets and lag."""
    topic = unique_topic_name("shipments")
    scene = rebalancing_group(broker, topic)
    browser.get(f"{console.url}/groups/{scene.group}")
    wait_for_exact_text(browser, "group-type", "consumer")
    wait_for_exact_text(browser, "group-state", "Reconciling")
    wait_for_exact_text(browser, "group-epoch", "2")
    wait_for_exact_text(browser, "assignment-epoch", "2")
    wait_for_exact_text(browser, "member-count", "2")
    awaited = f"{topic}[{','.join(map(str, scene.second_target))}]"
    first = f"#members tr[data-member='{scene.first}']"
    second = f"#members tr[data-member='{scene.second}']"
    wait_for_cell(browser, f"{first} td.behind", "1")  # behind the assignment epoch
    wait_for_cell(browser, f"{first} td.assigned", f"{topic}[0,1,2,3]")
    wait_for_cell(browser, f"{first} td.pending", f"−{awaited}")
    wait_for_cell(browser, f"{second} td.assigned", "–")
    wait_for_cell(browser, f"{second} td.target", awaited)
    wait_for_cell(browser, f"{second} td.pending", f"+{awaited}")
    wait_for_text(browser, "members", scene.regex)
    wait_for_exact_text(browser, "total-lag", "3")  # (5 - 2) + (5 - 5), two unknown
    wait_for_text(browser, "unknown-lag", "2 partition(s)")
    wait_for_text(browser, "timeline", "generation 2")
    screenshot(browser, artifacts, "consumer-group")
    browser.get(console.url + "/groups")
    wait_for_text(browser, "groups", scene.group)
    row = browser.find_element(By.XPATH, f"//table[@id='groups']//tr[td/a[text()='{scene.group}']]")
    assert row.find_element(By.CLASS_NAME, "group-type").text == "consumer"


def test_produce_confirmation_in_a_browser(
    browser: WebDriver, console: ConsoleProcess, admin: Admin, artifacts: Path
) -> None:
    topic = unique_topic_name("orders")
    admin.create_topics([NewTopic(topic, partitions=2)])
    browser.get(f"{console.url}/topics/{topic}")
    browser.find_element(By.ID, "produce-partition").send_keys("1")
    browser.find_element(By.ID, "produce-key").send_keys("customer-7")
    browser.find_element(By.ID, "produce-value").send_keys('{"order": 99}')
    browser.find_element(By.ID, "produce-headers").send_keys("source=console")
    browser.find_element(By.ID, "produce-review").click()
    wait_for_text(browser, "confirm-value", '{"order": 99}')
    assert browser.find_element(By.ID, "confirm-partition").text == "1"
    screenshot(browser, artifacts, "produce-confirm")
    browser.find_element(By.ID, "produce-confirm").click()
    wait_for_text(browser, "produced", "at offset 0")
    assert browser.find_element(By.ID, "produced-partition").text == "1"
    screenshot(browser, artifacts, "produced")
    browser.find_element(By.PARTIAL_LINK_TEXT, "message browser").click()
    wait_for_text(browser, "messages", '{"order": 99}')
    assert "source: console" in browser.find_element(By.ID, "messages").text


def test_unknown_topic_page_in_a_browser(
    browser: WebDriver, console: ConsoleProcess, artifacts: Path
) -> None:
    browser.get(f"{console.url}/topics/no-such-topic")
    wait_for_text(browser, "error-detail", "topic 'no-such-topic' does not exist")
    screenshot(browser, artifacts, "not-found")


def test_share_group_page_in_a_browser(
    browser: WebDriver,
    console: ConsoleProcess,
    admin: Admin,
    broker: BrokerProcess,
    artifacts: Path,
) -> None:
    topic = unique_topic_name("invoices")
    admin.create_topics([NewTopic(topic, partitions=2)])
    with Producer(broker.bootstrap, linger_ms=0) as producer:
        for index in range(8):
            producer.send_and_wait(topic, b"job", partition=index % 2)
    group = f"invoice-workers-{uuid.uuid4().hex[:8]}"

    def look() -> None:
        browser.get(f"{console.url}/groups/{group}")
        wait_for_text(browser, "members", "browser-share-worker")
        wait_for_text(browser, "timeline", "(browser-share-worker): ")  # its generation
        wait_for_exact_text(browser, "total-lag", "6")  # 8 produced, 2 accepted
        WebDriverWait(browser, WAIT_S).until(
            lambda driver: driver.find_elements(By.CSS_SELECTOR, "#group-live svg polyline")
        )
        screenshot(browser, artifacts, "share-group")

    async def scenario() -> None:
        async with AsyncAdmin(broker.bootstrap) as client:
            await alter_share_group_configs(
                client, group, set_configs={"share.auto.offset.reset": "earliest"}
            )
        async with sluice.ShareConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            client_id="browser-share-worker",
            acknowledgement_mode="explicit",
            max_poll_records=1,
        ) as member:
            await accept_first(member, 2, WAIT_S)
            await member.commit()
            await asyncio.to_thread(look)  # the member stays in while the browser looks

    asyncio.run(asyncio.wait_for(scenario(), WAIT_S * 3))
    browser.get(console.url + "/groups")
    wait_for_text(browser, "groups", group)
    row = browser.find_element(By.XPATH, f"//table[@id='groups']//tr[td/a[text()='{group}']]")
    assert row.find_element(By.CLASS_NAME, "group-type").text == "share"


def test_transactions_delays_and_views_in_a_browser(
    browser: WebDriver,
    console: ConsoleProcess,
    admin: Admin,
    broker: BrokerProcess,
    artifacts: Path,
) -> None:
    topic = unique_topic_name("invoices")
    admin.create_topics([NewTopic(topic, partitions=2)])
    transactional_id = f"browser-{topic}"
    transactional = KafkaProducer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id}
    )
    transactional.init_transactions(WAIT_S)
    transactional.begin_transaction()
    transactional.produce(topic, value=b"draft", partition=0)
    transactional.flush(WAIT_S)
    browser.get(console.url + "/transactions")
    wait_for_text(browser, "transactions", transactional_id)
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-transactional-id="{transactional_id}"]')
    assert "Ongoing" in row.text and f"{topic}-0" in row.text
    screenshot(browser, artifacts, "transactions")
    transactional.abort_transaction(WAIT_S)

    with Producer(broker.bootstrap, linger_ms=0) as producer:
        producer.send_and_wait(
            topic, b"reminder", partition=1, headers=[("x-sluice-delay-ms", b"3600000")]
        )
    browser.get(console.url + "/delays")
    wait_for_text(browser, "delays", topic)
    row = browser.find_element(By.CSS_SELECTOR, f'#delays tr[data-topic="{topic}"]')
    assert row.find_elements(By.TAG_NAME, "td")[1].text == "1"  # waiting
    screenshot(browser, artifacts, "delays")

    view = unique_topic_name("urgent-invoices")
    admin.create_topics(
        [
            NewTopic(
                view,
                partitions=-1,
                replication_factor=-1,
                configs={"sluice.view.source": topic, "sluice.view.filter": "tag = 'urgent'"},
            )
        ]
    )
    browser.get(f"{console.url}/topics/{view}")
    wait_for_exact_text(browser, "view-source", topic)
    assert browser.find_element(By.ID, "view-filter").text == "tag = 'urgent'"
    screenshot(browser, artifacts, "view")


def test_schema_pages_in_a_browser(
    browser: WebDriver, console: ConsoleProcess, broker: BrokerProcess, artifacts: Path
) -> None:
    topic = unique_topic_name("payments")
    subject = f"{topic}-value"
    assert broker.schema_registry_url is not None
    registry = ConfluentRegistryClient({"url": broker.schema_registry_url})
    for fields in (PAYMENT_FIELDS, [*PAYMENT_FIELDS, PAYMENT_NOTE]):
        record = {"type": "record", "name": "Payment", "namespace": "shop", "fields": fields}
        registry.register_schema(subject, ConfluentSchema(json.dumps(record), "AVRO"))
    serializer = AvroSerializer(registry, json.dumps(record))
    producer = KafkaProducer({"bootstrap.servers": broker.bootstrap})
    value = serializer(
        {"id": "p-1", "cents": 1250, "note": "first"},
        SerializationContext(topic, MessageField.VALUE),
    )
    producer.produce(topic, key=b"p-1", value=value)
    assert producer.flush(30) == 0

    browser.get(f"{console.url}/schemas")
    wait_for_text(browser, "subjects", subject)
    screenshot(browser, artifacts, "schemas")
    browser.find_element(By.LINK_TEXT, subject).click()
    wait_for_exact_text(browser, "subject-versions", "2")
    assert '"name": "note"' in browser.find_element(By.ID, "version-2").text
    screenshot(browser, artifacts, "subject")
    browser.find_element(By.ID, "diff-latest").click()
    wait_for_text(browser, "compatibility", "is compatible with version 1")
    added = browser.find_elements(By.CSS_SELECTOR, "#diff .diff-added")
    assert any('"note"' in line.text for line in added)
    screenshot(browser, artifacts, "schema-diff")

    browser.get(f"{console.url}/topics/{topic}")
    browser.find_element(By.ID, "subject-value").click()
    wait_for_text(browser, "subject-name", subject)
    browser.get(f"{console.url}/topics/{topic}/messages?partition=0&offset=0")
    wait_for_text(browser, "messages", '"note": "first"')
    badge = browser.find_element(By.CSS_SELECTOR, "#messages .schema-badge")
    assert badge.text.endswith(f"{subject} v2")
    screenshot(browser, artifacts, "messages-schema")
