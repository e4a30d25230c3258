"""The web console on a three-broker cluster, in headless chromium: a broker that is
SIGKILLed is shown down with since when (it does not simply disappear), the partitions
it was the only replica of are flagged offline and those it was a follower of
under-replicated, on the cluster page and the topic's page, as ``sluice cluster status``
says; once it is back, all is well again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_processes import Cluster, running_cluster
from confluent_kafka.admin import NewTopic

from sluice.cli.local_zookeeper import LocalZooKeeper

pytestmark = pytest.mark.integration

webdriver = pytest.importorskip("selenium.webdriver")
from console_process import rows, running_console  # noqa: E402
from headless_browser import chromium, missing_browser, wait_for_text  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

SETTLE_TIMEOUT_S = 90.0
CLIENT_TIMEOUT_S = 60.0
SAMPLE_INTERVAL_S = "0.5"
DOWN = 2


@pytest.fixture
def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    reason = missing_browser()
    if reason is not None:
        pytest.skip(reason)
    with running_cluster(
        tmp_path_factory.mktemp("console-cluster"), zookeeper.connect, 3
    ) as started:
        yield started


def test_a_dead_broker_and_its_partitions_are_flagged(cluster: Cluster, tmp_path: Path) -> None:
    lone = f"console-lone-{time.monotonic_ns()}"  # only on the broker that dies
    topic = f"console-health-{time.monotonic_ns()}"  # partition 0 has it as a follower
    admin = cluster.admin(cluster.broker(0))
    futures = admin.create_topics(
        [
            NewTopic(lone, num_partitions=1, replica_assignment=[[DOWN]]),
            NewTopic(topic, num_partitions=2, replica_assignment=[[0, DOWN], [1, 0]]),
        ]
    )
    for future in futures.values():
        future.result(timeout=CLIENT_TIMEOUT_S)
    cluster.wait_for(
        lambda s: all(
            name in s["topics"]
            and all(len(p["isr"]) == len(p["replicas"]) for p in s["topics"][name])
            for name in (lone, topic)
        )
    )
    bootstrap = ",".join(b.bootstrap for b in cluster.brokers[:2])  # the survivors
    with (
        running_console(bootstrap, "--interval", SAMPLE_INTERVAL_S) as console,
        chromium(tmp_path / "profile") as browser,
    ):
        wait_until_seen = time.monotonic() + SETTLE_TIMEOUT_S
        # It sampled while all were up: every broker listed, and up.
        while console.get("/").text.count('class="broker-up"') < len(cluster.brokers):
            assert time.monotonic() < wait_until_seen, "the console never listed the brokers"
            time.sleep(0.2)  # polling interval of a bounded wait, not a sync
        cluster.broker(DOWN).kill()
        status = cluster.wait_for(
            lambda s: len(s["brokers"]) == 2 and len(s["offline_partitions"]) == 1,
            via=cluster.broker(0),
        )
        browser.get(console.url + "/")
        wait_for_text(browser, "cluster-alert", "1 broker(s) down: 2", SETTLE_TIMEOUT_S)
        wait_for_text(browser, "offline-count", "1", SETTLE_TIMEOUT_S)
        # Until the console's next sample misses it, the broker is down since it was last
        # seen; that sample says since when.
        row_selector = f'#brokers tr[data-node-id="{DOWN}"]'
        noticed_by = time.monotonic() + SETTLE_TIMEOUT_S
        while "down since" not in browser.find_element(By.CSS_SELECTOR, row_selector).text:
            assert time.monotonic() < noticed_by, "the console never said since when"
            time.sleep(0.2)  # polling interval of a bounded wait, not a sync
            browser.get(console.url + "/")
        row = browser.find_element(By.CSS_SELECTOR, row_selector)
        assert "broker-down" in (row.get_attribute("class") or "")
        page = console.get("/")
        assert page.text.count('class="broker-up"') == 2
        shown = {(r[0], r[1]): r[5] for r in rows(page.text, "partitions") if r[0] in (lone, topic)}
        offline = {(e["topic"], str(e["partition"])) for e in status["offline_partitions"]}
        assert {k for k, v in shown.items() if v == "offline"} == offline == {(lone, "0")}
        assert shown[(topic, "0")] == "under-replicated"
        assert shown[(topic, "1")] == "ok"
        browser.get(f"{console.url}/topics/{topic}")
        wait_for_text(browser, "topic-alert", "1 under-replicated: 0", SETTLE_TIMEOUT_S)
        assert "broker(s) 2, which are down" in browser.find_element(By.ID, "topic-alert").text
        struck = browser.find_elements(By.CSS_SELECTOR, "#topic-partitions s.down-replica")
        assert [s.text for s in struck] == ["2"]
        browser.get(f"{console.url}/topics/{lone}")
        wait_for_text(browser, "topic-alert", "1 partition(s) offline", SETTLE_TIMEOUT_S)
        cluster.broker(DOWN).start()
        cluster.wait_for(lambda s: len(s["brokers"]) == 3 and not s["offline_partitions"])
        browser.get(console.url + "/")
        wait_for_text(browser, "offline-count", "0", SETTLE_TIMEOUT_S)
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while browser.find_elements(By.ID, "cluster-alert"):
            assert time.monotonic() < deadline, "the alert stayed after the broker came back"
            browser.refresh()
            time.sleep(0.5)  # polling interval of a bounded wait, not a sync
