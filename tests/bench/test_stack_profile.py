"""bench/stack_profile.py: py-spy's collapsed stacks aggregated by function and group, idle
samples left out."""

from stack_profile import OTHER, aggregate, report_lines

ROOT = 'process 7:"python -m sluice serve";_run_once (asyncio/base_events.py)'
LINES = [
    f"{ROOT};EpollSelector.select (selectors.py) 50",
    f"{ROOT};Connection._write (sluice/broker/network/server.py);"
    "_SelectorSocketTransport.write (asyncio/selector_events.py) 30",
    f"{ROOT};Dispatcher._handle (sluice/broker/dispatcher.py);"
    "decode (kio/serial/_parse.py);pack (struct.py) 15",
    f"{ROOT};Dispatcher._handle (sluice/broker/dispatcher.py) 5",
    "Thread._bootstrap (threading.py);_worker (concurrent/futures/thread.py) 40",
    "helper (somewhere/else.py) 10",
    "a line that is not a stack",
]


def test_idle_samples_are_left_out_of_every_share() -> None:
    profile = aggregate(LINES)

    assert profile.idle_samples == 90
    assert profile.busy_samples == 60
    assert "EpollSelector.select (selectors.py)" not in profile.own


def test_a_sample_goes_to_the_group_of_its_innermost_grouped_frame() -> None:
    profile = aggregate(LINES)

    assert profile.groups == {
        "socket write": 30,
        "kio decode/encode, message building": 15,
        "dispatcher/metrics/quota wrappers": 5,
        OTHER: 10,
    }


def test_own_time_counts_the_innermost_frame_and_total_time_each_frame_once() -> None:
    profile = aggregate([*LINES, f"{ROOT};f (a.py);f (a.py) 4"])

    assert profile.own["pack (struct.py)"] == 15
    assert profile.total["Dispatcher._handle (sluice/broker/dispatcher.py)"] == 20
    assert profile.total["f (a.py)"] == 4
    assert profile.own["f (a.py)"] == 4


def test_the_report_states_the_idle_exclusion_and_percentages_of_busy_samples() -> None:
    lines = report_lines(aggregate(LINES), top=3)

    assert "idle samples" in lines[0] and "left out" in lines[0]
    assert "| socket write | 50.0% |" in lines
    assert sum(1 for line in lines if line.startswith("| `")) == 6


def test_the_frames_that_start_the_process_are_left_out_of_total_time() -> None:
    profile = aggregate(
        ["_run_code (<frozen runpy>);main (click/core.py);handle (sluice/broker/app.py) 3"]
    )

    assert set(profile.total) == {"handle (sluice/broker/app.py)"}
