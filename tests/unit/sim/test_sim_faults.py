"""The simulator's faults on a quiet cluster, one at a time: a leader paused past its
session resumes on its stale view and acknowledges nothing; a slow disk holds a
leader's produces behind its writes and makes nothing durable while slow."""

from __future__ import annotations

from sluice.common.ids import TopicPartition
from sluice.sim import history
from sluice.sim.cluster import SESSION_TIMEOUT_MS, Settings, SimCluster, _Producer

TP = TopicPartition("t", 0)
QUIET = Settings(
    faults=0,
    pauses=0,
    slow_disks=0,
    loss_rate=0.0,
    delay_rate=0.0,
    reorder_rate=0.0,
    duplicate_rate=0.0,
)


def _quiet_cluster(seed: int) -> tuple[SimCluster, _Producer]:
    """Three brokers, one partition on all of them led by broker 0, one producer."""
    cluster = SimCluster(seed, QUIET)
    for broker in cluster.brokers:
        broker.start()
    cluster.store.create_topic("t", [(0, 1, 2)], {"min.insync.replicas": "2"})
    cluster.publish()
    cluster.world.run_until(2_000)
    return cluster, _Producer(cluster, 0, history.History())


def test_a_leader_paused_past_its_session_resumes_stale_and_acknowledges_nothing() -> None:
    cluster, producer = _quiet_cluster(seed=3)
    world = cluster.world
    for index in range(40):
        world.at(2_000 + index * 150, producer.sender(TP, f"v{index}"))
    pause_ms = SESSION_TIMEOUT_MS + 3_000
    world.run_until(2_500)
    cluster.pause(0, pause_ms)
    resumed_ms = 2_500 + pause_ms
    world.run_until(resumed_ms + 1)
    stale = cluster.brokers[0].logs[TP]
    # What reached it while paused, it appended on resuming, as leader of epoch 0 still.
    appended_stale = [r for r in stale.records[stale.high_watermark :] if r.epoch == 0]
    assert appended_stale, "the scenario needs produces held by the paused leader"
    world.run_until(30_000)
    assert cluster.trace == ["2500 pause 0 for 6000", "8500 resume 0"]
    after_resume = [a for a in cluster.monitor.acknowledgements if a[0] >= resumed_ms]
    assert not [a for a in after_resume if a[2] == 0 and a[3] == 0], after_resume
    assert cluster.monitor.count == 0, cluster.monitor.violations
    state = cluster.store.state(TP)
    assert state.leader != 0 or state.leader_epoch > 0
    final = [r.value for r in cluster.brokers[state.leader].logs[TP].records]
    assert all(r.value in final for r in stale.records[: stale.high_watermark])


def test_a_slow_disk_holds_produces_behind_its_writes_and_syncs_nothing() -> None:
    cluster, producer = _quiet_cluster(seed=4)
    world = cluster.world
    write_ms = 200
    leader_log = cluster.brokers[0].logs[TP]
    cluster.slow_disk(0, write_ms, 5_000)
    durable = leader_log.flushed_offset
    for index in range(5):
        world.at(2_000, producer.sender(TP, f"v{index}"))
    world.run_until(6_900)
    acked_at = sorted(at for at, *_ in cluster.monitor.acknowledgements)
    assert len(acked_at) == 5
    for nth, at in enumerate(acked_at, start=1):
        assert at >= 2_000 + nth * write_ms, acked_at  # one write at a time
    assert leader_log.flushed_offset == durable and leader_log.log_end_offset == 5
    world.run_until(7_000 + QUIET.writeback_interval_ms)
    assert leader_log.flushed_offset == 5, "written back once the disk recovered"
    assert cluster.trace[-1] == "7000 disk 0 recovers"


def test_a_broker_sees_the_images_in_the_order_they_were_published() -> None:
    # Seed 694 drew a longer delay for the image with the topic than for the one of a
    # broker's registration published before it: broker 0 was left without the topic
    # and failed on the first produce.
    cluster = SimCluster(694, Settings())
    for broker in cluster.brokers:
        broker.start()
    cluster.store.create_topic("t", [(0, 1, 2)], {"min.insync.replicas": "2"})
    cluster.publish()
    cluster.world.run_until(2_000)
    for broker in cluster.brokers:
        assert broker.image is not None and "t" in broker.image.topics, broker.node_id


def test_a_recovered_disk_writes_what_queued_at_once() -> None:
    # Seed 13: writes queued on a slow disk kept their slow completion times after it
    # recovered, so a follower waited behind them past the end of the run.
    cluster, producer = _quiet_cluster(seed=5)
    world = cluster.world
    leader_log = cluster.brokers[0].logs[TP]
    cluster.slow_disk(0, 300, 1_000)
    for index in range(30):
        world.at(2_000, producer.sender(TP, f"v{index}"))
    world.run_until(2_999)
    assert leader_log.log_end_offset == 3  # 300 ms a write
    world.run_until(3_000)
    assert leader_log.log_end_offset == 30
