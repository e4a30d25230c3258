"""One member of a classic consumer group, as its coordinator sees it.

A member is alive while it heartbeats (or commits) within its session timeout, except
while it waits: a parked JoinGroup keeps it alive until the rebalance ends (a member
that is new to the group only for NEW_MEMBER_JOIN_TIMEOUT_MS), and a parked SyncGroup
keeps it alive until the leader's assignment arrives. The group's rebalance and sync
deadlines bound those waits.

A member's fields are copied out in two shapes, each made here only: the member in its
group's metadata record (:func:`member_record`) and the member as a consumer group takes
it over in an upgrade (:func:`member_image`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.coordinator.api import RequestToken
from sluice.group.config import NEW_MEMBER_JOIN_TIMEOUT_MS
from sluice.group.migration import ClassicMemberImage, decode_assignment, decode_subscription
from sluice.group.records import MemberMetadataValue


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    """Set for static members (KIP-345): the id survives restarts of the client."""
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    """(protocol name, metadata) in the member's order of preference."""
    last_heartbeat_ms: int
    assignment: bytes = b""
    join_token: RequestToken | None = None
    """The member's JoinGroup waiting for the rebalance to finish."""
    sync_token: RequestToken | None = None
    """The member's SyncGroup waiting for the leader's assignment."""
    is_new: bool = False
    """Joined during the current rebalance and has not had a JoinGroup answer yet."""

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_token is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_token is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise AssertionError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise AssertionError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def liveness_deadline_ms(self) -> int | None:
        """When the member is dead unless it is heard from again; None while it waits."""
        if self.awaiting_join:
            return self.last_heartbeat_ms + NEW_MEMBER_JOIN_TIMEOUT_MS if self.is_new else None
        if self.awaiting_sync:
            return None
        return self.last_heartbeat_ms + self.session_timeout_ms


def member_record(member: Member, protocol: str | None, assignment: bytes) -> MemberMetadataValue:
    """The member in its group's metadata record: its subscription in the group's
    ``protocol`` (none before the group has one) and ``assignment``."""
    return MemberMetadataValue(
        member_id=member.member_id,
        group_instance_id=member.group_instance_id,
        client_id=member.client_id,
        client_host=member.client_host,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        session_timeout_ms=member.session_timeout_ms,
        subscription=member.metadata(protocol) if protocol is not None else b"",
        assignment=assignment,
    )


def member_image(member: Member, protocol: str) -> ClassicMemberImage:
    """The member of a classic group of consumers as a consumer group takes it over,
    with its subscription in the group's ``protocol`` and its last assignment decoded.
    Raises :class:`~sluice.group.migration.MalformedConsumerProtocol` for bytes that are
    not the embedded consumer protocol."""
    subscription = decode_subscription(_subscription_of(member, protocol))
    return ClassicMemberImage(
        member_id=member.member_id,
        instance_id=member.group_instance_id,
        client_id=member.client_id,
        client_host=member.client_host,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        session_timeout_ms=member.session_timeout_ms,
        protocols=member.protocols,
        subscribed_topic_names=subscription.topics,
        rack_id=subscription.rack_id,
        assignment=decode_assignment(member.assignment),
    )


def _subscription_of(member: Member, protocol: str) -> bytes:
    """The member's subscription in the group's protocol, or in its own first choice
    if it joined the current rebalance without that one (every protocol of a member
    embeds the same consumer subscription; Kafka fails the heartbeat then)."""
    for name, metadata in member.protocols:
        if name == protocol:
            return metadata
    return member.protocols[0][1]
