"""The rebalance timeline: events from two successive DescribeGroups samples."""

from __future__ import annotations

from sluice.client.groups import GroupDescription, GroupState, MemberDescription
from sluice.console.timeline import (
    EventKind,
    GroupSnapshot,
    GroupTrack,
    MemberSnapshot,
    TimelineEvent,
    diff_snapshots,
)


def member(member_id: str, assignment: dict[str, list[int]] | None = None) -> MemberSnapshot:
    return MemberSnapshot(
        member_id,
        f"client-{member_id}",
        "/127.0.0.1",
        {t: tuple(p) for t, p in (assignment or {}).items()},
    )


def snapshot(time_s: float, state: str, *members: MemberSnapshot) -> GroupSnapshot:
    return GroupSnapshot(time_s, state, "range" if members else "", tuple(members))


def kinds(events: list[TimelineEvent]) -> list[EventKind]:
    return [event.kind for event in events]


def test_first_sample_describes_the_group_and_counts_a_stable_generation() -> None:
    track = GroupTrack()
    events = diff_snapshots(track, snapshot(1, GroupState.STABLE, member("a", {"t": [0, 1]})))
    assert kinds(events) == [EventKind.STATE_CHANGED, EventKind.GENERATION]
    assert "first seen: Stable, 1 member(s)" in events[0].summary
    assert events[1].generation == 1
    assert events[1].members[0].assignment_text() == "t[0,1]"


def test_a_member_joining_through_a_rebalance_opens_the_next_generation() -> None:
    track = GroupTrack()
    diff_snapshots(track, snapshot(1, GroupState.STABLE, member("a", {"t": [0, 1]})))
    rebalancing = diff_snapshots(
        track, snapshot(2, GroupState.PREPARING_REBALANCE, member("a"), member("b"))
    )
    assert kinds(rebalancing) == [EventKind.STATE_CHANGED, EventKind.MEMBER_JOINED]
    assert rebalancing[0].summary == "state Stable → PreparingRebalance"
    assert rebalancing[1].summary == "member b joined (client-b from /127.0.0.1)"
    stable = diff_snapshots(
        track,
        snapshot(3, GroupState.STABLE, member("a", {"t": [0]}), member("b", {"t": [1]})),
    )
    assert kinds(stable) == [EventKind.STATE_CHANGED, EventKind.GENERATION]
    generation = stable[1]
    assert generation.generation == 2
    assert not generation.skipped
    assert generation.summary == "generation 1 → 2 (range)"
    assert [m.assignment_text() for m in generation.members] == ["t[0]", "t[1]"]


def test_a_change_between_two_stable_samples_is_marked_as_unseen_generations() -> None:
    track = GroupTrack()
    diff_snapshots(track, snapshot(1, GroupState.STABLE, member("a", {"t": [0, 1]})))
    events = diff_snapshots(
        track,
        snapshot(2, GroupState.STABLE, member("a", {"t": [0]}), member("b", {"t": [1]})),
    )
    assert kinds(events) == [EventKind.MEMBER_JOINED, EventKind.GENERATION]
    assert events[1].skipped
    assert "generations in between not seen" in events[1].summary


def test_an_unchanged_stable_group_yields_no_events() -> None:
    track = GroupTrack()
    diff_snapshots(track, snapshot(1, GroupState.STABLE, member("a", {"t": [0]})))
    assert diff_snapshots(track, snapshot(2, GroupState.STABLE, member("a", {"t": [0]}))) == []


def test_members_leaving_until_empty() -> None:
    track = GroupTrack()
    diff_snapshots(track, snapshot(1, GroupState.STABLE, member("a", {"t": [0]})))
    events = diff_snapshots(track, snapshot(2, GroupState.EMPTY))
    assert kinds(events) == [EventKind.STATE_CHANGED, EventKind.MEMBER_LEFT]
    assert events[1].members[0].member_id == "a"
    # A group coming back after being empty starts a new generation, not a skipped one.
    back = diff_snapshots(track, snapshot(3, GroupState.STABLE, member("c", {"t": [0]})))
    assert kinds(back) == [EventKind.STATE_CHANGED, EventKind.MEMBER_JOINED, EventKind.GENERATION]
    assert back[-1].generation == 2
    assert not back[-1].skipped


def test_snapshot_of_a_description_sorts_members_and_keeps_assignments() -> None:
    description = GroupDescription(
        "g",
        GroupState.STABLE,
        "consumer",
        "roundrobin",
        [
            MemberDescription("m2", None, "c2", "/h2", {"t": [1]}),
            MemberDescription("m1", None, "c1", "/h1", {"t": [0]}),
        ],
    )
    snap = GroupSnapshot.of(description, 5.0)
    assert [m.member_id for m in snap.members] == ["m1", "m2"]
    assert snap.members[1].assignment == {"t": (1,)}
    assert snap.protocol == "roundrobin"


def shared(time_s: float, state: str, epoch: int, *members: MemberSnapshot) -> GroupSnapshot:
    return GroupSnapshot(time_s, state, "simple", tuple(members), generation=epoch)


def test_share_group_generations_are_the_epochs_it_reports() -> None:
    track = GroupTrack()
    first = diff_snapshots(track, shared(1, "Stable", 3, member("a", {"t": [0]})))
    assert kinds(first) == [EventKind.STATE_CHANGED, EventKind.GENERATION]
    assert first[1].generation == 3
    assert first[1].summary == "generation 3 (simple)"
    assert diff_snapshots(track, shared(2, "Stable", 3, member("a", {"t": [0]}))) == []
    joined = diff_snapshots(track, shared(3, "Stable", 4, member("a"), member("b")))
    assert kinds(joined) == [EventKind.MEMBER_JOINED, EventKind.GENERATION]
    assert joined[1].summary == "generation 3 → 4 (simple)"
    assert not joined[1].skipped


def test_share_group_epochs_that_went_by_unseen_are_said_so() -> None:
    track = GroupTrack()
    diff_snapshots(track, shared(1, "Stable", 2, member("a")))
    events = diff_snapshots(track, shared(2, "Empty", 5))
    assert kinds(events) == [EventKind.STATE_CHANGED, EventKind.MEMBER_LEFT, EventKind.GENERATION]
    assert events[2].skipped
    assert events[2].summary == "generation 2 → 5 (simple): 2 epoch(s) in between not seen"


def test_an_empty_share_group_first_seen_opens_no_generation() -> None:
    track = GroupTrack()
    assert kinds(diff_snapshots(track, shared(1, "Empty", 4))) == [EventKind.STATE_CHANGED]
    assert track.generation == 4


def test_consumer_group_generations_are_its_group_epochs() -> None:
    """A consumer group (KIP-848) reports its group epoch, as a share group does; a
    classic group's description has none (generations are counted)."""

    def consumer_group(epoch: int, *member_ids: str) -> GroupDescription:
        return GroupDescription(
            "g",
            "Stable",
            "consumer",
            "uniform",
            [MemberDescription(m, None, "c", "/127.0.0.1", {"t": [0]}, 5) for m in member_ids],
            group_type="consumer",
            group_epoch=epoch,
            assignment_epoch=epoch,
        )

    track = GroupTrack()
    first = diff_snapshots(track, GroupSnapshot.of(consumer_group(5, "a"), 1))
    assert [e.generation for e in first if e.kind is EventKind.GENERATION] == [5]
    later = diff_snapshots(track, GroupSnapshot.of(consumer_group(8, "a", "b"), 2))
    (generation,) = [e for e in later if e.kind is EventKind.GENERATION]
    assert generation.summary == "generation 5 → 8 (uniform): 2 epoch(s) in between not seen"
    classic = GroupDescription("g", "Stable", "consumer", "range")
    assert GroupSnapshot.of(classic, 1).generation is None
