"""A group's rebalance timeline, from successive DescribeGroups (or, for share groups,
ShareGroupDescribe) answers.

Each sample of a group is a :class:`GroupSnapshot` (state, assignor, members with their
assignments). :func:`diff_snapshots` compares a snapshot with the one before and says what
happened in between: members that joined or left, a state change, and a new generation
with the assignment each member got.

DescribeGroups does not carry the group's generation id (only JoinGroup and SyncGroup
answers do), so generations are the ones *observed*: a new one is counted when the group
is Stable with a different membership, assignor or assignment than at its last Stable
sample, or after it was seen rebalancing. When two Stable samples differ without any
rebalance seen between them, the group went through one or more generations the sampler
did not see; the event says so rather than inventing a number.

ShareGroupDescribe and ConsumerGroupDescribe (a consumer group of KIP-848) do report
the group epoch, which moves on at every change of membership: a share or consumer
group's snapshots carry it as their ``generation``, and a new generation is the epoch
reported, not one counted. When it moved on by more than one
between two samples, the event says epochs went by unseen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from sluice.client.admin_share_groups import ShareGroupDescription
from sluice.client.groups import GroupDescription, GroupState


@dataclass(frozen=True, slots=True)
class MemberSnapshot:
    """One member as a sample saw it."""

    member_id: str
    client_id: str
    client_host: str
    assignment: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def assignment_text(self) -> str:
        """``topic[0,1] other[2]``, or ``–`` for nothing assigned."""
        if not self.assignment:
            return "–"
        return " ".join(
            f"{topic}[{','.join(str(p) for p in partitions)}]"
            for topic, partitions in sorted(self.assignment.items())
        )


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """A group at one sample."""

    time_s: float
    state: str
    protocol: str
    members: tuple[MemberSnapshot, ...] = ()
    generation: int | None = None
    """The generation the cluster reports (a share group's epoch); None when it reports
    none (DescribeGroups), and generations are counted as observed."""

    @property
    def member_ids(self) -> frozenset[str]:
        return frozenset(member.member_id for member in self.members)

    def layout(self) -> tuple[str, tuple[tuple[str, tuple[tuple[str, tuple[int, ...]], ...]], ...]]:
        """What a generation fixes: the assignor and each member's assignment."""
        return (
            self.protocol,
            tuple(
                sorted(
                    (member.member_id, tuple(sorted(member.assignment.items())))
                    for member in self.members
                )
            ),
        )

    @classmethod
    def of(cls, description: GroupDescription, time_s: float) -> GroupSnapshot:
        """A classic group's sample (generations counted as observed) or a consumer
        group's (KIP-848: generations are its group epochs)."""
        return cls(
            time_s=time_s,
            state=description.state,
            protocol=description.protocol,
            generation=description.group_epoch,
            members=tuple(
                sorted(
                    (
                        MemberSnapshot(
                            member.member_id,
                            member.client_id,
                            member.client_host,
                            {t: tuple(p) for t, p in member.assignment.items()},
                        )
                        for member in description.members
                    ),
                    key=lambda m: m.member_id,
                )
            ),
        )

    @classmethod
    def of_share_group(cls, description: ShareGroupDescription, time_s: float) -> GroupSnapshot:
        return cls(
            time_s=time_s,
            state=description.state,
            protocol=description.assignor,
            members=tuple(
                MemberSnapshot(
                    member.member_id,
                    member.client_id,
                    member.client_host,
                    {t: tuple(p) for t, p in member.assignment.items()},
                )
                for member in description.members  # sorted by member id already
            ),
            generation=description.group_epoch,
        )


class EventKind(StrEnum):
    MEMBER_JOINED = "member joined"
    MEMBER_LEFT = "member left"
    STATE_CHANGED = "state changed"
    GENERATION = "new generation"


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    """Something that happened to a group between two samples."""

    time_s: float
    kind: EventKind
    summary: str
    generation: int | None = None
    """The observed generation this event opened (GENERATION events)."""
    skipped: bool = False
    """Generations went by unseen between the two samples."""
    members: tuple[MemberSnapshot, ...] = ()
    """The members (with assignments) concerned: joined, left, or the new generation's."""


@dataclass(slots=True)
class GroupTrack:
    """What is remembered of one group between samples: the last snapshot, the last
    Stable one, whether a rebalance was seen since, and the observed generation count."""

    last: GroupSnapshot | None = None
    last_stable: GroupSnapshot | None = None
    rebalance_seen: bool = False
    generation: int = 0


REBALANCING_STATES = frozenset({GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE})


def diff_snapshots(track: GroupTrack, current: GroupSnapshot) -> list[TimelineEvent]:
    """The events between ``track.last`` and ``current`` (oldest first), updating
    ``track``. The first snapshot of a group yields one event describing it."""
    events: list[TimelineEvent] = []
    previous = track.last
    now = current.time_s
    if previous is None:
        events.append(
            TimelineEvent(
                now,
                EventKind.STATE_CHANGED,
                f"first seen: {current.state}, {len(current.members)} member(s)",
                members=current.members,
            )
        )
    else:
        if previous.state != current.state:
            events.append(
                TimelineEvent(
                    now, EventKind.STATE_CHANGED, f"state {previous.state} → {current.state}"
                )
            )
        before = {member.member_id: member for member in previous.members}
        after = {member.member_id: member for member in current.members}
        for member_id in sorted(after.keys() - before.keys()):
            member = after[member_id]
            events.append(
                TimelineEvent(
                    now,
                    EventKind.MEMBER_JOINED,
                    f"member {member_id} joined ({member.client_id} from {member.client_host})",
                    members=(member,),
                )
            )
        for member_id in sorted(before.keys() - after.keys()):
            member = before[member_id]
            events.append(
                TimelineEvent(
                    now,
                    EventKind.MEMBER_LEFT,
                    f"member {member_id} left ({member.client_id} from {member.client_host})",
                    members=(member,),
                )
            )
    if current.generation is not None:
        events.extend(_reported_generation(track, previous, current))
        track.last = current
        return events
    if current.state in REBALANCING_STATES:
        track.rebalance_seen = True
    if current.state == GroupState.STABLE:
        stable_before = track.last_stable
        changed = stable_before is None or stable_before.layout() != current.layout()
        if changed or track.rebalance_seen:
            # Unseen generations: two Stable samples in a row that differ, with no
            # rebalancing state sampled between them.
            skipped = (
                previous is not None
                and previous.state == GroupState.STABLE
                and stable_before is previous
                and changed
            )
            old = track.generation
            track.generation += 1
            arrow = f"{old} → {track.generation}" if old else f"{track.generation}"
            summary = f"generation {arrow} ({current.protocol or 'no assignor'})"
            if skipped:
                summary += ": rebalanced between two samples, generations in between not seen"
            events.append(
                TimelineEvent(
                    now,
                    EventKind.GENERATION,
                    summary,
                    generation=track.generation,
                    skipped=skipped,
                    members=current.members,
                )
            )
        track.last_stable = current
        track.rebalance_seen = False
    elif current.state in GroupState.INACTIVE:
        track.last_stable = None
    track.last = current
    return events


def _reported_generation(
    track: GroupTrack, previous: GroupSnapshot | None, current: GroupSnapshot
) -> list[TimelineEvent]:
    """A GENERATION event when the reported generation moved on (on first sight, only
    when the group has members: an empty group's epoch opens nothing to show)."""
    assert current.generation is not None
    old, new = track.generation, current.generation
    track.generation = new
    if new == old or (previous is None and not current.members):
        return []
    skipped = previous is not None and old > 0 and new - old > 1
    arrow = f"{old} → {new}" if previous is not None and old else f"{new}"
    summary = f"generation {arrow} ({current.protocol or 'no assignor'})"
    if skipped:
        summary += f": {new - old - 1} epoch(s) in between not seen"
    return [
        TimelineEvent(
            current.time_s,
            EventKind.GENERATION,
            summary,
            generation=new,
            skipped=skipped,
            members=current.members,
        )
    ]
