"""One contract for every metadata store: the same tests run against the embedded store
(a file in a data directory) and the ZooKeeper store (a real ZooKeeper, a chroot per
test). Two stores on the same backend stand for two brokers of a cluster (for the
embedded store: the same file reopened, as after a restart)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from sluice.cluster.embedded import EmbeddedMetadataStore
from sluice.cluster.image import MetadataImage
from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata, new_topic_id
from sluice.cluster.store import (
    ControllerFenced,
    MetadataStore,
    NoSuchTopic,
    PartitionChange,
    StaleVersion,
    TopicExists,
)
from sluice.cluster.zookeeper import ZooKeeperMetadataStore
from sluice.common.authorizer import (
    AccessControlEntry,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from sluice.protocol.sasl import ScramMechanism, make_credential

STORE_TIMEOUT_S = 20.0
"""Bound of every scenario (a ZooKeeper round trip is milliseconds)."""


class OpenStore:
    """Opens (and starts) one more store on this test's backend."""

    def __init__(self, open_one: Callable[[], Awaitable[MetadataStore]], shared: bool) -> None:
        self._open_one = open_one
        self.shared = shared
        """Several stores may be open on the backend at once (ZooKeeper: brokers of one
        cluster); not so for the embedded store, whose file one broker owns."""

    async def __call__(self) -> MetadataStore:
        return await self._open_one()


@pytest.fixture(params=["embedded", "zookeeper"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> OpenStore:

    async def open_embedded() -> MetadataStore:
        store = EmbeddedMetadataStore(tmp_path)
        await store.start()
        return store

    async def open_zookeeper() -> MetadataStore:
        store = ZooKeeperMetadataStore(connect, session_timeout_s=4.0)
        await store.start()
        return store

    if request.param == "embedded":
        return OpenStore(open_embedded, shared=False)
    connect = request.getfixturevalue("zookeeper_connect")
    return OpenStore(open_zookeeper, shared=True)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(STORE_TIMEOUT_S):
            await scenario()

    asyncio.run(bounded())


def topic(name: str, partitions: int = 2, configs: dict[str, str] | None = None) -> TopicMetadata:
    return TopicMetadata(
        name,
        new_topic_id(),
        {i: PartitionState((1,), 1, 0, (1,)) for i in range(partitions)},
        dict(configs or {}),
    )


async def eventually(store: MetadataStore, condition: Callable[[MetadataImage], bool]) -> None:
    """Wait until the store's image satisfies ``condition`` (ZooKeeper's watches bring
    changes made elsewhere a moment later)."""
    seen = asyncio.Event()
    loop = asyncio.get_running_loop()
    store.subscribe(lambda image: loop.call_soon_threadsafe(seen.set))
    while not condition(store.image()):
        seen.clear()
        if condition(store.image()):
            return
        await seen.wait()


def _topic_version(image: MetadataImage, name: str) -> int:
    found = image.topics.get(name)
    return -1 if found is None else found.version


def _partition_count(image: MetadataImage, name: str) -> int:
    found = image.topics.get(name)
    return 0 if found is None else found.partition_count


def test_the_cluster_id_is_made_once(open_store: OpenStore) -> None:
    async def scenario() -> None:
        first = await open_store()
        cluster_id = first.image().cluster_id
        await first.close()
        second = await open_store()
        assert second.image().cluster_id == cluster_id != ""
        await second.close()

    run(scenario)


def test_topics_are_created_all_or_none(open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store()
        stored = await store.create_topics([topic("a"), topic("b", 3, {"retention.ms": "5"})])
        assert [t.version for t in stored] == [0, 0]
        assert all(s.version == 0 for t in stored for s in t.partitions.values())
        await eventually(store, lambda image: {"a", "b"} <= set(image.topics))
        with pytest.raises(TopicExists):
            await store.create_topics([topic("c"), topic("a")])
        image = store.image()
        assert "c" not in image.topics
        assert image.topics["b"].partition_count == 3
        assert image.topics["b"].configs == {"retention.ms": "5"}
        assert image.topics["b"].topic_id == stored[1].topic_id
        await store.close()

    run(scenario)


def test_a_second_store_sees_the_first_ones_topics(open_store: OpenStore) -> None:
    async def scenario() -> None:
        first = await open_store()
        made = topic("shared", 4)
        await first.create_topics([made])
        await eventually(first, lambda image: "shared" in image.topics)
        second = await open_store() if open_store.shared else first
        seen = second.image().topics["shared"]
        assert (seen.topic_id, seen.partitions) == (made.topic_id, made.partitions)
        for store in {first, second}:
            await store.close()

    run(scenario)


def test_deleting_a_topic(open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store()
        await store.create_topics([topic("gone", 5)])
        await store.delete_topic("gone")
        await eventually(store, lambda image: "gone" not in image.topics)
        with pytest.raises(NoSuchTopic):
            await store.delete_topic("gone")
        await store.create_topics([topic("gone", 1)])  # the name is free again
        await eventually(store, lambda image: "gone" in image.topics)
        assert store.image().topics["gone"].partition_count == 1
        await store.close()

    run(scenario)


def test_topic_changes_are_conditional_on_the_version_read(open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store()
        await store.create_topics([topic("t", 1)])
        configured = await store.set_topic_configs("t", {"retention.ms": "7"}, 0)
        assert configured.version == 1
        with pytest.raises(StaleVersion):
            await store.set_topic_configs("t", {"retention.ms": "8"}, 0)
        grown = await store.add_partitions("t", {1: PartitionState((1,), 1, 0, (1,))}, 1)
        assert (grown.version, grown.partition_count) == (2, 2)
        with pytest.raises(StaleVersion):
            await store.add_partitions("t", {1: PartitionState((1,), 1, 0, (1,))}, 1)
        with pytest.raises(NoSuchTopic):
            await store.set_topic_configs("missing", {}, 0)
        await eventually(store, lambda image: _topic_version(image, "t") == 2)
        stored = store.image().topics["t"]
        assert stored.configs == {"retention.ms": "7"} and stored.partition_count == 2
        await store.close()

    run(scenario)


def test_partition_states_are_versioned_apart_from_the_topic(open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store()
        await store.register_broker(BrokerInfo(1, "127.0.0.1", 9093))
        epoch = await store.elect_controller(1)
        assert epoch is not None
        await store.create_topics([topic("t", 2)])
        await eventually(store, lambda image: "t" in image.topics)
        state = store.image().topics["t"].partitions[0]
        moved = dataclasses.replace(state, leader_epoch=1)
        (written,) = await store.update_partitions([PartitionChange("t", 0, moved)], epoch)
        assert written.version == state.version + 1
        with pytest.raises(StaleVersion):  # decided from the old state
            await store.update_partitions([PartitionChange("t", 0, moved)], epoch)
        # The topic record did not change: a config write from version 0 still wins.
        await store.set_topic_configs("t", {"retention.ms": "1"}, 0)
        await eventually(store, lambda image: _topic_version(image, "t") == 1)
        final = store.image().topics["t"]
        assert final.partitions[0].leader_epoch == 1
        assert final.partitions[0].version == written.version
        assert final.partitions[1].version == 0
        await store.close()

    run(scenario)


def test_eligible_leader_replicas_and_clean_shutdowns_are_kept_and_seen_by_others(
    open_store: OpenStore,
) -> None:
    """KIP-966's fields: a partition state's ELR and last known ELR, written by the
    controller and read back by another broker's store; a registration's clean-shutdown
    flag."""

    async def scenario() -> None:
        store = await open_store()
        registered = await store.register_broker(BrokerInfo(1, "127.0.0.1", 9093, logs_intact=True))
        assert registered.logs_intact
        assert store.image().brokers[1].logs_intact, "as the store reads it back"
        await store.create_topics([topic("t", 1)])
        await eventually(store, lambda image: "t" in image.topics)
        state = store.image().topics["t"].partitions[0]
        shrunk = dataclasses.replace(state, isr=(), elr=(1,), last_known_elr=(2,))
        epoch = await store.elect_controller(1)
        assert epoch is not None
        (written,) = await store.update_partitions([PartitionChange("t", 0, shrunk)], epoch)
        assert (written.elr, written.last_known_elr) == ((1,), (2,))
        other = await open_store()
        await eventually(
            other, lambda image: image.topics["t"].partitions[0].version == written.version
        )
        seen = other.image().topics["t"].partitions[0]
        assert (seen.isr, seen.elr, seen.last_known_elr) == ((), (1,), (2,))
        await other.close()
        await store.close()

    run(scenario)


def test_a_write_of_a_replaced_controller_is_fenced(open_store: OpenStore) -> None:
    async def scenario() -> None:
        first = await open_store()
        await first.register_broker(BrokerInfo(1, "127.0.0.1", 9093))
        await first.create_topics([topic("t", 1)])
        old_epoch = await first.elect_controller(1)
        assert old_epoch is not None
        await eventually(first, lambda image: "t" in image.topics)
        state = first.image().topics["t"].partitions[0]
        await first.close()  # a ZooKeeper controller's node goes with its session
        second = await open_store()
        new_epoch = await second.elect_controller(2)
        assert new_epoch is not None and new_epoch > old_epoch
        stale = dataclasses.replace(state, leader_epoch=state.leader_epoch + 1)
        with pytest.raises(ControllerFenced):
            await second.update_partitions([PartitionChange("t", 0, stale)], old_epoch)
        await second.update_partitions([PartitionChange("t", 0, stale)], new_epoch)
        await second.close()

    run(scenario)


def test_producer_id_blocks_never_overlap(open_store: OpenStore) -> None:
    async def scenario() -> None:
        first = await open_store()
        stores = [first, await open_store() if open_store.shared else first]
        blocks = await asyncio.gather(
            *(store.allocate_producer_id_block(100) for store in stores for _ in range(10))
        )
        assert len(set(blocks)) == 20
        assert all(b % 100 == 0 for b in blocks), blocks
        for store in set(stores):
            await store.close()
        reopened = await open_store()
        assert await reopened.allocate_producer_id_block(100) > max(blocks)
        await reopened.close()

    run(scenario)


def test_group_configs_round_trip(open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store()
        assert await store.group_configs("g") == {}
        await store.set_group_configs("g", {"consumer.session.timeout.ms": "50000"})
        await store.set_group_configs("h", {"consumer.heartbeat.interval.ms": "3000"})
        await store.set_group_configs("team/a", {"consumer.session.timeout.ms": "45000"})
        assert await store.group_configs("team/a") == {"consumer.session.timeout.ms": "45000"}
        await store.set_group_configs("team/a", {})
        assert await store.group_configs("g") == {"consumer.session.timeout.ms": "50000"}
        assert await store.groups_with_configs() == ["g", "h"]
        await store.set_group_configs("g", {})
        assert await store.groups_with_configs() == ["h"]
        await store.close()
        reopened = await open_store()
        assert await reopened.group_configs("h") == {"consumer.heartbeat.interval.ms": "3000"}
        await reopened.close()

    run(scenario)


def _binding(name: str, principal: str = "User:alice") -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType.TOPIC, name, PatternType.LITERAL),
        AccessControlEntry(principal, "*", Operation.READ, Permission.ALLOW),
    )


def test_acls_are_added_removed_and_seen_by_other_brokers(open_store: OpenStore) -> None:
    async def scenario() -> None:
        first = await open_store()
        assert first.image().acls == frozenset()
        alice, bob = _binding("orders"), _binding("orders", "User:bob")
        await first.create_acls([alice, bob])
        assert first.image().acls == {alice, bob}
        await first.create_acls([alice])  # already there: nothing changes
        await first.delete_acls([bob, _binding("never-stored")])
        assert first.image().acls == {alice}
        if open_store.shared:
            second = await open_store()
            assert second.image().acls == {alice}
            await second.create_acls([bob])
            await eventually(first, lambda image: image.acls == {alice, bob})
            await second.close()
            await first.delete_acls([bob])
        await first.close()
        reopened = await open_store()
        assert reopened.image().acls == {alice}
        await reopened.close()

    run(scenario)


def test_scram_credentials_round_trip(open_store: OpenStore) -> None:
    sha256, sha512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
    alice_512 = make_credential(sha512, "a-secret")
    alice_256 = make_credential(sha256, "a-secret", iterations=8192)
    bob = make_credential(sha512, "b-secret")

    async def scenario() -> None:
        store = await open_store()
        assert await store.scram_credentials("alice") == {}
        assert await store.scram_users() == []
        await store.set_scram_credential("alice", sha512, alice_512)
        await store.set_scram_credential("alice", sha256, alice_256)
        await store.set_scram_credential("team/bob", sha512, make_credential(sha512, "old"))
        await store.set_scram_credential("team/bob", sha512, bob)
        assert await store.scram_credentials("alice") == {sha512: alice_512, sha256: alice_256}
        assert await store.scram_credentials("team/bob") == {sha512: bob}
        assert await store.scram_users() == ["alice", "team/bob"]
        assert await store.delete_scram_credential("alice", sha256)
        assert not await store.delete_scram_credential("alice", sha256)
        assert not await store.delete_scram_credential("carol", sha256)
        assert await store.delete_scram_credential("team/bob", sha512)
        assert await store.scram_users() == ["alice"]
        await store.close()
        reopened = await open_store()
        assert await reopened.scram_credentials("alice") == {sha512: alice_512}
        assert await reopened.scram_credentials("team/bob") == {}
        await reopened.close()

    run(scenario)


def test_subscribers_see_every_topic_whole(open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store()
        seen: list[MetadataImage] = []
        store.subscribe(seen.append)
        await store.create_topics([topic(f"t{i}", 8) for i in range(5)])
        await store.add_partitions(
            "t0", {i: PartitionState((1,), 1, 0, (1,)) for i in range(8, 12)}, 0
        )
        await eventually(
            store, lambda image: image.topics.get("t0", topic("x", 0)).partition_count == 12
        )
        assert seen, "no image was published"
        for image in seen:
            for name, found in image.topics.items():
                assert set(found.partitions) == set(range(found.partition_count)), name
                assert found.partition_count in (8, 12), name
        await store.close()

    run(scenario)


def test_a_reopened_store_holds_what_was_written(open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store()
        await store.create_topics([topic("kept", 3, {"cleanup.policy": "compact"})])
        await store.set_topic_configs("kept", {"cleanup.policy": "delete"}, 0)
        await eventually(store, lambda image: _topic_version(image, "kept") == 1)
        before = store.image().topics
        await store.close()
        reopened = await open_store()
        assert dict(reopened.image().topics) == dict(before)
        await reopened.close()

    run(scenario)


def test_client_quotas_round_trip(open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store()
        assert await store.client_quotas() == {}
        await store.set_client_quotas("client-id=app", {"producer_byte_rate": 1024.0})
        await store.set_client_quotas(
            "user=CN=a/b,client-id=<default>", {"consumer_byte_rate": 2048.0}
        )
        await store.set_client_quotas("user=<default>", {"request_percentage": 12.5})
        await store.set_client_quotas("user=<default>", {})
        await store.close()
        reopened = await open_store()
        assert await reopened.client_quotas() == {
            "client-id=app": {"producer_byte_rate": 1024.0},
            "user=CN=a/b,client-id=<default>": {"consumer_byte_rate": 2048.0},
        }
        await reopened.close()

    run(scenario)


def _levels(image: MetadataImage) -> dict[str, dict[str, str]]:
    return {name: dict(level) for name, level in image.broker_configs.items()}


def test_dynamic_broker_configs_are_stored_seen_by_other_brokers_and_kept(
    open_store: OpenStore,
) -> None:
    async def scenario() -> None:
        first = await open_store()
        assert _levels(first.image()) == {}
        await first.set_broker_configs("", {"log.retention.ms": "60000"})
        await first.set_broker_configs("1", {"message.max.bytes": "2048"})
        # The writer's next image holds its write.
        assert _levels(first.image()) == {
            "": {"log.retention.ms": "60000"},
            "1": {"message.max.bytes": "2048"},
        }
        assert first.image().dynamic_broker_configs(1) == (
            {"log.retention.ms": "60000"},
            {"message.max.bytes": "2048"},
        )
        assert first.image().dynamic_broker_configs(2) == ({"log.retention.ms": "60000"}, {})
        wanted = {"": {"log.retention.ms": "120000"}}
        if open_store.shared:
            second = await open_store()
            assert _levels(second.image())["1"] == {"message.max.bytes": "2048"}
            await second.set_broker_configs("", {"log.retention.ms": "120000"})
            await second.set_broker_configs("1", {})  # empty: the level goes
            await eventually(first, lambda image: _levels(image) == wanted)
            await second.close()
        else:
            await first.set_broker_configs("", {"log.retention.ms": "120000"})
            await first.set_broker_configs("1", {})
            assert _levels(first.image()) == wanted
        await first.close()
        reopened = await open_store()
        assert _levels(reopened.image()) == wanted
        await reopened.close()

    run(scenario)


def _groups(image: MetadataImage) -> dict[str, dict[str, str]]:
    return {group: dict(configs) for group, configs in image.group_configs.items()}


def test_group_configs_are_in_every_image_after_a_write_and_after_a_deletion(
    open_store: OpenStore,
) -> None:
    async def scenario() -> None:
        first = await open_store()
        assert _groups(first.image()) == {}
        assert first.image().group_overrides("g") == {}
        await first.set_group_configs("g", {"share.record.lock.duration.ms": "20000"})
        await first.set_group_configs("team/a", {"share.auto.offset.reset": "earliest"})
        # The writer's next image holds its write.
        assert _groups(first.image()) == {
            "g": {"share.record.lock.duration.ms": "20000"},
            "team/a": {"share.auto.offset.reset": "earliest"},
        }
        assert first.image().group_overrides("team/a") == {"share.auto.offset.reset": "earliest"}
        wanted = {"g": {"share.record.lock.duration.ms": "30000"}}
        if open_store.shared:
            second = await open_store()
            assert _groups(second.image())["team/a"] == {"share.auto.offset.reset": "earliest"}
            # Changed and deleted through another broker: the first one's image follows.
            await second.set_group_configs("g", {"share.record.lock.duration.ms": "30000"})
            await second.set_group_configs("team/a", {})
            assert _groups(second.image()) == wanted
            await eventually(first, lambda image: _groups(image) == wanted)
            # Created again after its deletion: seen again (a new node, a new watch).
            await second.set_group_configs("team/a", {"share.isolation.level": "read_committed"})
            again = {**wanted, "team/a": {"share.isolation.level": "read_committed"}}
            await eventually(first, lambda image: _groups(image) == again)
            await second.set_group_configs("team/a", {})
            await eventually(first, lambda image: _groups(image) == wanted)
            await second.close()
        else:
            await first.set_group_configs("g", {"share.record.lock.duration.ms": "30000"})
            await first.set_group_configs("team/a", {})
            assert _groups(first.image()) == wanted
        assert await first.group_configs("team/a") == {}
        assert await first.groups_with_configs() == ["g"]
        await first.close()
        reopened = await open_store()
        assert _groups(reopened.image()) == wanted
        await reopened.close()

    run(scenario)


def test_a_group_config_write_publishes_an_image_to_subscribers(open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store()
        seen: list[MetadataImage] = []
        store.subscribe(seen.append)
        await store.set_group_configs("g", {"share.delivery.count.limit": "3"})
        assert seen, "a group config write publishes a new image"
        assert seen[-1].group_overrides("g") == {"share.delivery.count.limit": "3"}
        await store.close()

    run(scenario)


def test_a_partition_write_without_a_controller_epoch_is_refused(open_store: OpenStore) -> None:
    """Only the controller writes partition states: a write naming no controller epoch
    (-1, which ZooKeeper's version check would match whatever the epoch) is fenced."""

    async def scenario() -> None:
        store = await open_store()
        await store.register_broker(BrokerInfo(1, "127.0.0.1", 9093))
        epoch = await store.elect_controller(1)
        assert epoch is not None
        await store.create_topics([topic("t", 1)])
        await eventually(store, lambda image: "t" in image.topics)
        state = store.image().topics["t"].partitions[0]
        moved = dataclasses.replace(state, leader_epoch=state.leader_epoch + 1)
        with pytest.raises(ControllerFenced):
            await store.update_partitions([PartitionChange("t", 0, moved)], -1)
        assert store.image().topics["t"].partitions[0] == state
        await store.update_partitions([PartitionChange("t", 0, moved)], epoch)
        await store.close()

    run(scenario)
