"""Membership of one consumer in a consumer group of the new protocol (KIP-848).

There is no join/sync dance and no client-side assignor: the member sends
ConsumerGroupHeartbeat to the group's coordinator every ``heartbeat_interval`` the
coordinator answers with, and the coordinator computes the assignment (with its
``server_assignor``) and tells each member its part, by topic id, moving partitions
between members one step at a time so that a partition never has two owners::

    epoch 0: subscription, rebalance timeout, rack, owned [] (a full request)
        │
        ▼
    member epoch N, heartbeat interval, assignment ──► reconcile:
        │                                               1. revoke what is no longer
        │                                                  assigned (commit, then
        │                                                  on_partitions_revoked)
        │                                               2. heartbeat at once with
        │                                                  the partitions now owned
        │                                               3. add what is new (its
        │                                                  committed offsets are
        │                                                  fetched by the fetcher),
        │                                                  on_partitions_assigned
        ▼
    epoch N every heartbeat interval: only what changed since the last request
        │ FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: the partitions are lost (no commit,
        │ on_partitions_lost or else on_partitions_revoked); join again with epoch 0
        ▼
    leave: revoke everything (with commit), then epoch -1 (-2 for a static member,
    whose place and partitions the coordinator keeps until its session ends)

A heartbeat after the join sends, as Kafka's clients do, nulls for the fields that did
not change since the last request answered (subscription, regular expression, server
assignor, rebalance timeout; the rack only when joining) and the owned partitions only
when they changed. After any error the next request is a full one again.

The member id is made by the client (a random UUID, ConsumerGroupHeartbeat v1); with v0
the coordinator chooses it. Topic ids are named with Metadata v10+
(:class:`~sluice.client.share_membership.TopicIds`, shared with share groups).

Offsets are committed and fetched with the member's id and epoch (OffsetCommit v9+,
OffsetFetch v9+), which the coordinator checks: an epoch it no longer has is answered
STALE_MEMBER_EPOCH, and the commit is retried once the next heartbeat has told the member
its current epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

from sluice.client.connection import BrokerConnection
from sluice.client.errors import ClientError, UnsupportedApiError
from sluice.client.groups import (
    COORDINATOR_RETRY_CODES,
    GroupCoordinators,
    OffsetAndMetadata,
    raise_for_group,
)
from sluice.client.membership import RebalanceError
from sluice.client.messages import Request, build_payload
from sluice.client.share_membership import TopicIds, new_member_id
from sluice.common.errors import ErrorCode, KafkaError
from sluice.common.ids import TopicPartition
from sluice.protocol.versions import ApiKey

JOIN_EPOCH = 0
"""The member epoch that joins (or rejoins) the group."""

LEAVE_EPOCH = -1
"""The member epoch that leaves the group."""

STATIC_LEAVE_EPOCH = -2
"""The member epoch with which a static member leaves for a while: the coordinator keeps
its partitions until its session ends, for a new process with the same instance id."""

UNCHANGED_REBALANCE_TIMEOUT = datetime.timedelta(milliseconds=-1)
"""RebalanceTimeoutMs -1: unchanged since the last request."""

HEARTBEAT_INTERVAL_MS_DEFAULT = 5000
"""Used until the coordinator says otherwise (Kafka's group.consumer.heartbeat.interval.ms)."""

HEARTBEAT_RETRY_S = 0.5
"""Pause before heartbeating again after a heartbeat that failed retriably."""

OFFSETS_VERSION_MIN = 9
"""OffsetCommit and OffsetFetch carry a member epoch, which the coordinator checks, from
v9; older versions are refused by Kafka for members of this protocol."""

OFFSETS_VERSION_MAX = 9
"""The highest OffsetCommit / OffsetFetch version whose fields this module writes."""

STALE_EPOCH_RETRIES_MAX = 5
"""Attempts of a commit or offset fetch answered STALE_MEMBER_EPOCH, each after the
next heartbeat, before it is given up as a :class:`RebalanceError`."""

T = TypeVar("T")

ENABLE_PROTOCOL_HINT = (
    "enable it on the broker with group.coordinator.rebalance.protocols=classic,consumer, "
    'or use group_protocol="classic"'
)

_LOST_CODES = frozenset({ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch})
_OFFSET_REBALANCE_CODES = frozenset(
    {ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch, ErrorCode.illegal_generation}
)

PartitionsCallback = Callable[[set[TopicPartition], bool], Awaitable[None]]
"""Called with partitions leaving the member and ``lost`` (True: no commit is possible)."""
AssignedCallback = Callable[[set[TopicPartition]], Awaitable[None]]


SUBSCRIBED_TOPIC_REGEX_BYTES_MAX = 32_767
"""Longest regular expression a heartbeat carries, in UTF-8 bytes (what the broker
accepts)."""


def check_broker_pattern(pattern: re.Pattern[str]) -> None:
    """Raise ValueError unless the coordinator can take ``pattern``: it is sent as text
    and evaluated there in RE2 syntax (Kafka's is RE2/J), so Python flags cannot travel
    with it and what RE2 refuses (backreferences, lookaround) is refused here at once."""
    if pattern.flags != re.compile(pattern.pattern).flags:
        raise ValueError(
            f"pattern {pattern.pattern!r} was compiled with flags, which the "
            'broker cannot apply with group_protocol="consumer": write them inline, e.g. (?i)'
        )
    if len(pattern.pattern.encode()) > SUBSCRIBED_TOPIC_REGEX_BYTES_MAX:
        raise ValueError(f"pattern is longer than {SUBSCRIBED_TOPIC_REGEX_BYTES_MAX} bytes")
    options = re2.Options()
    options.log_errors = False
    try:
        re2.compile(pattern.pattern, options)
    except re2.error as error:
        reason = error.args[0] if error.args else error
        if isinstance(reason, bytes):
            reason = reason.decode(errors="replace")
        raise ValueError(
            f"pattern {pattern.pattern!r} is not valid RE2 syntax, which the broker "
            f'evaluates with group_protocol="consumer" (as Kafka does): {reason}'
        ) from None


class ConsumerProtocolUnsupportedError(UnsupportedApiError):
    """The broker does not serve the consumer group protocol (KIP-848)."""


@dataclass(frozen=True, slots=True)
class _SentFields:
    """What the last answered heartbeat told the coordinator; a field equal to its
    value here is sent as null (unchanged)."""

    topics: frozenset[str] | None
    pattern: str | None
    server_assignor: str | None
    rebalance_timeout_ms: int
    owned: frozenset[TopicPartition]


class ConsumerMembership:
    """One member of a consumer group of the new protocol; :meth:`run` keeps it in."""

    def __init__(
        self,
        coordinators: GroupCoordinators,
        topic_ids: TopicIds,
        *,
        group_id: str,
        rebalance_timeout_ms: int,
        group_instance_id: str | None,
        rack_id: str | None,
        server_assignor: str | None,
        on_revoke: PartitionsCallback,
        on_assign: AssignedCallback,
    ) -> None:
        self.coordinators = coordinators
        self.topic_ids = topic_ids
        self.group_id = group_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.group_instance_id = group_instance_id
        self.rack_id = rack_id
        self.server_assignor = server_assignor
        self._on_revoke = on_revoke
        self._on_assign = on_assign
        self.member_id = new_member_id()
        """Made here (v1); with v0 the coordinator's answer replaces it."""
        self.member_epoch = JOIN_EPOCH
        self.heartbeat_interval_ms = HEARTBEAT_INTERVAL_MS_DEFAULT
        self.topics: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.assignment: set[TopicPartition] = set()
        """The partitions this member owns (reconciled)."""
        self._target: dict[uuid.UUID, frozenset[int]] | None = None
        """The last assignment the coordinator sent, by topic id, until it is reconciled
        (it may name topics whose names are not known yet)."""
        self._sent: _SentFields | None = None
        self._wake = asyncio.Event()
        self._heartbeat_lock = asyncio.Lock()
        self._heartbeated = asyncio.Event()
        """Set (and replaced) after each answered heartbeat: what a commit answered
        STALE_MEMBER_EPOCH waits for."""
        self._reconciling = False
        self._losses = 0
        """How many times the member lost its partitions (fenced or forgotten)."""
        self.stable = asyncio.Event()
        """Set once the member has reconciled an assignment from the coordinator (maybe
        empty); cleared while it must join again."""

    @property
    def generation_id(self) -> int:
        """The member epoch: what commits and transactions send in the generation's
        place."""
        return self.member_epoch

    # ── subscription ───────────────────────────────────────────────────────────────

    def subscribe(self, topics: Iterable[str], pattern: re.Pattern[str] | None) -> None:
        """Subscribe to ``topics``, or to the topics whose whole name matches
        ``pattern`` (its text is sent; the coordinator evaluates it as RE2)."""
        self.topics = frozenset(topics)
        self.pattern = pattern
        self._wake.set()

    def request_rejoin(self) -> None:
        """Heartbeat now."""
        self._wake.set()

    # ── the loop ───────────────────────────────────────────────────────────────────

    async def run(self) -> None:
        """Heartbeat until cancelled. Raises errors that no rejoin can cure."""
        while True:
            try:
                await self.heartbeat()
            except (KafkaError, ClientError) as e:
                if not e.retriable:
                    raise
                # The coordinator is away (moving, restarting): keep trying with full
                # requests; if the session ended meanwhile, the answer says so.
                self._sent = None
                await asyncio.sleep(HEARTBEAT_RETRY_S)
                continue
            if self._wake.is_set():
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.heartbeat_interval_ms / 1000):
                    await self._wake.wait()

    async def heartbeat(self) -> None:
        """One ConsumerGroupHeartbeat, and the reconciliation of the assignment it
        brings (with the heartbeat that acknowledges it)."""
        self._wake.clear()
        response = await self._send_heartbeat()
        if response is None:
            return
        if response.assignment is not None:
            self._target = {
                tp.topic_id: frozenset(int(p) for p in tp.partitions)
                for tp in response.assignment.topic_partitions
            }
        if self._target is not None:
            await self._reconcile()

    async def _send_heartbeat(self) -> Any | None:
        """Send one heartbeat and apply its epochs; None when the member lost its
        partitions and must join again."""
        async with self._heartbeat_lock:
            request, sent = self._request()
            response = await self.coordinators.call(self.group_id, self._attempt(request))
            code = int(response.error_code)
            if code in _LOST_CODES:
                await self._lose()
                return None
            if code != ErrorCode.none:
                self._sent = None
                _raise_heartbeat_error(code, response, self)
            self._sent = sent
            if response.member_id:
                self.member_id = str(response.member_id)
            self.member_epoch = int(response.member_epoch)
            interval_ms = int(response.heartbeat_interval.total_seconds() * 1000)
            if interval_ms > 0:
                self.heartbeat_interval_ms = interval_ms
            heartbeated, self._heartbeated = self._heartbeated, asyncio.Event()
            heartbeated.set()
            return response

    def _request(self) -> tuple[Request, _SentFields]:
        """The next heartbeat's fields: everything when joining or after an error,
        else only what changed since the last answered request."""
        last = None if self.member_epoch == JOIN_EPOCH else self._sent
        pattern = None if self.pattern is None else self.pattern.pattern
        topics = None if pattern is not None else self.topics
        owned = frozenset(self.assignment)
        sent = _SentFields(topics, pattern, self.server_assignor, self.rebalance_timeout_ms, owned)
        fields: dict[str, Any] = {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "member_epoch": self.member_epoch,
            "instance_id": self.group_instance_id,
            "rack_id": self.rack_id if last is None else None,
            "rebalance_timeout": (
                datetime.timedelta(milliseconds=self.rebalance_timeout_ms)
                if last is None or last.rebalance_timeout_ms != self.rebalance_timeout_ms
                else UNCHANGED_REBALANCE_TIMEOUT
            ),
            "server_assignor": (
                self.server_assignor
                if last is None or last.server_assignor != self.server_assignor
                else None
            ),
            "topic_partitions": (
                self._owned_by_topic_id(owned) if last is None or last.owned != owned else None
            ),
        }
        if last is None or last.topics != topics or last.pattern != pattern:
            # A regex subscription sends no names: the coordinator resolves the regex.
            fields["subscribed_topic_names"] = None if topics is None else sorted(topics)
            fields["subscribed_topic_regex"] = pattern
        else:
            fields["subscribed_topic_names"] = None
            fields["subscribed_topic_regex"] = None
        return Request(ApiKey.CONSUMER_GROUP_HEARTBEAT, fields), sent

    def _owned_by_topic_id(self, owned: Iterable[TopicPartition]) -> list[dict[str, Any]]:
        by_topic: dict[uuid.UUID, list[int]] = {}
        for tp in sorted(owned):
            topic_id = self.topic_ids.id_of(tp.topic)
            assert topic_id is not None, f"owned partition {tp} of a topic without an id"
            by_topic.setdefault(topic_id, []).append(tp.partition)
        return [{"topic_id": t, "partitions": p} for t, p in by_topic.items()]

    def _attempt(self, request: Request) -> Callable[[BrokerConnection], Awaitable[Any]]:
        async def attempt(connection: BrokerConnection) -> Any:
            if not connection.supports(ApiKey.CONSUMER_GROUP_HEARTBEAT):
                raise ConsumerProtocolUnsupportedError(
                    f"broker at {connection.address} does not serve the consumer group "
                    f"protocol (KIP-848, ConsumerGroupHeartbeat) for group "
                    f"{self.group_id!r}: {ENABLE_PROTOCOL_HINT}"
                )
            if request.fields["subscribed_topic_regex"] is not None and (
                connection.version_for(ApiKey.CONSUMER_GROUP_HEARTBEAT) < 1
            ):
                raise ConsumerProtocolUnsupportedError(
                    f"broker at {connection.address} serves ConsumerGroupHeartbeat v0 "
                    "only, which has no regular expression: subscribe by topic names"
                )
            response = await connection.request(request)
            code = int(response.error_code)
            if code in COORDINATOR_RETRY_CODES:
                _raise_heartbeat_error(code, response, self)
            return response

        return attempt

    # ── reconciliation ─────────────────────────────────────────────────────────────

    async def _reconcile(self) -> None:
        """Move the owned partitions to the coordinator's assignment: revoke, tell the
        coordinator, then add."""
        assert self._target is not None
        names = await self.topic_ids.names(self._target, self.topics)
        target = {
            TopicPartition(names[topic_id], partition)
            for topic_id, partitions in self._target.items()
            if topic_id in names
            for partition in partitions
        }
        if len(names) == len(self._target):
            self._target = None  # all named: reconciled now
        revoked = self.assignment - target
        added = target - self.assignment
        self._reconciling = True
        try:
            if revoked:
                self.assignment -= revoked
                await self._on_revoke(revoked, False)
            if added:
                self.assignment |= added
            if revoked or added:
                # Acknowledge at once: the coordinator moves the epoch (and gives the
                # revoked partitions to their new owners) only once it knows.
                self._wake.set()
            self.stable.set()
            if added:
                await self._on_assign(added)
        finally:
            self._reconciling = False

    async def _lose(self) -> None:
        """The coordinator fenced this member or forgot it: its partitions are lost (a
        commit would be refused); it joins again with epoch 0."""
        self.member_epoch = JOIN_EPOCH
        self._sent = None
        self._target = None
        self._losses += 1
        self.stable.clear()
        if self.assignment:
            lost, self.assignment = self.assignment, set()
            self._reconciling = True
            try:
                await self._on_revoke(lost, True)
            finally:
                self._reconciling = False
        self._wake.set()

    # ── leaving ────────────────────────────────────────────────────────────────────

    async def leave(self) -> None:
        """Give the partitions back (with commit) and leave: epoch -1, or -2 for a
        static member (the coordinator keeps its partitions for the next process with
        its instance id). Errors are ignored: the session timeout removes the member."""
        self.stable.clear()
        if self.assignment:
            revoked, self.assignment = self.assignment, set()
            await self._on_revoke(revoked, False)
        if self.member_epoch == JOIN_EPOCH:
            return  # never joined, or fenced: nothing to leave
        epoch = LEAVE_EPOCH if self.group_instance_id is None else STATIC_LEAVE_EPOCH
        async with self._heartbeat_lock:
            self.member_epoch = JOIN_EPOCH
            self._sent = None
            request = Request(
                ApiKey.CONSUMER_GROUP_HEARTBEAT,
                {
                    "group_id": self.group_id,
                    "member_id": self.member_id,
                    "member_epoch": epoch,
                    "instance_id": self.group_instance_id,
                    "rack_id": None,
                    "rebalance_timeout": UNCHANGED_REBALANCE_TIMEOUT,
                    "subscribed_topic_names": None,
                    "subscribed_topic_regex": None,
                    "server_assignor": None,
                    "topic_partitions": None,
                },
            )
            with contextlib.suppress(KafkaError, ClientError):
                await self.coordinators.call(self.group_id, self._attempt(request))

    # ── offsets, by member epoch ───────────────────────────────────────────────────

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """OffsetCommit v9+ of ``offsets`` with this member's id and epoch. Raises
        :class:`RebalanceError` when the coordinator no longer knows the member."""
        if not offsets:
            return
        await self._with_current_epoch(lambda: self._commit_once(offsets))

    async def fetch_committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets of ``partitions`` (absent: none committed),
        asked with this member's id and epoch (OffsetFetch v9+)."""
        wanted = list(partitions)
        if not wanted:
            return {}
        return await self._with_current_epoch(lambda: self._fetch_once(wanted))

    async def _with_current_epoch(self, once: Callable[[], Awaitable[T]]) -> T:
        """``once()``, again after the next heartbeat while it is answered
        STALE_MEMBER_EPOCH (the member's epoch moved on the coordinator first)."""
        for _ in range(STALE_EPOCH_RETRIES_MAX):
            try:
                return await once()
            except _StaleEpochError:
                if self._reconciling:
                    break  # called from a callback of the heartbeat task: no waiting
                heartbeated, losses = self._heartbeated, self._losses
                self._wake.set()
                try:
                    async with asyncio.timeout(self.coordinators.timeout_s):
                        await heartbeated.wait()
                except TimeoutError:
                    break
                if self._losses != losses:
                    break  # the partitions were lost meanwhile: nothing to commit for
        raise RebalanceError(
            f"group {self.group_id!r}: member epoch {self.member_epoch} is stale; the "
            "partitions may now belong to another member"
        )

    def _offsets_payload(self, connection: BrokerConnection, api_key: int, data: Any) -> Any:
        low, high = connection.broker_ranges.get(api_key, (0, -1))
        version = min(high, OFFSETS_VERSION_MAX)
        if version < max(low, OFFSETS_VERSION_MIN):
            raise ConsumerProtocolUnsupportedError(
                f"broker at {connection.address} serves {ApiKey(api_key).name} up to "
                f"v{high}; members of consumer groups (KIP-848) need "
                f"v{OFFSETS_VERSION_MIN}+: {ENABLE_PROTOCOL_HINT}"
            )
        return build_payload(api_key, version, data)

    async def _commit_once(self, offsets: Mapping[TopicPartition, int]) -> None:
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, []).append((tp.partition, offset))
        data = {
            "group_id": self.group_id,
            "generation_id_or_member_epoch": self.member_epoch,
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": index,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                        for index, offset in partitions
                    ],
                }
                for topic, partitions in by_topic.items()
            ],
        }

        async def attempt(connection: BrokerConnection) -> None:
            payload = self._offsets_payload(connection, ApiKey.OFFSET_COMMIT, data)
            response = await connection.request(payload)
            for topic in response.topics:
                for partition in topic.partitions:
                    what = f"commit of {topic.name}-{partition.partition_index}"
                    self._check_offsets_code(int(partition.error_code), what)

        await self.coordinators.call(self.group_id, attempt)

    async def _fetch_once(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        data = {
            "groups": [
                {
                    "group_id": self.group_id,
                    "member_id": self.member_id,
                    "member_epoch": self.member_epoch,
                    "topics": [{"name": t, "partition_indexes": p} for t, p in by_topic.items()],
                }
            ],
            "require_stable": True,
        }

        async def attempt(connection: BrokerConnection) -> dict[TopicPartition, OffsetAndMetadata]:
            payload = self._offsets_payload(connection, ApiKey.OFFSET_FETCH, data)
            response = await connection.request(payload)
            found: dict[TopicPartition, OffsetAndMetadata] = {}
            for group in response.groups:
                self._check_offsets_code(int(group.error_code), "committed offsets")
                for topic in group.topics or ():
                    for partition in topic.partitions:
                        code = int(partition.error_code)
                        if code == ErrorCode.unknown_topic_or_partition:
                            continue
                        self._check_offsets_code(code, "committed offset")
                        if partition.committed_offset >= 0:
                            tp = TopicPartition(topic.name, int(partition.partition_index))
                            found[tp] = OffsetAndMetadata(
                                int(partition.committed_offset),
                                int(partition.committed_leader_epoch),
                                partition.metadata or "",
                            )
            return found

        return await self.coordinators.call(self.group_id, attempt)

    def _check_offsets_code(self, code: int, what: str) -> None:
        if code == ErrorCode.stale_member_epoch:
            raise _StaleEpochError(what)
        if code in _OFFSET_REBALANCE_CODES:
            raise RebalanceError(
                f"{what} for group {self.group_id!r} refused ({ErrorCode(code).name}): the "
                "member left the group or was fenced; the partitions may now belong to "
                "another member"
            )
        raise_for_group(code, self.group_id, what)


class _StaleEpochError(Exception):
    """STALE_MEMBER_EPOCH: retried after the next heartbeat."""


def _raise_heartbeat_error(code: int, response: Any, member: ConsumerMembership) -> None:
    """Raise the heartbeat's error with what to do about it."""
    message = getattr(response, "error_message", None)
    detail = f": {message}" if message else ""
    group = member.group_id
    if code == ErrorCode.unsupported_version:
        raise ConsumerProtocolUnsupportedError(
            f"the coordinator of group {group!r} does not serve the consumer group protocol "
            f"(KIP-848){detail}; {ENABLE_PROTOCOL_HINT}"
        )
    if code == ErrorCode.unreleased_instance_id:
        raise_for_group(
            code,
            group,
            f"group_instance_id {member.group_instance_id!r} is still held by another "
            "member that has not left: close it, or wait until its session ends" + detail,
        )
    if code == ErrorCode.group_max_size_reached:
        raise_for_group(
            code,
            group,
            "the group has as many members as the broker's group.consumer.max.size allows" + detail,
        )
    if code == ErrorCode.invalid_regular_expression:
        raise_for_group(
            code,
            group,
            "the broker refused the subscription's regular expression (RE2 syntax, as "
            f"Kafka's RE2/J){detail}",
        )
    if code == ErrorCode.unsupported_assignor:
        raise_for_group(
            code,
            group,
            f"group_remote_assignor {member.server_assignor!r} is not one the broker "
            f"has (group.consumer.assignors){detail}",
        )
    raise_for_group(code, group, f"consumer group heartbeat{detail}")
