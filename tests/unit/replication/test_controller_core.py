"""The controller's decisions (``cluster.controller_core``) driven by hand: images,
election results, write results and ticks of a plain ``now_ms`` in, commands out. No
store, no event loop, no clock: every case is exact."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from types import MappingProxyType

import pytest

from sluice.cluster import leadership
from sluice.cluster.controller_core import (
    RETRY_BACKOFF_MS,
    ControllerCore,
    ElectController,
    Fenced,
    LeaderRebalance,
    Lost,
    StoreFailed,
    WritePartitions,
    Written,
)
from sluice.cluster.image import ControllerInfo, MetadataImage
from sluice.cluster.model import NO_LEADER, BrokerInfo, PartitionState, TopicMetadata
from sluice.cluster.store import PartitionChange

ME = 1
TOPIC_ID = uuid.UUID(int=7)


def _image(
    live: dict[int, int],
    partitions: dict[int, PartitionState],
    controller: tuple[int, int] | None = None,
    configs: dict[str, str] | None = None,
) -> MetadataImage:
    brokers = {n: BrokerInfo(n, "127.0.0.1", 9092 + n, epoch=e) for n, e in live.items()}
    topic = TopicMetadata("t", TOPIC_ID, partitions, configs or {})
    return MetadataImage(
        "c",
        MappingProxyType(brokers),
        None if controller is None else ControllerInfo(*controller),
        MappingProxyType({"t": topic}),
    )


def _state(
    replicas: tuple[int, ...], leader: int, isr: tuple[int, ...] | None = None
) -> PartitionState:
    return PartitionState(replicas, leader, 3, replicas if isr is None else isr, 7)


STEADY = {0: _state((1, 2), 1), 1: _state((2, 1), 2)}


def _elected(
    core: ControllerCore, epoch: int = 4, live: dict[int, int] | None = None
) -> ControllerCore:
    """``core`` elected controller at ``epoch`` from an image of ``live`` brokers with
    nothing to change."""
    live = {1: 0, 2: 0} if live is None else live
    assert core.on_image(_image(live, STEADY), 0) == [ElectController(ME)]
    assert core.on_elected(epoch, _image(live, STEADY, (ME, epoch)), 0) == []
    assert core.epoch == epoch
    return core


def _write(commands: Sequence[object]) -> WritePartitions:
    (command,) = commands
    assert isinstance(command, WritePartitions)
    return command


def test_without_a_controller_it_asks_to_be_elected() -> None:
    core = ControllerCore(ME)
    assert core.on_image(_image({1: 0}, STEADY), 0) == [ElectController(ME)]
    assert core.epoch is None


def test_with_another_controller_it_asks_nothing() -> None:
    core = ControllerCore(ME)
    assert core.on_image(_image({1: 0, 2: 0}, STEADY, (2, 9)), 0) == []
    assert core.epoch is None and core.next_wake_ms() is None


def test_an_election_lost_leaves_it_following_until_the_next_image() -> None:
    core = ControllerCore(ME)
    core.on_image(_image({1: 0, 2: 0}, STEADY), 0)
    assert core.on_elected(None, _image({1: 0, 2: 0}, STEADY, (2, 9)), 0) == []
    assert core.epoch is None and core.next_wake_ms() is None


def test_an_election_won_reconciles_the_image_after_it_at_once() -> None:
    core = ControllerCore(ME)
    core.on_image(_image({1: 0, 2: 0}, STEADY), 0)
    after = _image({1: 0}, STEADY, (ME, 4))  # broker 2 left meanwhile
    write = _write(core.on_elected(4, after, 0))
    assert write.epoch == 4 and write.purpose == "reconcile"
    assert list(write.changes) == leadership.reconcile(after)


def test_the_broker_epochs_are_those_seen_before_the_election() -> None:
    """Broker 2 registered anew between the image that asked for the election and the
    one after it: a restart, so it leaves the ISR."""
    core = ControllerCore(ME)
    core.on_image(_image({1: 0, 2: 0}, STEADY), 0)
    write = _write(core.on_elected(4, _image({1: 0, 2: 6}, STEADY, (ME, 4)), 0))
    assert [(c.partition, c.state.leader, c.state.isr) for c in write.changes] == [
        (0, 1, (1,)),
        (1, 1, (1,)),
    ]


def test_a_store_failing_the_election_is_asked_again_after_the_backoff() -> None:
    core = ControllerCore(ME)
    image = _image({1: 0}, STEADY)
    core.on_image(image, 1_000)
    assert core.on_election_failed("connection lost", 1_000) == []
    assert core.next_wake_ms() == 1_000 + RETRY_BACKOFF_MS
    assert core.on_tick(image, 1_000 + RETRY_BACKOFF_MS - 1) == []
    assert core.on_tick(image, 1_000 + RETRY_BACKOFF_MS) == [ElectController(ME)]
    assert core.next_wake_ms() is None


def test_while_controller_a_leader_that_left_is_replaced_with_its_epoch() -> None:
    core = _elected(ControllerCore(ME), epoch=4)
    image = _image({1: 0}, STEADY, (ME, 4))
    write = _write(core.on_image(image, 10))
    assert write.epoch == 4
    assert write.changes == (
        PartitionChange("t", 0, PartitionState((1, 2), 1, 3, (1,), 7)),
        PartitionChange("t", 1, PartitionState((2, 1), 1, 4, (1,), 7)),
    )
    assert core.on_write_result(Written(write.write_id), 11) == []
    assert core.leader_elections == 1  # partition 1's leader changed; 0 only lost 2
    assert core.next_wake_ms() is None


def test_a_partition_without_a_live_in_sync_replica_counts_as_an_election() -> None:
    core = _elected(ControllerCore(ME), live={1: 0, 2: 0, 3: 0})
    image = _image({1: 0, 3: 0}, {0: _state((2, 3), 2, isr=(2,))}, (ME, 4))
    write = _write(core.on_image(image, 0))
    assert write.changes[0].state.leader == NO_LEADER
    core.on_write_result(Written(write.write_id), 0)
    assert core.leader_elections == 1


def test_nothing_to_change_writes_nothing() -> None:
    core = _elected(ControllerCore(ME))
    assert core.on_image(_image({1: 0, 2: 0}, STEADY, (ME, 4)), 0) == []


def test_a_restart_with_nothing_to_change_is_noted_at_once() -> None:
    """Broker 3 restarts while it holds nothing; its new epoch is the one known from
    then on, so a partition given to it later keeps it in the ISR."""
    core = _elected(ControllerCore(ME), live={1: 0, 2: 0, 3: 0})
    assert core.on_image(_image({1: 0, 2: 0, 3: 5}, STEADY, (ME, 4)), 0) == []
    with_3 = {**STEADY, 2: _state((3, 1), 3)}
    assert core.on_image(_image({1: 0, 2: 0, 3: 5}, with_3, (ME, 4)), 0) == []


def test_a_broker_gone_and_back_with_a_new_epoch_counts_as_restarted() -> None:
    """Found by the simulator: broker 2, the last in-sync replica (3 eligible, with
    min.insync.replicas 2), crashed losing its unsynced tail while 3 was away too; the
    controller wrote the partition offline (keeping 2 as the ISR's last member), then 2
    registered anew. Its epoch had been forgotten while it was away, so the new
    registration did not count as a restart and 2 led its short log. Epochs are kept
    while a broker is away: 2 is restarted, out of the ISR, and the partition waits for
    3, which has every committed record."""
    core = _elected(ControllerCore(ME), live={1: 0, 2: 0, 3: 0})
    state = dataclasses.replace(_state((2, 3), 2, isr=(2,)), elr=(3,))
    configs = {"min.insync.replicas": "2"}
    away = _write(core.on_image(_image({1: 0}, {0: state}, (ME, 4), configs), 0))
    (offline,) = away.changes
    assert (offline.state.leader, offline.state.isr) == (NO_LEADER, (2,))
    assert core.on_write_result(Written(away.write_id), 1) == []
    back = core.on_image(_image({1: 0, 2: 9}, {0: offline.state}, (ME, 4), configs), 2)
    (change,) = _write(back).changes
    assert change.state.leader == NO_LEADER, "2 restarted uncleanly: it must not lead"
    assert (change.state.isr, change.state.elr) == ((), (3,))


def test_a_write_lost_to_a_newer_state_is_decided_again_after_the_backoff() -> None:
    """The restart seen is not forgotten: the brokers' epochs are noted only once a
    write went through."""
    core = _elected(ControllerCore(ME))
    image = _image({1: 0, 2: 6}, STEADY, (ME, 4))
    first = _write(core.on_image(image, 100))
    assert core.on_write_result(Lost(first.write_id, "version 8, not 7"), 100) == []
    assert core.next_wake_ms() == 100 + RETRY_BACKOFF_MS
    assert core.on_tick(image, 100 + RETRY_BACKOFF_MS - 1) == []
    again = _write(core.on_tick(image, 100 + RETRY_BACKOFF_MS))
    assert again.changes == first.changes and again.write_id != first.write_id
    assert core.next_wake_ms() is None
    assert core.leader_elections == 0


def test_a_write_the_store_failed_is_decided_again_after_the_backoff() -> None:
    core = _elected(ControllerCore(ME))
    image = _image({1: 0}, STEADY, (ME, 4))
    first = _write(core.on_image(image, 0))
    assert core.on_write_result(StoreFailed(first.write_id, "timed out"), 5) == []
    assert core.next_wake_ms() == 5 + RETRY_BACKOFF_MS
    assert _write(core.on_tick(image, 5 + RETRY_BACKOFF_MS)).changes == first.changes


def test_a_new_image_during_the_backoff_is_looked_at_at_once() -> None:
    core = _elected(ControllerCore(ME))
    image = _image({1: 0}, STEADY, (ME, 4))
    first = _write(core.on_image(image, 0))
    core.on_write_result(Lost(first.write_id, "stale"), 0)
    assert _write(core.on_image(image, 50)).changes == first.changes
    assert core.next_wake_ms() is None


def test_a_fenced_write_stops_it_acting_for_good() -> None:
    core = _elected(ControllerCore(ME), epoch=4)
    image = _image({1: 0}, STEADY, (ME, 4))  # the image still names it at epoch 4
    write = _write(core.on_image(image, 0))
    assert core.on_write_result(Fenced(write.write_id, "epoch 5 is stored"), 0) == []
    assert core.epoch is None and core.next_wake_ms() is None
    assert core.on_image(image, 1) == []
    assert core.on_tick(image, 10_000) == []


@pytest.mark.parametrize("controller", [(2, 5), (ME, 5)], ids=["another", "a newer epoch"])
def test_an_image_naming_another_controller_stops_it_acting(
    controller: tuple[int, int],
) -> None:
    core = _elected(ControllerCore(ME), epoch=4)
    assert core.on_image(_image({1: 0}, STEADY, controller), 0) == []
    assert core.epoch is None


def test_an_image_without_a_controller_keeps_it_acting() -> None:
    """A controller that is still acting (its node gone from the image for a moment)
    keeps its epoch and does not ask for another election."""
    core = _elected(ControllerCore(ME), epoch=4)
    assert core.on_image(_image({1: 0, 2: 0}, STEADY), 0) == []
    assert core.epoch == 4


@pytest.mark.parametrize(
    ("defaults", "configs", "leader"),
    [
        ({}, {}, NO_LEADER),
        ({"unclean.leader.election.enable": "true"}, {}, 2),
        (
            {"unclean.leader.election.enable": "true"},
            {"unclean.leader.election.enable": "false"},
            NO_LEADER,
        ),
        ({}, {"unclean.leader.election.enable": "true"}, 2),
    ],
    ids=["clean", "broker default", "topic refuses", "topic allows"],
)
def test_an_unclean_election_follows_the_topic_config_over_the_defaults(
    defaults: dict[str, str], configs: dict[str, str], leader: int
) -> None:
    core = _elected(ControllerCore(ME, defaults), live={1: 0, 2: 0, 3: 0})
    state = PartitionState((3, 2), 3, 3, (3,), 7)  # 2 out of the ISR; 3 dies
    write = _write(core.on_image(_image({1: 0, 2: 0}, {0: state}, (ME, 4), configs), 0))
    assert write.changes[0].state.leader == leader


def test_the_topic_defaults_are_read_when_deciding() -> None:
    """The defaults mapping is shared: dynamic broker configs change it in place."""
    defaults: dict[str, str] = {}
    core = _elected(ControllerCore(ME, defaults), live={1: 0, 2: 0, 3: 0})
    defaults["unclean.leader.election.enable"] = "true"
    state = PartitionState((3, 2), 3, 3, (3,), 7)
    write = _write(core.on_image(_image({1: 0, 2: 0}, {0: state}, (ME, 4)), 0))
    assert write.changes[0].state.leader == 2


def test_a_completed_reassignment_is_written_with_the_reconcile() -> None:
    moving = PartitionState((3, 1), 1, 3, (1, 3), 7, adding_replicas=(3,), removing_replicas=(1,))
    core = _elected(ControllerCore(ME), live={1: 0, 2: 0, 3: 0})
    write = _write(core.on_image(_image({1: 0, 2: 0, 3: 0}, {0: moving}, (ME, 4)), 0))
    (change,) = write.changes
    assert change.state.replicas == (3,) and change.state.leader == 3
    assert change.state.adding_replicas == () and change.state.removing_replicas == ()


def test_a_reassignment_waits_when_its_partition_is_being_reconciled() -> None:
    """Its leader died: this round elects; the next completes the move."""
    moving = PartitionState((3, 1), 1, 3, (1, 3), 7, adding_replicas=(3,), removing_replicas=(1,))
    core = _elected(ControllerCore(ME), live={1: 0, 2: 0, 3: 0})
    write = _write(core.on_image(_image({2: 0, 3: 0}, {0: moving}, (ME, 4)), 0))
    (change,) = write.changes
    assert change.state.replicas == (3, 1) and change.state.leader == 3


def test_one_write_in_flight_at_a_time() -> None:
    core = _elected(ControllerCore(ME))
    image = _image({1: 0}, STEADY, (ME, 4))
    write = _write(core.on_image(image, 0))
    with pytest.raises(AssertionError):
        core.on_image(image, 1)
    with pytest.raises(AssertionError):
        core.on_tick(image, 1)
    with pytest.raises(AssertionError):
        core.on_write_result(Written(write.write_id + 1), 1)


def test_an_election_result_needs_an_election() -> None:
    core = ControllerCore(ME)
    with pytest.raises(AssertionError):
        core.on_elected(3, _image({1: 0}, STEADY, (ME, 3)), 0)
    with pytest.raises(AssertionError):
        core.on_election_failed("no store", 0)


REBALANCE = LeaderRebalance(interval_s=2, imbalance_percentage=10)
IMBALANCED = {i: _state((1, 2), 2) for i in range(3)}
"""Broker 1 is preferred for three partitions and leads none."""


def test_the_rebalance_timer_starts_with_the_controller() -> None:
    core = ControllerCore(ME, rebalance=REBALANCE)
    assert core.next_wake_ms() is None
    core.start(1_000)
    assert core.next_wake_ms() == 3_000
    assert ControllerCore(ME).next_wake_ms() is None


def test_leaders_go_back_to_their_preferred_replica_every_interval() -> None:
    core = ControllerCore(ME, rebalance=REBALANCE)
    core.start(0)
    _elected(core)
    image = _image({1: 0, 2: 0}, IMBALANCED, (ME, 4))
    assert core.on_tick(image, 1_999) == []
    write = _write(core.on_tick(image, 2_050))
    assert write.purpose == "rebalance" and write.epoch == 4
    assert write.changes == tuple(leadership.preferred_leader_changes(image, 10))
    assert core.next_wake_ms() == 4_050  # the interval counts from the tick
    assert core.on_write_result(Written(write.write_id), 2_060) == []
    assert core.leader_elections == 0  # only reconciles count
    assert core.next_wake_ms() == 4_050


@pytest.mark.parametrize("result", [Lost, StoreFailed])
def test_a_rebalance_that_fails_waits_for_the_next_interval(
    result: type[Lost] | type[StoreFailed],
) -> None:
    core = ControllerCore(ME, rebalance=REBALANCE)
    core.start(0)
    _elected(core)
    image = _image({1: 0, 2: 0}, IMBALANCED, (ME, 4))
    write = _write(core.on_tick(image, 2_000))
    assert core.on_write_result(result(write.write_id, "stale"), 2_000) == []
    assert core.next_wake_ms() == 4_000 and core.epoch == 4


def test_a_fenced_rebalance_stops_it_acting() -> None:
    core = ControllerCore(ME, rebalance=REBALANCE)
    core.start(0)
    _elected(core)
    write = _write(core.on_tick(_image({1: 0, 2: 0}, IMBALANCED, (ME, 4)), 2_000))
    core.on_write_result(Fenced(write.write_id, "epoch 5"), 2_000)
    assert core.epoch is None
    assert core.on_tick(_image({1: 0, 2: 0}, IMBALANCED, (ME, 4)), 4_000) == []


def test_the_rebalance_timer_runs_while_not_controller() -> None:
    core = ControllerCore(ME, rebalance=REBALANCE)
    core.start(0)
    assert core.on_tick(_image({1: 0, 2: 0}, IMBALANCED, (2, 9)), 2_000) == []
    assert core.next_wake_ms() == 4_000


def test_a_balanced_cluster_writes_nothing_on_a_rebalance() -> None:
    core = ControllerCore(ME, rebalance=REBALANCE)
    core.start(0)
    _elected(core)
    assert core.on_tick(_image({1: 0, 2: 0}, STEADY, (ME, 4)), 2_000) == []
    assert core.next_wake_ms() == 4_000


def test_a_pending_retry_comes_before_the_rebalance() -> None:
    """The rebalance falls due during the backoff: the retry looks again first, then the
    overdue rebalance runs."""
    core = ControllerCore(ME, rebalance=REBALANCE)
    core.start(0)
    _elected(core)
    lost = _write(core.on_image(_image({1: 0}, STEADY, (ME, 4)), 1_900))
    core.on_write_result(Lost(lost.write_id, "stale"), 1_900)
    assert core.next_wake_ms() == 1_900 + RETRY_BACKOFF_MS
    back = _image({1: 0, 2: 0}, IMBALANCED, (ME, 4))
    assert core.on_tick(back, 2_100) == []  # the retry: broker 2 is back, nothing to do
    assert core.next_wake_ms() == 2_000  # overdue
    assert _write(core.on_tick(back, 2_100)).purpose == "rebalance"
    assert core.next_wake_ms() == 4_100


@pytest.mark.parametrize(("interval_s", "interval_ms"), [(1, 1_000), (0.5, 500), (300, 300_000)])
def test_the_rebalance_interval_in_milliseconds(interval_s: float, interval_ms: int) -> None:
    assert LeaderRebalance(interval_s, 10).interval_ms == interval_ms
