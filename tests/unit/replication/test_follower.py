"""The follower's decisions, on plain numbers: the truncation rule, the reassignment
throttle, the rounds of a fetcher (what to ask, when to wait) and what each answer
becomes (truncate, start at, append; retry later), the fetch session included."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from sluice.common.config import BrokerConfig
from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.replication.follower import (
    AppendFetched,
    EpochAnswer,
    EpochAsk,
    FetchedPartition,
    FetchQuery,
    FollowerCore,
    ReplicationThrottle,
    Round,
    StartAt,
    TruncateTo,
    WaitUntil,
    log_start_to_follow,
    out_of_range_start,
    truncation_target,
)
from sluice.replication.follower_session import Wanted

BACKOFF_MS = 1000
A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
B0 = TopicPartition("b", 0)


@dataclass
class FakeLog:
    """A follower's log as the decisions read it; ``epochs`` answers
    ``end_offset_for_epoch`` (anything else: no such epoch here)."""

    log_start_offset: int = 0
    log_end_offset: int = 0
    high_watermark: int = 0
    latest_epoch: int = -1
    epochs: dict[int, tuple[int, int]] = field(default_factory=dict)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epochs.get(epoch, (-1, -1))


@dataclass(eq=False)
class FakeReplica:
    log: FakeLog = field(default_factory=FakeLog)
    leader_epoch: int = 7
    detached: bool = False
    throttled_rate: int = 0
    """reassignment.throttled.rate on copying it here (0: none)."""


def core(throttle: ReplicationThrottle | None = None) -> FollowerCore[FakeReplica]:
    config = BrokerConfig(
        node_id=2,
        replica_fetch_backoff_ms=BACKOFF_MS,
        replica_fetch_max_bytes=1_000_000,
        replica_fetch_wait_max_ms=500,
        replica_fetch_response_max_bytes=10_000_000,
    )
    return FollowerCore(1, config, throttle or ReplicationThrottle(), lambda r: r.throttled_rate)


def fetching(c: FollowerCore[FakeReplica], *tps: TopicPartition, log_end: int = 0) -> None:
    """Follow ``tps`` with empty logs (nothing to truncate) up to ``log_end``."""
    for tp in tps:
        c.follow(tp, FakeReplica(FakeLog(log_end_offset=log_end)))


def a_round(c: FollowerCore[FakeReplica], now_ms: int = 0) -> Round[FakeReplica]:
    round_ = c.begin_round(now_ms)
    assert isinstance(round_, Round)
    return round_


def a_fetch(c: FollowerCore[FakeReplica], now_ms: int = 0) -> FetchQuery[FakeReplica]:
    query = c.fetch_query(a_round(c, now_ms))
    assert isinstance(query, FetchQuery)
    return query


def answer(
    tp: TopicPartition,
    error_code: int = ErrorCode.none,
    *,
    records: bytes | None = b"batch",
    high_watermark: int = 5,
    log_start_offset: int = 0,
    diverging_epoch: tuple[int, int] | None = None,
) -> FetchedPartition:
    return FetchedPartition(
        tp, error_code, high_watermark, log_start_offset, records, diverging_epoch
    )


# ── the truncation rule ────────────────────────────────────────────────────────────


def test_the_same_epoch_truncates_to_the_smaller_end() -> None:
    log = FakeLog(log_end_offset=15, high_watermark=3, latest_epoch=3, epochs={3: (3, 15)})
    assert truncation_target(3, 12, log) == (12, False, "epoch 3 ends at 12")
    assert truncation_target(3, 20, log)[:2] == (15, False)  # the leader has more: keep all


def test_an_epoch_the_leader_never_had_is_cut_and_the_older_one_asked() -> None:
    # Here epoch 3 follows epoch 1; the leader's largest epoch not above 3 is 2.
    log = FakeLog(log_end_offset=15, latest_epoch=3, epochs={2: (1, 10)})
    assert truncation_target(2, 12, log)[:2] == (10, True)


def test_an_epoch_older_than_any_here_takes_the_leaders_end() -> None:
    log = FakeLog(log_end_offset=15, latest_epoch=3)
    assert truncation_target(1, 4, log)[:2] == (4, False)


@pytest.mark.parametrize(("epoch", "end_offset"), [(-1, -1), (-1, 8), (4, -1)])
def test_a_leader_without_the_epoch_leaves_what_is_committed(epoch: int, end_offset: int) -> None:
    log = FakeLog(log_end_offset=15, high_watermark=6, latest_epoch=5, epochs={5: (5, 15)})
    assert truncation_target(epoch, end_offset, log) == (6, False, "the leader has no such epoch")


def test_out_of_range_starts_past_the_end_or_truncates_again() -> None:
    log = FakeLog(log_start_offset=2, log_end_offset=10)
    assert out_of_range_start(log, 11) == 11
    assert out_of_range_start(log, 10) is None  # this log reaches the leader's start
    assert out_of_range_start(log, 0) is None


@pytest.mark.parametrize(
    ("leader_log_start", "expected"),
    [(2, None), (1, None), (3, 3), (6, 6), (7, None)],
)
def test_the_leaders_log_start_is_followed_up_to_the_high_watermark(
    leader_log_start: int, expected: int | None
) -> None:
    log = FakeLog(log_start_offset=2, log_end_offset=10, high_watermark=6)
    assert log_start_to_follow(log, leader_log_start) == expected


# ── the reassignment throttle ──────────────────────────────────────────────────────


def test_the_throttle_refills_at_its_rate_up_to_one_seconds_worth() -> None:
    throttle = ReplicationThrottle()
    assert throttle.available("t", 1000, now_ms=0) == 1000
    throttle.spend("t", 1500, now_ms=0)  # a first batch may overdraw it (KIP-74)
    assert throttle.available("t", 1000, now_ms=200) == -300
    assert throttle.ready_at_ms("t", 1000, now_ms=200) == 501  # one byte again
    assert throttle.available("t", 1000, now_ms=501) == 1
    assert throttle.ready_at_ms("t", 1000, now_ms=501) == 501
    assert throttle.available("t", 1000, now_ms=60_000) == 1000


def test_the_throttle_rounds_waits_up_and_levels_down() -> None:
    throttle = ReplicationThrottle()
    throttle.available("t", 3, now_ms=0)
    throttle.spend("t", 3, now_ms=0)
    assert throttle.available("t", 3, now_ms=100) == 0  # 0.3 bytes: none whole yet
    assert throttle.ready_at_ms("t", 3, now_ms=100) == 334  # 0.7 bytes more at 3/s
    assert throttle.available("t", 3, now_ms=334) == 1


def test_each_topic_has_its_own_bucket() -> None:
    throttle = ReplicationThrottle()
    throttle.spend("t", 10, now_ms=0)
    assert throttle.available("u", 50, now_ms=0) == 50


# ── following ──────────────────────────────────────────────────────────────────────


def test_follow_starts_over_only_for_another_replica_or_epoch() -> None:
    c = core()
    replica = FakeReplica()
    assert c.follow(A0, replica)
    first = c.followed(A0)
    assert not c.follow(A0, replica)
    assert c.followed(A0) is first
    replica.leader_epoch = 8
    assert c.follow(A0, replica)
    assert c.followed(A0) is not first
    assert c.follow(A0, FakeReplica(leader_epoch=8))
    assert len(c) == 1
    c.unfollow(A0)
    c.unfollow(A0)
    assert len(c) == 0


def test_a_round_asks_the_latest_epoch_of_partitions_that_must_truncate() -> None:
    c = core()
    c.follow(A0, FakeReplica(FakeLog(log_end_offset=10, latest_epoch=4)))
    c.follow(A1, FakeReplica(FakeLog()))  # no epoch here: nothing to cut
    round_ = a_round(c, now_ms=5)
    assert round_.now_ms == 5
    assert round_.epoch_query is not None
    assert round_.epoch_query.partitions == (EpochAsk(A0, 7, 4),)
    followed = c.followed(A1)
    assert followed is not None and not followed.truncating
    query = c.fetch_query(round_)
    assert isinstance(query, FetchQuery)
    assert [f.topic_partition for f in query.batch] == [A1]  # A0 waits for its answer


def test_nothing_ready_waits_for_the_first_retry() -> None:
    c = core()
    c.follow(A0, FakeReplica(FakeLog(latest_epoch=4)))
    c.follow(A1, FakeReplica(FakeLog(latest_epoch=4)))
    query = a_round(c, now_ms=100).epoch_query
    assert query is not None
    errors = [EpochAnswer(tp, ErrorCode.not_leader_or_follower, -1, -1) for tp in (A0, A1)]
    assert c.on_epoch_answers(query, errors, now_ms=100) == []
    assert c.begin_round(now_ms=100 + BACKOFF_MS - 1) == WaitUntil(100 + BACKOFF_MS)
    assert isinstance(c.begin_round(now_ms=100 + BACKOFF_MS), Round)


def test_epoch_answers_truncate_and_ask_again_while_the_leader_lacks_the_epoch() -> None:
    c = core()
    log = FakeLog(log_end_offset=15, high_watermark=2, latest_epoch=3, epochs={2: (1, 10)})
    c.follow(A0, FakeReplica(log))
    query = a_round(c).epoch_query
    assert query is not None
    commands = c.on_epoch_answers(query, [EpochAnswer(A0, ErrorCode.none, 2, 12)], now_ms=0)
    assert commands == [TruncateTo(A0, 10, "epoch 2 ends at 12")]
    followed = c.followed(A0)
    assert followed is not None and followed.truncating  # epoch 1 is asked next
    log.log_end_offset, log.latest_epoch, log.epochs = 10, 1, {1: (1, 10)}
    query = a_round(c).epoch_query
    assert query is not None and query.partitions == (EpochAsk(A0, 7, 1),)
    assert c.on_epoch_answers(query, [EpochAnswer(A0, ErrorCode.none, 1, 12)], 0) == [
        TruncateTo(A0, 10, "epoch 1 ends at 12")
    ]
    assert not followed.truncating


def test_answers_about_partitions_no_longer_followed_as_asked_are_ignored() -> None:
    c = core()
    replicas = {tp: FakeReplica(FakeLog(log_end_offset=9, latest_epoch=4)) for tp in (A0, A1, B0)}
    for tp, replica in replicas.items():
        c.follow(tp, replica)
    query = a_round(c).epoch_query
    assert query is not None
    c.unfollow(A0)
    replicas[A1].detached = True  # being deleted
    replicas[B0].leader_epoch = 8  # a newer image, not yet followed
    unasked = TopicPartition("c", 0)
    answers = [EpochAnswer(tp, ErrorCode.none, 4, 3) for tp in (A0, A1, B0, unasked)]
    assert c.on_epoch_answers(query, answers, now_ms=0) == []
    c.follow(B0, replicas[B0])  # followed again: the old query's answer is not its
    assert c.on_epoch_answers(query, answers, now_ms=0) == []


# ── fetching ───────────────────────────────────────────────────────────────────────


def test_a_fetch_asks_from_the_log_end_with_the_last_epoch() -> None:
    c = core()
    c.follow(A0, FakeReplica(FakeLog(log_start_offset=3, log_end_offset=10, latest_epoch=-1)))
    query = a_fetch(c)
    assert query.plan.wanted == {
        A0: Wanted(
            fetch_offset=10,
            last_fetched_epoch=-1,
            log_start_offset=3,
            current_leader_epoch=7,
            partition_max_bytes=1_000_000,
        )
    }
    assert (query.replica_id, query.max_wait_ms, query.min_bytes, query.max_bytes) == (
        2,
        500,
        1,
        10_000_000,
    )
    assert not query.plan.incremental and query.throttled == frozenset()


def test_a_throttled_partition_asks_what_its_bucket_holds_and_waits_when_empty() -> None:
    throttle = ReplicationThrottle()
    c = core(throttle)
    c.follow(A0, FakeReplica(throttled_rate=100))
    c.follow(A1, FakeReplica(throttled_rate=100))  # the same topic: the same bucket
    query = a_fetch(c)
    assert {tp: w.partition_max_bytes for tp, w in query.plan.wanted.items()} == {
        A0: 100,
        A1: 100,
    }
    assert query.throttled == {A0, A1}
    c.on_fetch_answer(query, ErrorCode.none, 0, [answer(A0, records=b"x" * 150)], now_ms=0)
    # The bucket is overdrawn by 50 bytes: both wait until it holds one byte again.
    assert c.fetch_query(a_round(c, now_ms=100)) == WaitUntil(510)
    assert c.begin_round(now_ms=509) == WaitUntil(510)
    query = a_fetch(c, now_ms=510)
    assert {tp: w.partition_max_bytes for tp, w in query.plan.wanted.items()} == {A0: 1, A1: 1}


def test_a_bucket_holding_less_than_a_byte_waits_for_a_whole_one() -> None:
    """Not a busy round after round until the fraction grows to a byte."""
    c = core()
    c.follow(A0, FakeReplica(throttled_rate=3))
    c.on_fetch_answer(a_fetch(c), ErrorCode.none, 0, [answer(A0, records=b"xyz")], 0)
    assert c.fetch_query(a_round(c, now_ms=100)) == WaitUntil(334)  # 0.3 bytes at 100 ms
    assert c.begin_round(now_ms=333) == WaitUntil(334)
    assert a_fetch(c, now_ms=334).plan.wanted[A0].partition_max_bytes == 1


def test_an_unthrottled_partition_fetches_while_a_throttled_one_waits() -> None:
    c = core()
    c.follow(A0, FakeReplica(throttled_rate=10))
    c.follow(B0, FakeReplica())
    c.on_fetch_answer(a_fetch(c), ErrorCode.none, 0, [answer(A0, records=b"x" * 20)], 0)
    query = a_fetch(c, now_ms=0)
    assert [f.topic_partition for f in query.batch] == [B0]
    followed = c.followed(A0)
    assert followed is not None and followed.retry_at_ms == 1100  # 11 bytes at 10/s


def test_a_round_with_nothing_to_fetch_goes_again_at_once() -> None:
    c = core()
    c.follow(A0, FakeReplica(FakeLog(latest_epoch=4)))
    assert c.fetch_query(a_round(c)) is None  # truncating: its answer comes first


def test_fetch_answers_become_commands() -> None:
    c = core()
    for tp in (A0, A1, B0):
        c.follow(tp, FakeReplica(FakeLog(log_end_offset=10, high_watermark=4, epochs={5: (5, 10)})))
    extra = TopicPartition("c", 0)
    query = a_fetch(c)
    commands = c.on_fetch_answer(
        query,
        ErrorCode.none,
        0,
        [
            answer(A0, records=None, high_watermark=9, log_start_offset=2),
            answer(A1, ErrorCode.offset_out_of_range, log_start_offset=20),
            answer(B0, diverging_epoch=(5, 8)),
            answer(extra),  # not asked: ignored
        ],
        now_ms=0,
    )
    assert commands == [
        AppendFetched(A0, b"", 9, 2),
        StartAt(A1, 20),
        TruncateTo(B0, 8, "epoch 5 ends at 8"),
    ]


def test_a_diverging_epoch_below_zero_is_none() -> None:
    c = core()
    fetching(c, A0)
    commands = c.on_fetch_answer(
        a_fetch(c), ErrorCode.none, 0, [answer(A0, diverging_epoch=(-1, -1))], 0
    )
    assert commands == [AppendFetched(A0, b"batch", 5, 0)]


def test_out_of_range_within_the_leaders_log_truncates_again() -> None:
    c = core()
    fetching(c, A0, log_end=30)
    commands = c.on_fetch_answer(
        a_fetch(c), ErrorCode.none, 0, [answer(A0, ErrorCode.offset_out_of_range)], 0
    )
    assert commands == []
    followed = c.followed(A0)
    assert followed is not None and followed.truncating and followed.retry_at_ms == 0


def test_a_partition_error_holds_the_partition_back() -> None:
    c = core()
    fetching(c, A0, A1)
    answers = [answer(A0, ErrorCode.fenced_leader_epoch), answer(A1)]
    commands = c.on_fetch_answer(a_fetch(c), ErrorCode.none, 0, answers, now_ms=40)
    assert commands == [AppendFetched(A1, b"batch", 5, 0)]
    query = a_fetch(c, now_ms=40)
    assert [f.topic_partition for f in query.batch] == [A1]
    assert [f.topic_partition for f in a_fetch(c, now_ms=40 + BACKOFF_MS).batch] == [A0, A1]


def test_a_top_level_error_holds_every_partition_back_and_ends_the_session() -> None:
    c = core()
    fetching(c, A0, A1)
    c.on_fetch_answer(a_fetch(c), ErrorCode.none, 42, [], now_ms=0)
    assert a_fetch(c).plan.incremental
    query = a_fetch(c)
    assert c.on_fetch_answer(query, ErrorCode.unknown_server_error, 0, [], now_ms=10) == []
    assert c.begin_round(now_ms=10) == WaitUntil(10 + BACKOFF_MS)
    assert not a_fetch(c, now_ms=10 + BACKOFF_MS).plan.incremental


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.fetch_session_id_not_found,
        ErrorCode.invalid_fetch_session_epoch,
        ErrorCode.fetch_session_topic_id_error,
    ],
)
def test_a_session_error_fetches_in_full_at_once(code: int) -> None:
    c = core()
    fetching(c, A0)
    c.on_fetch_answer(a_fetch(c), ErrorCode.none, 42, [], now_ms=0)
    query = a_fetch(c)
    assert query.plan.incremental and query.plan.session_id == 42
    assert c.on_fetch_answer(query, code, 0, [], now_ms=0) == []
    query = a_fetch(c, now_ms=0)  # nothing held back
    assert (query.plan.session_id, query.plan.incremental, len(query.named)) == (42, False, 1)


def test_a_lost_fetch_or_a_new_connection_fetches_in_full() -> None:
    c = core()
    fetching(c, A0)
    c.on_fetch_answer(a_fetch(c), ErrorCode.none, 42, [], now_ms=0)
    c.on_fetch_failed()
    assert not a_fetch(c).plan.incremental
    c.on_fetch_answer(a_fetch(c), ErrorCode.none, 43, [], now_ms=0)
    c.on_connecting()
    assert not a_fetch(c).plan.incremental
    assert c.reconnect_backoff_ms == BACKOFF_MS


def test_an_incremental_fetch_names_only_what_changed() -> None:
    c = core()
    replica = FakeReplica(FakeLog(log_end_offset=4))
    c.follow(A0, replica)
    fetching(c, A1, log_end=4)
    c.on_fetch_answer(a_fetch(c), ErrorCode.none, 42, [], now_ms=0)
    replica.log.log_end_offset = 6
    query = a_fetch(c)
    assert [f.topic_partition for f in query.named] == [A0]
    c.on_fetch_answer(query, ErrorCode.none, 42, [], now_ms=0)
    assert (c.fetches_total, c.incremental_fetches_total, c.partitions_named_total) == (2, 1, 3)


def test_a_refused_append_truncates_again_after_the_backoff() -> None:
    c = core()
    c.follow(A0, FakeReplica(FakeLog(log_end_offset=3, latest_epoch=2)))
    followed = c.followed(A0)
    assert followed is not None
    followed.truncating = False
    c.on_append_failed(A0, now_ms=70)
    assert followed.truncating and followed.retry_at_ms == 70 + BACKOFF_MS
    c.on_append_failed(B0, now_ms=70)  # no longer followed: nothing to do
    assert c.begin_round(now_ms=70) == WaitUntil(70 + BACKOFF_MS)
    query = a_round(c, now_ms=70 + BACKOFF_MS).epoch_query
    assert query is not None and query.partitions == (EpochAsk(A0, 7, 2),)
