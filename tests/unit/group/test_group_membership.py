"""The classic group protocol's membership: join, sync, heartbeat, leave, timeouts,
static members, protocol selection and limits — the state machine driven by a manual
clock and seeded member ids."""

from __future__ import annotations

import dataclasses

from group_helpers import (
    CONFIG,
    REBALANCE_MS,
    SESSION_MS,
    Harness,
    subscription,
)

from sluice.common.errors import ErrorCode
from sluice.group.api import JoinGroupResponse, MemberIdentity, SyncGroupResponse
from sluice.group.config import NEW_MEMBER_JOIN_TIMEOUT_MS, GroupConfig
from sluice.group.coordinator import GroupCoordinator

OK = ErrorCode.none


def test_one_member_joins_syncs_and_heartbeats(harness: Harness) -> None:
    token = harness.join()
    assert harness.reply(token) is None, "the first join waits for the initial delay"
    assert harness.state() == "PreparingRebalance"
    harness.advance(0)
    joined: JoinGroupResponse = harness.reply(token)
    assert joined.error is OK
    assert joined.generation_id == 1
    assert joined.leader == joined.member_id
    assert joined.member_id.startswith("client-")
    assert joined.protocol_name == "range"
    assert [m.member_id for m in joined.members] == [joined.member_id]
    assert harness.state() == "CompletingRebalance"
    assert harness.heartbeat(joined.member_id, 1) is OK

    sync = harness.sync(joined.member_id, 1, {joined.member_id: b"mine"})
    synced: SyncGroupResponse = harness.reply(sync)
    assert synced == SyncGroupResponse(OK, b"mine")
    assert harness.state() == "Stable"
    assert harness.heartbeat(joined.member_id, 1) is OK
    assert harness.heartbeat(joined.member_id, 0) is ErrorCode.illegal_generation
    assert harness.heartbeat("stranger", 1) is ErrorCode.unknown_member_id
    assert harness.heartbeat("stranger", 1, group_id="nope") is ErrorCode.unknown_member_id
    # A later SyncGroup (say, a retry) gets the same assignment at once.
    assert harness.reply(harness.sync(joined.member_id, 1)) == SyncGroupResponse(OK, b"mine")


def test_three_members_get_one_generation_and_their_own_assignments(harness: Harness) -> None:
    responses = harness.stable_group(3)
    leader = responses[0].leader
    assert {r.generation_id for r in responses} == {1}
    assert {r.leader for r in responses} == {leader}
    assert [len(r.members) for r in responses].count(3) == 1, "only the leader gets members"
    assert len({r.member_id for r in responses}) == 3
    for r in responses:
        assert harness.heartbeat(r.member_id, 1) is OK


def test_followers_sync_waits_for_the_leader_and_the_log(harness: Harness) -> None:
    responses = harness.join_all(2)
    leader, follower = sorted(responses, key=lambda r: r.member_id != r.leader)
    follower_sync = harness.sync(follower.member_id, 1)
    assert harness.reply(follower_sync) is None
    harness.auto_commit = False
    leader_sync = harness.sync(leader.member_id, 1, {follower.member_id: b"f"})
    assert harness.reply(leader_sync) is None, "answered only once the assignment is durable"
    assert harness.state() == "CompletingRebalance"
    harness.commit_appends()
    assert harness.reply(follower_sync) == SyncGroupResponse(OK, b"f")
    assert harness.reply(leader_sync) == SyncGroupResponse(OK, b""), "absent: empty"
    assert harness.state() == "Stable"


def test_failed_assignment_write_answers_everyone_and_rebalances(harness: Harness) -> None:
    responses = harness.join_all(2)
    leader, follower = sorted(responses, key=lambda r: r.member_id != r.leader)
    follower_sync = harness.sync(follower.member_id, 1)
    harness.auto_commit = False
    leader_sync = harness.sync(leader.member_id, 1, {follower.member_id: b"f"})
    harness.commit_appends(ErrorCode.not_leader_or_follower)
    assert harness.reply(leader_sync).error is ErrorCode.not_coordinator
    assert harness.reply(follower_sync).error is ErrorCode.not_coordinator
    assert harness.state() == "PreparingRebalance"


def test_member_id_required_flow(harness: Harness) -> None:
    first = harness.join(require_known=True)
    answer: JoinGroupResponse = harness.reply(first)
    assert answer.error is ErrorCode.member_id_required
    assert answer.member_id.startswith("client-")
    assert harness.state() == "Empty", "a pending member does not start a rebalance"
    second = harness.join(member_id=answer.member_id, require_known=True)
    harness.advance(0)
    joined: JoinGroupResponse = harness.reply(second)
    assert joined.error is OK
    assert joined.member_id == answer.member_id
    assert joined.generation_id == 1


def test_pending_member_lapses_after_its_session_timeout(harness: Harness) -> None:
    answer: JoinGroupResponse = harness.reply(harness.join(require_known=True))
    harness.advance(SESSION_MS)
    assert harness.coordinator.group("g") is None, "the group held nothing else"
    late = harness.join(member_id=answer.member_id, require_known=True)
    assert harness.reply(late).error is ErrorCode.unknown_member_id


def test_a_pending_member_holds_the_rebalance_until_it_joins_or_lapses(
    harness: Harness,
) -> None:
    (a,) = harness.stable_group(1)
    pending: JoinGroupResponse = harness.reply(harness.join(require_known=True))
    rejoin = harness.join(member_id=a.member_id)
    harness.advance(0)
    assert harness.reply(rejoin) is None, "waiting for the pending member"
    harness.advance(SESSION_MS)
    assert harness.reply(rejoin).generation_id == 2
    assert pending.member_id not in harness.group().members


def test_new_member_triggers_rebalance_and_old_member_rejoins(harness: Harness) -> None:
    (a,) = harness.stable_group(1)
    newcomer = harness.join(client_id="b")
    assert harness.state() == "PreparingRebalance"
    assert harness.heartbeat(a.member_id, 1) is ErrorCode.rebalance_in_progress
    assert harness.reply(harness.sync(a.member_id, 1)).error is ErrorCode.rebalance_in_progress
    rejoin = harness.join(member_id=a.member_id)
    a2: JoinGroupResponse = harness.reply(rejoin)
    b: JoinGroupResponse = harness.reply(newcomer)
    assert a2.generation_id == b.generation_id == 2
    assert a2.leader == a.member_id, "the leader keeps its role when it rejoins"
    assert len(a2.members) == 2 and b.members == ()


def test_leave_triggers_rebalance(harness: Harness) -> None:
    a, b = harness.stable_group(2)
    response = harness.leave(MemberIdentity(b.member_id))
    assert response.error is OK
    assert [m.error for m in response.members] == [OK]
    assert harness.state() == "PreparingRebalance"
    rejoin = harness.join(member_id=a.member_id)
    assert harness.reply(rejoin).generation_id == 2
    assert list(harness.group().members) == [a.member_id]


def test_last_member_leaving_empties_the_group_and_stores_it(harness: Harness) -> None:
    (a,) = harness.stable_group(1)
    harness.leave(MemberIdentity(a.member_id))
    assert harness.state() == "Empty"
    assert harness.group().generation_id == 2
    replayed = harness.replayed()
    group = replayed.group("g")
    assert group is not None and group.state.value == "Empty"
    assert group.generation_id == 2
    assert group.protocol_type == "consumer"


def test_leave_errors_and_batches(harness: Harness) -> None:
    a, b, c = harness.stable_group(3)
    response = harness.leave(
        MemberIdentity(a.member_id),
        MemberIdentity("ghost"),
        MemberIdentity(c.member_id, "not-static"),
    )
    assert [m.error for m in response.members] == [
        OK,
        ErrorCode.unknown_member_id,
        ErrorCode.unknown_member_id,
    ]
    unknown_group = harness.leave(MemberIdentity("x"), group_id="elsewhere")
    assert unknown_group.error is OK
    assert [m.error for m in unknown_group.members] == [ErrorCode.unknown_member_id]
    assert set(harness.group().members) == {b.member_id, c.member_id}


def test_session_expiry_removes_member_and_rebalances(harness: Harness) -> None:
    a, b = harness.stable_group(2)
    harness.advance(SESSION_MS - 1)
    assert harness.heartbeat(a.member_id, 1) is OK
    harness.advance(1)
    assert b.member_id not in harness.group().members
    assert harness.state() == "PreparingRebalance"
    rejoin = harness.join(member_id=a.member_id)
    assert harness.reply(rejoin).generation_id == 2
    assert harness.heartbeat(b.member_id, 1) is ErrorCode.unknown_member_id


def test_rebalance_timeout_removes_members_that_do_not_rejoin(harness: Harness) -> None:
    a, b, c = harness.stable_group(3)
    rejoin_a = harness.join(member_id=a.member_id)
    for _ in range(REBALANCE_MS // 3_000 - 1):
        harness.advance(3_000)
        # b keeps heartbeating but never rejoins; c goes silent.
        harness.heartbeat(b.member_id, 1)
    assert harness.reply(rejoin_a) is None
    assert c.member_id not in harness.group().members, "c's session ran out first"
    harness.advance(3_000)
    answer: JoinGroupResponse = harness.reply(rejoin_a)
    assert answer.generation_id == 2
    assert [m.member_id for m in answer.members] == [a.member_id]
    assert harness.heartbeat(b.member_id, 1) is ErrorCode.unknown_member_id


def test_members_that_never_sync_are_removed(harness: Harness) -> None:
    a, b = harness.join_all(2)
    leader = a if a.member_id == a.leader else b
    other = b if leader is a else a
    harness.sync(leader.member_id, 1, {})
    assert harness.state() == "Stable"
    for _ in range(REBALANCE_MS // 3_000 - 1):
        harness.advance(3_000)
        assert harness.heartbeat(leader.member_id, 1) is OK
        assert harness.heartbeat(other.member_id, 1) is OK  # alive, but never syncs
    harness.advance(2_999)
    assert other.member_id in harness.group().members
    harness.advance(1)
    assert other.member_id not in harness.group().members
    assert harness.state() == "PreparingRebalance"


def test_initial_rebalance_delay_waits_and_extends_while_members_arrive(seed: int) -> None:
    config = GroupConfig(initial_rebalance_delay_ms=3_000)
    harness = Harness(config, seed)
    first = harness.join(client_id="a", rebalance_ms=10_000)
    harness.advance(2_999)
    assert harness.reply(first) is None
    second = harness.join(client_id="b", rebalance_ms=10_000)
    harness.advance(1)  # 3 s: a new member came, wait another 3 s
    assert harness.reply(first) is None
    third = harness.join(client_id="c", rebalance_ms=10_000)
    harness.advance(3_000)  # 6 s: again
    assert harness.reply(first) is None
    harness.advance(2_999)
    assert harness.reply(first) is None
    harness.advance(1)  # 9 s, nobody new
    answers = [harness.reply(t) for t in (first, second, third)]
    assert {a.generation_id for a in answers} == {1}
    assert len(answers[0].members) == 3


def test_initial_rebalance_delay_is_capped_by_the_rebalance_timeout(seed: int) -> None:
    harness = Harness(GroupConfig(initial_rebalance_delay_ms=3_000), seed)
    first = harness.join(client_id="a", rebalance_ms=7_000)
    for _ in range(6):
        harness.advance(1_000)
        harness.join(client_id="x", rebalance_ms=7_000)
    harness.advance(999)
    assert harness.reply(first) is None
    harness.advance(1)
    assert harness.reply(first).generation_id == 1, "7 s = the rebalance timeout"


def test_protocol_selection(harness: Harness) -> None:
    tokens = [
        harness.join(protocols=(("range", b"a"), ("roundrobin", b"a"), ("sticky", b"a"))),
        harness.join(protocols=(("roundrobin", b"b"), ("sticky", b"b"))),
        harness.join(protocols=(("sticky", b"c"), ("roundrobin", b"c"))),
        harness.join(protocols=(("roundrobin", b"d"), ("sticky", b"d"), ("range", b"d"))),
    ]
    harness.advance(0)
    answers = [harness.reply(t) for t in tokens]
    # Candidates: roundrobin and sticky. Votes: rr, rr, sticky, rr.
    assert {a.protocol_name for a in answers} == {"roundrobin"}
    leader = next(a for a in answers if a.members)
    assert [m.metadata for m in leader.members] == [b"a", b"b", b"c", b"d"]


def test_protocol_selection_ties_go_to_the_first_vote(harness: Harness) -> None:
    tokens = [
        harness.join(protocols=(("sticky", b""), ("range", b""))),
        harness.join(protocols=(("range", b""), ("sticky", b""))),
    ]
    harness.advance(0)
    assert {harness.reply(t).protocol_name for t in tokens} == {"sticky"}


def test_inconsistent_protocols_are_refused(harness: Harness) -> None:
    harness.stable_group(1)
    wrong_name = harness.join(protocols=(("roundrobin", b""),))
    assert harness.reply(wrong_name).error is ErrorCode.inconsistent_group_protocol
    wrong_type = harness.join(protocol_type="connect")
    assert harness.reply(wrong_type).error is ErrorCode.inconsistent_group_protocol
    empty = harness.join(group_id="fresh", protocols=())
    assert harness.reply(empty).error is ErrorCode.inconsistent_group_protocol
    assert harness.coordinator.group("fresh") is None


def test_session_timeout_bounds_and_group_id(harness: Harness) -> None:
    low = harness.join(session_ms=CONFIG.session_timeout_ms_min - 1)
    high = harness.join(session_ms=CONFIG.session_timeout_ms_max + 1)
    nameless = harness.join(group_id="")
    assert harness.reply(low).error is ErrorCode.invalid_session_timeout
    assert harness.reply(high).error is ErrorCode.invalid_session_timeout
    assert harness.reply(nameless).error is ErrorCode.invalid_group_id
    assert harness.coordinator.group_ids() == []
    unknown = harness.join(member_id="who")
    assert harness.reply(unknown).error is ErrorCode.unknown_member_id


def test_group_size_cap(seed: int) -> None:
    harness = Harness(dataclasses.replace(CONFIG, group_size_max=2), seed)
    a, b = harness.stable_group(2)
    third = harness.join(client_id="c")
    answer: JoinGroupResponse = harness.reply(third)
    assert answer.error is ErrorCode.group_max_size_reached
    assert answer.member_id == ""
    pending = harness.join(client_id="c", require_known=True)
    assert harness.reply(pending).error is ErrorCode.group_max_size_reached
    # Members already in keep their seat.
    assert harness.heartbeat(a.member_id, 1) is OK
    rejoin = harness.join(member_id=a.member_id)
    harness.join(member_id=b.member_id)
    assert harness.reply(rejoin).generation_id == 2


def test_group_size_cap_during_a_rebalance_counts_joined_members(seed: int) -> None:
    harness = Harness(dataclasses.replace(CONFIG, group_size_max=2), seed)
    a, b = harness.stable_group(2)
    rejoin = harness.join(member_id=a.member_id)  # rebalance; b has not joined yet
    newcomer = harness.join(client_id="n")  # takes the second seat
    assert harness.reply(newcomer) is None
    late = harness.join(member_id=b.member_id)
    assert harness.reply(late).error is ErrorCode.group_max_size_reached
    assert b.member_id not in harness.group().members
    assert harness.reply(rejoin).generation_id == 2


def test_same_follower_join_in_stable_returns_current_generation(harness: Harness) -> None:
    a, b = harness.stable_group(2)
    follower = b if a.member_id == a.leader else a
    again = harness.join(member_id=follower.member_id)
    answer: JoinGroupResponse = harness.reply(again)
    assert (answer.error, answer.generation_id, answer.members) == (OK, 1, ())
    assert harness.state() == "Stable"


def test_leader_join_in_stable_rebalances(harness: Harness) -> None:
    a, b = harness.stable_group(2)
    leader = a if a.member_id == a.leader else b
    harness.join(member_id=leader.member_id)
    assert harness.state() == "PreparingRebalance"


def test_changed_metadata_rebalances(harness: Harness) -> None:
    a, b = harness.stable_group(2)
    follower = b if a.member_id == a.leader else a
    harness.join(member_id=follower.member_id, protocols=(("range", subscription("x")),))
    assert harness.state() == "PreparingRebalance"


def test_superseded_join_is_answered(harness: Harness) -> None:
    a, b = harness.stable_group(2)
    first = harness.join(member_id=a.member_id)
    second = harness.join(member_id=a.member_id)
    assert harness.reply(first).error is ErrorCode.rebalance_in_progress
    harness.join(member_id=b.member_id)
    assert harness.reply(second).generation_id == 2


def test_new_member_that_vanishes_is_dropped_after_the_join_timeout(seed: int) -> None:
    harness = Harness(CONFIG, seed)
    (a,) = harness.stable_group(1, rebalance_ms=10 * NEW_MEMBER_JOIN_TIMEOUT_MS)
    newcomer = harness.join(client_id="gone", rebalance_ms=10 * NEW_MEMBER_JOIN_TIMEOUT_MS)
    for _ in range(NEW_MEMBER_JOIN_TIMEOUT_MS // 5_000 - 1):
        harness.advance(5_000)
        harness.heartbeat(a.member_id, 1)
    assert harness.reply(newcomer) is None
    harness.advance(5_000)
    assert harness.reply(newcomer).error is ErrorCode.unknown_member_id


# ------------------------------------------------------------------ static members


def test_static_member_rejoin_in_stable_gets_new_id_without_rebalance(harness: Harness) -> None:
    responses = harness.stable_group(2, instance=None)
    token = harness.join(instance="i-1", client_id="s")
    # Adding a static member is an ordinary join: a rebalance.
    for r in responses:
        harness.join(member_id=r.member_id)
    static: JoinGroupResponse = harness.reply(token)
    assert static.generation_id == 2
    leader = next(r for r in [static, *responses] if r.member_id == static.leader)
    assignments = {m: m.encode() for m in harness.group().members}
    for member_id in harness.group().members:
        harness.sync(member_id, 2, assignments if member_id == leader.member_id else None)
    assert harness.state() == "Stable"
    records_before = len(harness.log)

    restarted = harness.join(instance="i-1", client_id="s")
    answer: JoinGroupResponse = harness.reply(restarted)
    assert answer.error is OK
    assert answer.generation_id == 2, "no rebalance"
    assert answer.member_id != static.member_id
    assert answer.member_id.startswith("i-1-")
    assert harness.state() == "Stable"
    assert len(harness.log) == records_before + 1, "the new member id is stored"
    # The old id is fenced, the new one works and keeps the assignment.
    assert harness.heartbeat(static.member_id, 2, instance="i-1") is ErrorCode.fenced_instance_id
    assert harness.heartbeat(answer.member_id, 2, instance="i-1") is OK
    synced = harness.reply(harness.sync(answer.member_id, 2, instance="i-1"))
    assert synced == SyncGroupResponse(OK, static.member_id.encode())
    fenced_sync = harness.reply(harness.sync(static.member_id, 2, instance="i-1"))
    assert fenced_sync.error is ErrorCode.fenced_instance_id
    fenced_commit = harness.reply(
        harness.commit(
            {("t", 0): 1},
            member_id=static.member_id,
            generation=2,
            instance="i-1",
        )
    )
    assert [e for _, e in fenced_commit.errors] == [ErrorCode.fenced_instance_id]


def test_static_leader_rejoin_keeps_the_old_leader_id_in_the_answer(harness: Harness) -> None:
    token = harness.join(instance="lead", client_id="s")
    harness.advance(0)
    first: JoinGroupResponse = harness.reply(token)
    harness.sync(first.member_id, 1, {first.member_id: b"x"}, instance="lead")
    again: JoinGroupResponse = harness.reply(harness.join(instance="lead", client_id="s"))
    assert again.leader == first.member_id != again.member_id
    assert harness.group().leader_id == again.member_id
    assert [m.member_id for m in again.members] == [again.member_id]


def test_static_member_rejoin_failing_to_store_is_reverted(harness: Harness) -> None:
    token = harness.join(instance="i", client_id="s")
    harness.advance(0)
    first: JoinGroupResponse = harness.reply(token)
    harness.sync(first.member_id, 1, {}, instance="i")
    harness.auto_commit = False
    again = harness.join(instance="i", client_id="s")
    harness.commit_appends(ErrorCode.not_enough_replicas)
    answer: JoinGroupResponse = harness.reply(again)
    assert answer.error is ErrorCode.coordinator_not_available
    assert harness.heartbeat(first.member_id, 1, instance="i") is OK


def test_static_member_rejoin_that_changes_the_protocol_rebalances(harness: Harness) -> None:
    token = harness.join(instance="i", client_id="s", protocols=(("range", b""), ("sticky", b"")))
    harness.advance(0)
    first: JoinGroupResponse = harness.reply(token)
    assert first.protocol_name == "range"
    harness.sync(first.member_id, 1, {}, instance="i")
    changed = harness.join(instance="i", client_id="s", protocols=(("sticky", b""), ("range", b"")))
    answer: JoinGroupResponse = harness.reply(changed)
    assert (answer.generation_id, answer.protocol_name) == (2, "sticky")
    assert answer.member_id != first.member_id


def test_static_member_cannot_switch_to_a_protocol_nobody_supports(harness: Harness) -> None:
    token = harness.join(instance="i", client_id="s")
    harness.advance(0)
    first: JoinGroupResponse = harness.reply(token)
    harness.sync(first.member_id, 1, {}, instance="i")
    changed = harness.join(instance="i", client_id="s", protocols=(("sticky", b""),))
    assert harness.reply(changed).error is ErrorCode.inconsistent_group_protocol
    assert harness.heartbeat(first.member_id, 1, instance="i") is OK


def test_static_member_that_does_not_rejoin_stays_through_a_rebalance(harness: Harness) -> None:
    # A long session: the static member's client restarts and is back within it.
    static_token = harness.join(instance="i", client_id="s", session_ms=2 * REBALANCE_MS)
    dynamic_token = harness.join(client_id="d")
    harness.advance(0)
    static: JoinGroupResponse = harness.reply(static_token)
    dynamic: JoinGroupResponse = harness.reply(dynamic_token)
    leader = static if static.member_id == static.leader else dynamic
    harness.sync(leader.member_id, 1, {static.member_id: b"s", dynamic.member_id: b"d"})
    harness.sync(static.member_id if leader is dynamic else dynamic.member_id, 1)
    # The dynamic member changes its subscription; the static one is offline.
    rejoin = harness.join(member_id=dynamic.member_id, protocols=(("range", subscription("x")),))
    harness.advance(REBALANCE_MS - 1)
    assert harness.reply(rejoin) is None
    harness.advance(1)
    answer: JoinGroupResponse = harness.reply(rejoin)
    assert answer.generation_id == 2
    assert set(harness.group().members) == {static.member_id, dynamic.member_id}
    assert answer.leader == dynamic.member_id, "a member that joined leads"


def test_static_member_removed_by_instance_id(harness: Harness) -> None:
    token = harness.join(instance="i", client_id="s")
    harness.advance(0)
    first: JoinGroupResponse = harness.reply(token)
    response = harness.leave(MemberIdentity("", "i"), MemberIdentity("", "other"))
    assert [m.error for m in response.members] == [OK, ErrorCode.unknown_member_id]
    assert first.member_id not in harness.group().members
    assert harness.state() == "Empty"


def test_static_member_leave_with_wrong_member_id_is_fenced(harness: Harness) -> None:
    token = harness.join(instance="i", client_id="s")
    harness.advance(0)
    harness.reply(token)
    response = harness.leave(MemberIdentity("old-id", "i"))
    assert [m.error for m in response.members] == [ErrorCode.fenced_instance_id]


def test_member_ids_are_reproducible_from_the_seed(seed: int) -> None:
    def ids() -> list[str]:
        harness = Harness(CONFIG, seed)
        return [r.member_id for r in harness.stable_group(3)]

    assert ids() == ids()


def test_the_coordinator_is_deterministic(seed: int) -> None:
    """The same calls at the same times produce the same effects and records."""

    def run() -> tuple[list[object], list[object]]:
        harness = Harness(CONFIG, seed)
        a, b, _ = harness.stable_group(3)
        harness.leave(MemberIdentity(b.member_id))
        harness.join(member_id=a.member_id)
        harness.advance(REBALANCE_MS)
        harness.commit({("t", 0): 5}, member_id=a.member_id, generation=2)
        return list(harness.replies.values()), list(harness.log)

    assert run() == run()


def test_describe_and_list(harness: Harness) -> None:
    a, b = harness.stable_group(2)
    (description,) = harness.coordinator.describe_groups(["g"])
    assert description.state == "Stable"
    assert description.protocol_type == "consumer"
    assert description.protocol == "range"
    assert {m.member_id: m.assignment for m in description.members} == {
        a.member_id: b"assignment-0",
        b.member_id: b"assignment-1",
    }
    assert all(m.client_host == "/127.0.0.1" for m in description.members)
    (missing,) = harness.coordinator.describe_groups(["nope"])
    assert (missing.error, missing.state, missing.members) == (OK, "Dead", ())
    harness.join(member_id=a.member_id)
    (rebalancing,) = harness.coordinator.describe_groups(["g"])
    assert rebalancing.state == "PreparingRebalance"
    assert rebalancing.protocol == "" and all(m.metadata == b"" for m in rebalancing.members)

    harness.commit({("t", 0): 1}, group_id="simple")
    listed = harness.coordinator.list_groups()
    assert [(g.group_id, g.protocol_type, g.state) for g in listed] == [
        ("g", "consumer", "PreparingRebalance"),
        ("simple", "", "Empty"),
    ]
    assert [g.group_id for g in harness.coordinator.list_groups(["empty"])] == ["simple"]
    assert harness.coordinator.list_groups(["Stable"]) == ()


def test_coordinator_without_a_seed_still_works() -> None:
    coordinator = GroupCoordinator()
    assert coordinator.next_deadline_ms() is None


def test_sync_group_v5_checks_the_protocol_type_and_name(harness: Harness) -> None:
    """SyncGroup v5+ names the protocol type and name the member believes in (KIP-559);
    a mismatch with the group's is INCONSISTENT_GROUP_PROTOCOL, a match (or a name left
    out, as older versions do) syncs."""
    token = harness.join()
    harness.advance(0)
    joined: JoinGroupResponse = harness.reply(token)
    member = joined.member_id
    wrong_type = harness.sync(member, 1, {member: b"a"}, protocol_type="connect")
    assert harness.reply(wrong_type) == SyncGroupResponse(ErrorCode.inconsistent_group_protocol)
    wrong_name = harness.sync(member, 1, {member: b"a"}, protocol_name="roundrobin")
    assert harness.reply(wrong_name) == SyncGroupResponse(ErrorCode.inconsistent_group_protocol)
    assert harness.state() == "CompletingRebalance", "a refused sync changes nothing"
    right = harness.sync(member, 1, {member: b"a"}, protocol_type="consumer", protocol_name="range")
    assert harness.reply(right) == SyncGroupResponse(OK, b"a")
    assert harness.state() == "Stable"
