"""Groups of the consumer group protocol (KIP-848) as an administrator sees them:
ConsumerGroupDescribe (API 69) read into the same :class:`GroupDescription` as a classic
group, with the group's epochs and each member's epoch, subscription, current and
target assignment.

DescribeGroups describes classic groups only (a consumer group is answered Dead, or
GROUP_ID_NOT_FOUND "not a classic group"), so :meth:`Admin.describe_groups
<sluice.client.admin.Admin.describe_groups>` asks the coordinator of each group it was
told is Dead::

    DescribeGroups says Dead
        │
        ├─ the coordinator lists ConsumerGroupDescribe ──► ConsumerGroupDescribe
        │     GROUP_ID_NOT_FOUND: no consumer group either, still Dead
        │
        └─ it does not (a broker without the protocol enabled, an older Kafka)
              ──► ListGroups: listed with type ``consumer``? its state, members unknown
                  (``members_described`` False); else still Dead

Only ConsumerGroupDescribe's current and target assignments are shown: its schema has no
field for the partitions a member has still to revoke, which show instead as the other
member's *pending assignment* (in its target, not yet assigned to it).
"""

from __future__ import annotations

from typing import Any

from sluice.client.connection import BrokerConnection
from sluice.client.groups import (
    CONSUMER_GROUP_TYPE,
    CONSUMER_PROTOCOL_TYPE,
    GroupDescription,
    GroupState,
    MemberDescription,
    raise_for_group,
)
from sluice.client.messages import Request
from sluice.common import errors
from sluice.common.errors import ErrorCode
from sluice.protocol.versions import ApiKey

LIST_GROUPS_TYPE_VERSION = 5
"""The first ListGroups version whose answer names each group's type."""


class ConsumerGroupState:
    """The states of a consumer group (KIP-848) as ConsumerGroupDescribe and ListGroups
    spell them."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    """The group epoch moved; the coordinator has not computed the new target yet."""
    RECONCILING = "Reconciling"
    """Some member has not reached its target at the assignment epoch."""
    STABLE = "Stable"


async def describe_consumer_group(
    connection: BrokerConnection, group_id: str
) -> GroupDescription | None:
    """``group_id`` as the coordinator at ``connection`` describes it as a consumer group,
    or None when it has no consumer group of that id. Raises the group's other errors
    (and the coordinator errors, for the caller's retries)."""
    if ApiKey.CONSUMER_GROUP_DESCRIBE not in connection.versions:
        return await _listed_consumer_group(connection, group_id)
    response = await connection.request(
        Request(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            {"group_ids": [group_id], "include_authorized_operations": False},
        )
    )
    for described in response.groups:
        if described.group_id != group_id:
            continue
        if described.error_code == ErrorCode.group_id_not_found:
            return None
        raise_for_group(described.error_code, group_id, described.error_message)
        return consumer_group_description(described)
    raise errors.UnknownServerError(
        f"ConsumerGroupDescribe answer from broker at {connection.address} does not "
        f"mention group {group_id!r}"
    )


async def _listed_consumer_group(
    connection: BrokerConnection, group_id: str
) -> GroupDescription | None:
    """The type and state ListGroups gives ``group_id``, when it is a consumer group."""
    if connection.versions.get(ApiKey.LIST_GROUPS, -1) < LIST_GROUPS_TYPE_VERSION:
        return None  # a broker that cannot name types has no consumer groups
    response = await connection.request(
        Request(ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": [CONSUMER_GROUP_TYPE]})
    )
    raise_for_group(response.error_code, group_id, "listing the coordinator's groups")
    for listed in response.groups:
        if listed.group_id == group_id and str(listed.group_type).lower() == CONSUMER_GROUP_TYPE:
            return GroupDescription(
                group_id=group_id,
                state=listed.group_state or GroupState.UNKNOWN,
                protocol_type=listed.protocol_type,
                protocol="",
                group_type=CONSUMER_GROUP_TYPE,
                members_described=False,
            )
    return None


def _partitions(assignment: Any) -> dict[str, list[int]]:
    """Topic name → sorted partitions of a ConsumerGroupDescribe assignment."""
    found: dict[str, set[int]] = {}
    for topic in assignment.topic_partitions:
        found.setdefault(str(topic.topic_name), set()).update(int(p) for p in topic.partitions)
    return {topic: sorted(partitions) for topic, partitions in sorted(found.items())}


def consumer_group_description(described: Any) -> GroupDescription:
    """One group of a ConsumerGroupDescribe answer, members sorted by id."""
    members = [
        MemberDescription(
            member_id=member.member_id,
            group_instance_id=member.instance_id,
            client_id=member.client_id,
            client_host=member.client_host,
            assignment=_partitions(member.assignment),
            member_epoch=int(member.member_epoch),
            rack_id=member.rack_id,
            subscribed_topics=tuple(sorted(str(t) for t in member.subscribed_topic_names)),
            subscribed_topic_regex=member.subscribed_topic_regex,
            target_assignment=_partitions(member.target_assignment),
        )
        for member in described.members
    ]
    return GroupDescription(
        group_id=described.group_id,
        state=described.group_state,
        protocol_type=CONSUMER_PROTOCOL_TYPE,
        protocol=described.assignor_name,
        members=sorted(members, key=lambda member: member.member_id),
        group_type=CONSUMER_GROUP_TYPE,
        group_epoch=int(described.group_epoch),
        assignment_epoch=int(described.assignment_epoch),
    )
