"""The simulator's clock and event queue: time order, ties in scheduling order, timers
called off, and randomness that depends only on the seed and the stream's name."""

from __future__ import annotations

from sluice.sim.world import NodeClock, World


def test_events_run_in_time_order_and_ties_in_the_order_they_were_scheduled() -> None:
    world = World(seed=1)
    ran: list[tuple[int, str]] = []
    world.at(20, lambda: ran.append((world.now_ms, "b")))
    world.at(10, lambda: ran.append((world.now_ms, "a")))
    world.at(20, lambda: ran.append((world.now_ms, "c")))
    world.after(5, lambda: world.after(15, lambda: ran.append((world.now_ms, "d"))))
    world.run_until(100)
    assert ran == [(10, "a"), (20, "b"), (20, "c"), (20, "d")]
    assert world.now_ms == 100


def test_run_until_stops_at_its_end_and_at_the_stop_condition() -> None:
    world = World(seed=1)
    ran: list[int] = []
    for at in (5, 10, 15, 30):
        world.at(at, lambda at=at: ran.append(at))
    world.run_until(12)
    assert ran == [5, 10] and world.now_ms == 12 and world.pending == 2
    world.run_until(100, stop=lambda: len(ran) == 3)
    assert ran == [5, 10, 15] and world.now_ms == 15


def test_a_cancelled_timer_does_not_run() -> None:
    world = World(seed=1)
    ran: list[str] = []
    timer = world.after(10, lambda: ran.append("late"))
    world.after(5, timer.cancel)
    world.run_until(20)
    assert ran == [] and world.pending == 0


def test_an_event_scheduled_in_the_past_runs_now() -> None:
    world = World(seed=1)
    seen: list[int] = []
    world.at(10, lambda: world.at(3, lambda: seen.append(world.now_ms)))
    world.run_until(20)
    assert seen == [10]


def test_random_streams_depend_only_on_the_seed_and_their_name() -> None:
    first, second = World(seed=42), World(seed=42)
    second.random("other").random()  # drawing from another stream changes nothing here
    assert [first.random("faults").random() for _ in range(5)] == [
        second.random("faults").random() for _ in range(5)
    ]
    assert World(seed=43).random("faults").random() != World(seed=42).random("faults").random()
    assert first.random("a") is first.random("a")


def test_a_paused_node_holds_its_timers_and_arrivals_and_runs_them_in_order_on_resume() -> None:
    world = World(seed=1)
    clock = NodeClock(world)
    ran: list[tuple[int, str]] = []
    clock.after(10, lambda: ran.append((world.now_ms, "timer")))
    called_off = clock.after(20, lambda: ran.append((world.now_ms, "called off")))
    world.after(5, clock.pause)
    world.after(15, lambda: clock.hold(lambda: ran.append((world.now_ms, "message"))))
    world.after(25, called_off.cancel)
    world.after(40, clock.resume)
    world.run_until(100)
    assert ran == [(40, "timer"), (40, "message")]
    assert not clock.hold(lambda: None), "a running node goes on at once"


def test_a_crash_drops_a_nodes_timers_and_what_waited() -> None:
    world = World(seed=1)
    clock = NodeClock(world)
    ran: list[str] = []
    clock.after(10, lambda: ran.append("before the crash"))
    clock.pause()
    clock.hold(lambda: ran.append("held"))
    clock.reset()
    clock.after(10, lambda: ran.append("after the crash"))
    world.run_until(100)
    assert ran == ["after the crash"] and not clock.paused
