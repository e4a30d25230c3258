"""The simulated network: latency within bounds, order kept per link unless reordering
is on, losses from partitions, downed nodes and the loss rate, duplicates, and the same
deliveries for the same seed."""

from __future__ import annotations

from typing import Any

from sluice.sim.network import Faults, Network
from sluice.sim.world import World


def _inboxes(network: Network, nodes: range) -> dict[int, list[tuple[int, Any, int]]]:
    """Each node's arrivals: (sender, message, time)."""
    inboxes: dict[int, list[tuple[int, Any, int]]] = {node: [] for node in nodes}
    for node in nodes:
        network.attach(
            node,
            lambda sender, message, node=node: inboxes[node].append(
                (sender, message, network.world.now_ms)
            ),
        )
    return inboxes


def test_messages_arrive_within_the_latency_in_order_per_link() -> None:
    world = World(seed=7)
    network = Network(world, Faults(latency_ms=(1, 50)))
    inboxes = _inboxes(network, range(2))
    for i in range(100):
        network.send(0, 1, i)
    world.run_until(1_000)
    assert [message for _, message, _ in inboxes[1]] == list(range(100))
    assert all(1 <= at <= 50 for _, _, at in inboxes[1])
    assert network.stats.delivered == 100


def test_reordering_lets_later_messages_overtake() -> None:
    world = World(seed=7)
    network = Network(world, Faults(latency_ms=(1, 50), reorder=True))
    inboxes = _inboxes(network, range(2))
    for i in range(100):
        network.send(0, 1, i)
    world.run_until(1_000)
    received = [message for _, message, _ in inboxes[1]]
    assert sorted(received) == list(range(100)) and received != list(range(100))


def test_a_partition_drops_messages_both_ways_until_healed() -> None:
    world = World(seed=7)
    network = Network(world)
    inboxes = _inboxes(network, range(3))
    network.partition({0}, {1})
    network.send(0, 1, "cut")
    network.send(1, 0, "cut")
    network.send(0, 2, "through")
    world.run_until(100)
    assert inboxes[1] == [] and inboxes[0] == [] and len(inboxes[2]) == 1
    network.heal()
    network.send(0, 1, "healed")
    world.run_until(200)
    assert [message for _, message, _ in inboxes[1]] == ["healed"]


def test_a_message_in_flight_to_a_node_that_goes_down_is_lost() -> None:
    world = World(seed=7)
    network = Network(world, Faults(latency_ms=(10, 10)))
    inboxes = _inboxes(network, range(2))
    network.send(0, 1, "in flight")
    world.after(5, lambda: network.detach(1))
    world.run_until(100)
    assert inboxes[1] == [] and network.stats.lost == 1 and not network.is_up(1)


def test_losses_and_duplicates_follow_their_rates_and_the_seed() -> None:
    def run(seed: int) -> list[int]:
        world = World(seed=seed)
        network = Network(world, Faults(loss_rate=0.3, duplicate_rate=0.2))
        inboxes = _inboxes(network, range(2))
        for i in range(1_000):
            network.send(0, 1, i)
        world.run_until(10_000)
        assert 200 < network.stats.lost < 400
        assert 100 < network.stats.duplicated < 200
        return [message for _, message, _ in inboxes[1]]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_only_duplicable_messages_arrive_twice() -> None:
    world = World(seed=3)
    odd_only = Faults(duplicate_rate=0.5, duplicable=lambda message: message % 2 == 1)
    network = Network(world, odd_only)
    inboxes = _inboxes(network, range(2))
    for i in range(200):
        network.send(0, 1, i)
    world.run_until(10_000)
    arrived = [message for _, message, _ in inboxes[1]]
    assert len(arrived) > 200, "odd messages were duplicated"
    assert all(arrived.count(i) == 1 for i in range(0, 200, 2)), "even ones arrive once"


def test_a_delayed_message_holds_up_its_link_and_a_reordered_one_is_overtaken() -> None:
    def arrivals(faults: Faults) -> tuple[Network, list[int]]:
        world = World(seed=5)
        network = Network(world, faults)
        inboxes = _inboxes(network, range(2))
        for i in range(200):
            world.at(i * 10, lambda i=i: network.send(0, 1, i))
        world.run_until(20_000)
        return network, [message for _, message, _ in inboxes[1]]

    delayed, received = arrivals(Faults(delay_rate=0.1, late_ms=(100, 300)))
    assert received == list(range(200)) and 5 < delayed.stats.delayed < 40
    reordered, received = arrivals(Faults(reorder_rate=0.1, late_ms=(100, 300)))
    assert sorted(received) == list(range(200)) and received != list(range(200))
    assert 5 < reordered.stats.reordered < 40


def test_a_duplicate_arrives_late_after_later_messages() -> None:
    world = World(seed=5)
    network = Network(world, Faults(latency_ms=(1, 1), late_ms=(50, 50)))
    inboxes = _inboxes(network, range(2))
    network.faults.duplicate_rate = 1.0
    network.send(0, 1, "answer")
    network.faults.duplicate_rate = 0.0
    world.after(10, lambda: network.send(0, 1, "next"))
    world.run_until(1_000)
    assert [(message, at) for _, message, at in inboxes[1]] == [
        ("answer", 1),
        ("next", 11),
        ("answer", 51),
    ]
