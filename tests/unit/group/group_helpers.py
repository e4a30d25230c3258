"""A harness that drives a GroupCoordinator the way its runtime does: a manual clock,
tokens for requests, replies collected by token, appends committed to an in-memory log
(at once, or when the test says so, or failed on purpose)."""

from __future__ import annotations

import itertools
from random import Random
from typing import Any

from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.coordinator.api import Append, Effect, Record, Reply
from sluice.group.api import (
    OFFSET_COMMIT_MEMBER_EPOCH_VERSION,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetToCommit,
    Response,
    SyncGroupRequest,
    SyncGroupResponse,
)
from sluice.group.config import GroupConfig
from sluice.group.consumer_group import MetadataView
from sluice.group.coordinator import GroupCoordinator
from sluice.group.state import Group

START_MS = 1_700_000_000_000
SESSION_MS = 10_000
REBALANCE_MS = 30_000

CONFIG = GroupConfig(initial_rebalance_delay_ms=0)


def subscription(*topics: str, version: int = 0) -> bytes:
    """A Kafka ConsumerProtocolSubscription (v0: topics, null user data)."""
    parts = [version.to_bytes(2, "big"), len(topics).to_bytes(4, "big")]
    for topic in topics:
        encoded = topic.encode()
        parts += [len(encoded).to_bytes(2, "big"), encoded]
    parts.append((-1).to_bytes(4, "big", signed=True))
    return b"".join(parts)


DEFAULT_PROTOCOLS = (("range", subscription("orders")),)


class Harness:
    def __init__(self, config: GroupConfig = CONFIG, seed: int = 0) -> None:
        self.config = config
        self.seed = seed
        self.coordinator = GroupCoordinator(config, Random(seed))
        self.now_ms = START_MS
        self.replies: dict[int, Response] = {}
        self.held: list[Append] = []
        self.log: list[Record] = []
        self.auto_commit = True
        self._tokens = itertools.count(1)

    # ------------------------------------------------------------- plumbing

    def apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Reply):
                assert effect.token not in self.replies, f"token {effect.token} answered twice"
                self.replies[effect.token] = effect.response
            else:
                self.held.append(effect)
        self.check_invariants()
        if self.auto_commit:
            self.commit_appends()

    def check_invariants(self) -> None:
        for group_id in self.coordinator.group_ids():
            group = self.group(group_id)
            members = group.members
            state = group.state.value
            assert (group.leader_id is None) == (not members), group
            assert group.leader_id is None or group.leader_id in members, group
            for instance, member_id in group.static_members.items():
                assert members[member_id].group_instance_id == instance, group
            assert all(
                m.group_instance_id is None
                or group.static_members[m.group_instance_id] == m.member_id
                for m in members.values()
            ), group
            assert group.pending_sync_members <= set(members), group
            if state == "Empty":
                assert not members, group
            if state in ("CompletingRebalance", "Stable"):
                assert members and group.protocol_name is not None, group
            if state == "PreparingRebalance":
                assert group.join_deadline_ms is not None, group
            for member in members.values():
                if member.join_token is not None:
                    assert state in ("PreparingRebalance", "Stable"), group
                    assert member.join_token not in self.replies, "a parked token was answered"
                if member.sync_token is not None:
                    assert state == "CompletingRebalance", group
                    assert member.sync_token not in self.replies, "a parked token was answered"

    def commit_appends(self, error: ErrorCode | None = None, count: int | None = None) -> int:
        """Complete held appends in order (all, or the first ``count``)."""
        done = 0
        while self.held and (count is None or done < count):
            append = self.held.pop(0)
            if error is None:
                self.log.extend(append.records)
            self.apply(self.coordinator.append_completed(self.now_ms, append.append_id, error))
            done += 1
        return done

    def token(self) -> int:
        return next(self._tokens)

    def advance(self, ms: int) -> None:
        self.now_ms += ms
        self.apply(self.coordinator.poll(self.now_ms))

    def reply(self, token: int) -> Any:
        return self.replies.get(token)

    def group(self, group_id: str = "g") -> Group:
        group = self.coordinator.group(group_id)
        assert group is not None, f"no group {group_id}"
        return group

    def state(self, group_id: str = "g") -> str:
        group = self.coordinator.group(group_id)
        return "(none)" if group is None else group.state.value

    # ------------------------------------------------------------- requests

    def join(
        self,
        group_id: str = "g",
        member_id: str = "",
        *,
        instance: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] = DEFAULT_PROTOCOLS,
        protocol_type: str = "consumer",
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        client_id: str = "client",
        require_known: bool = False,
        topics: MetadataView | None = None,
    ) -> int:
        token = self.token()
        request = JoinGroupRequest(
            group_id=group_id,
            member_id=member_id,
            group_instance_id=instance,
            client_id=client_id,
            client_host="/127.0.0.1",
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            require_known_member_id=require_known,
        )
        self.apply(self.coordinator.join_group(self.now_ms, token, request, topics))
        return token

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group_id: str = "g",
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> int:
        token = self.token()
        request = SyncGroupRequest(
            group_id=group_id,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
            assignments=tuple((assignments or {}).items()),
            protocol_type=protocol_type,
            protocol_name=protocol_name,
        )
        self.apply(self.coordinator.sync_group(self.now_ms, token, request))
        return token

    def heartbeat(
        self, member_id: str, generation: int, *, group_id: str = "g", instance: str | None = None
    ) -> ErrorCode:
        token = self.token()
        request = HeartbeatRequest(group_id, generation, member_id, instance)
        self.apply(self.coordinator.heartbeat(self.now_ms, token, request))
        error: ErrorCode = self.replies[token].error  # type: ignore[union-attr]
        return error

    def leave(self, *members: MemberIdentity, group_id: str = "g") -> Any:
        token = self.token()
        request = LeaveGroupRequest(group_id, members)
        self.apply(self.coordinator.leave_group(self.now_ms, token, request))
        return self.replies[token]

    def commit(
        self,
        offsets: dict[tuple[str, int], int | OffsetToCommit],
        *,
        group_id: str = "g",
        member_id: str = "",
        generation: int = -1,
        instance: str | None = None,
        retention_ms: int = -1,
        api_version: int = OFFSET_COMMIT_MEMBER_EPOCH_VERSION,
    ) -> int:
        token = self.token()
        request = OffsetCommitRequest(
            group_id=group_id,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
            offsets=tuple(
                (TopicPartition(*tp), o if isinstance(o, OffsetToCommit) else OffsetToCommit(o))
                for tp, o in offsets.items()
            ),
            retention_ms=retention_ms,
            api_version=api_version,
        )
        self.apply(self.coordinator.commit_offsets(self.now_ms, token, request))
        return token

    def committed(self, group_id: str = "g") -> dict[TopicPartition, int]:
        response = self.coordinator.fetch_offsets(group_id, None)
        return {f.partition: f.offset for f in response.offsets}

    def delete_groups(self, *group_ids: str) -> int:
        token = self.token()
        self.apply(self.coordinator.delete_groups(self.now_ms, token, group_ids))
        return token

    def delete_offsets(self, group_id: str, *partitions: TopicPartition) -> int:
        token = self.token()
        self.apply(self.coordinator.delete_offsets(self.now_ms, token, group_id, partitions))
        return token

    # --------------------------------------------------------- whole flows

    def join_all(self, count: int, group_id: str = "g", **kwargs: Any) -> list[JoinGroupResponse]:
        """``count`` new members join (v3-style, no MEMBER_ID_REQUIRED); every join must be
        answered once the rebalance completes. Returns the answers in join order."""
        tokens = [self.join(group_id, client_id=f"c{i}", **kwargs) for i in range(count)]
        self.advance(0)
        responses = [self.reply(t) for t in tokens]
        assert all(r is not None for r in responses), f"unanswered joins: {responses}"
        return responses

    def stable_group(
        self, count: int, group_id: str = "g", **kwargs: Any
    ) -> list[JoinGroupResponse]:
        """``count`` members join and sync; the leader assigns ``b"assignment-<i>"``."""
        responses = self.join_all(count, group_id, **kwargs)
        assert all(r.error is ErrorCode.none for r in responses), responses
        generation = responses[0].generation_id
        leader = responses[0].leader
        assignments = {r.member_id: f"assignment-{i}".encode() for i, r in enumerate(responses)}
        sync_tokens = [
            self.sync(
                r.member_id,
                generation,
                assignments if r.member_id == leader else None,
                group_id=group_id,
            )
            for r in responses
        ]
        for token, r in zip(sync_tokens, responses, strict=True):
            answer = self.reply(token)
            assert isinstance(answer, SyncGroupResponse), answer
            assert answer.error is ErrorCode.none
            assert answer.assignment == assignments[r.member_id]
        assert self.state(group_id) == "Stable"
        return responses

    def replayed(self, now_ms: int | None = None) -> GroupCoordinator:
        """A new coordinator loaded from this harness's log."""
        coordinator = GroupCoordinator(self.config, Random(self.seed + 1))
        for key, value in self.log:
            coordinator.replay(key, value)
        coordinator.load_completed(self.now_ms if now_ms is None else now_ms)
        return coordinator
