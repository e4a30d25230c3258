"""The leader's fetch session cache (KIP-227) and the follower's side of a session, fed
real Fetch requests: built with kio, framed and decoded by Sluice's codec as the broker
decodes them."""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

import pytest

from sluice.broker.replication.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INT32_MAX,
    NO_SESSION_ID,
    SESSION_EVICTION_MS,
    FetchContext,
    FetchSessionCache,
    TopicResults,
    next_epoch,
)
from sluice.broker.replication.partition import Partition
from sluice.broker.replication.purgatory import Purgatory
from sluice.cluster.model import PartitionState
from sluice.common.clock import ManualClock
from sluice.common.config import BrokerConfig, BrokerConfigError, TopicConfig
from sluice.common.errors import ErrorCode
from sluice.common.ids import TopicPartition
from sluice.protocol.codec import decode_request_body, encode_request, parse_request_header
from sluice.protocol.fetch_response import FetchPartitionResult, RecordBytes
from sluice.protocol.messages import make, request_module
from sluice.replication.follower import (
    AppendFetched,
    FetchedPartition,
    FetchQuery,
    FollowerCore,
    ReplicationThrottle,
    WaitUntil,
)
from sluice.replication.follower_session import FollowerFetchSession, Wanted
from sluice.storage import PartitionLog

Partitions = dict[str, list[tuple[int, int]]]
"""Topic (name, or id as text from v13) → [(partition, fetch offset)]."""


def fetch(
    partitions: Partitions,
    *,
    session_id: int = NO_SESSION_ID,
    epoch: int = INITIAL_EPOCH,
    forgotten: dict[str, list[int]] | None = None,
    version: int = 12,
    replica_id: int = -1,
) -> Any:
    """A Fetch request as the broker sees it: encoded, then decoded by the codec."""
    module = request_module(1, version)
    by_id = version >= 13

    def topic_field(topic: str) -> dict[str, Any]:
        return {"topic_id": uuid.UUID(topic)} if by_id else {"topic": topic}

    request = make(
        module.FetchRequest,
        replica_id=replica_id,
        replica_state=make(module.ReplicaState, replica_id=replica_id, replica_epoch=-1)
        if version >= 15
        else None,
        max_wait=500,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=session_id,
        session_epoch=epoch,
        topics=tuple(
            make(
                module.FetchTopic,
                **topic_field(topic),
                partitions=tuple(
                    make(
                        module.FetchPartition,
                        partition=index,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                    for index, offset in entries
                ),
            )
            for topic, entries in partitions.items()
        ),
        forgotten_topics_data=tuple(
            make(module.ForgottenTopic, **topic_field(topic), partitions=tuple(indexes))
            for topic, indexes in (forgotten or {}).items()
        ),
        rack_id="",
    )
    frame_bytes = encode_request(7, "test", request)[4:]
    header, body_offset = parse_request_header(frame_bytes)
    return decode_request_body(header, frame_bytes, body_offset)


def read(context: FetchContext, news: dict[tuple[str, int], dict[str, Any]]) -> TopicResults:
    """What the handler would read for ``context``: high watermark 10 everywhere unless
    ``news`` says otherwise for a (topic, partition)."""
    results: TopicResults = []
    for fetched in context.topics:
        topic = str(fetched.key)
        partition_results = []
        for wanted in fetched.partitions:
            result = FetchPartitionResult(
                int(wanted.partition), high_watermark=10, last_stable_offset=10, log_start_offset=0
            )
            for name, value in news.get((topic, int(wanted.partition)), {}).items():
                setattr(result, name, value)
            partition_results.append(result)
        results.append((fetched.key, partition_results))
    return results


def named(context: FetchContext) -> list[tuple[str, int, int]]:
    return [
        (str(t.key), int(p.partition), int(p.fetch_offset))
        for t in context.topics
        for p in t.partitions
    ]


def answered(results: TopicResults) -> list[tuple[str, int]]:
    return [(str(topic), r.partition_index) for topic, rs in results for r in rs]


def open_session(
    cache: FetchSessionCache,
    partitions: Partitions,
    now_ms: int = 0,
    *,
    replica_id: int = -1,
    version: int = 12,
) -> int:
    request = fetch(partitions, replica_id=replica_id, version=version)
    context = cache.context(request, replica_id >= 0, now_ms)
    session_id, _ = cache.answer(context, request, read(context, {}), replica_id >= 0, now_ms)
    return session_id


def test_a_full_fetch_opens_a_session_and_incremental_fetches_read_all_of_it() -> None:
    cache = FetchSessionCache(10, rng=random.Random(1))
    session_id = open_session(cache, {"a": [(0, 5), (1, 7)], "b": [(0, 3)]})
    assert session_id != NO_SESSION_ID
    assert len(cache) == 1
    assert cache.partitions_cached == 3

    # Epoch 1 names only b-0, whose offset moved: every partition is read anyway.
    request = fetch({"b": [(0, 4)]}, session_id=session_id, epoch=1)
    context = cache.context(request, False, 1)
    assert context.error_code == ErrorCode.none
    assert named(context) == [("a", 0, 5), ("a", 1, 7), ("b", 0, 4)]
    results = read(context, {("b", 0): {"records": [RecordBytes(b"x")]}})
    answer_id, answer = cache.answer(context, request, results, False, 1)
    assert answer_id == session_id
    assert answered(answer) == [("b", 0)]  # the others have no news
    assert cache.incremental_fetches_total == 1

    # Epoch 2 adds c-0 and forgets a-1; a-0's high watermark moved.
    request = fetch({"c": [(0, 0)]}, session_id=session_id, epoch=2, forgotten={"a": [1]})
    context = cache.context(request, False, 2)
    # b-0 answered with records last time: it moved to the end of the fetch order.
    assert named(context) == [("a", 0, 5), ("b", 0, 4), ("c", 0, 0)]
    results = read(context, {("a", 0): {"high_watermark": 11}})
    _, answer = cache.answer(context, request, results, False, 2)
    assert answered(answer) == [("a", 0), ("c", 0)]  # c-0 is new to the session


@pytest.mark.parametrize(
    "news",
    [
        {"high_watermark": 12},
        {"last_stable_offset": 9},
        {"log_start_offset": 2},
        {"error_code": ErrorCode.not_leader_or_follower},
        {"diverging_epoch": (3, 4)},
        {"records": [RecordBytes(b"x")]},
    ],
)
def test_an_incremental_answer_names_a_partition_with_news(news: dict[str, Any]) -> None:
    cache = FetchSessionCache(10)
    session_id = open_session(cache, {"a": [(0, 5), (1, 5)]})
    request = fetch({}, session_id=session_id, epoch=1)
    context = cache.context(request, False, 1)
    _, answer = cache.answer(context, request, read(context, {("a", 1): news}), False, 1)
    assert answered(answer) == [("a", 1)]


def test_an_error_is_answered_until_it_is_gone_and_then_once_more() -> None:
    cache = FetchSessionCache(10)
    session_id = open_session(cache, {"a": [(0, 5)]})
    error = {("a", 0): {"error_code": ErrorCode.unknown_topic_id}}
    for epoch, news, expected in [
        (1, error, [("a", 0)]),
        (2, error, [("a", 0)]),
        (3, {}, [("a", 0)]),  # the error went: its high watermark is news again
        (4, {}, []),
    ]:
        request = fetch({}, session_id=session_id, epoch=epoch)
        context = cache.context(request, False, epoch)
        _, answer = cache.answer(context, request, read(context, news), False, epoch)
        assert answered(answer) == expected, epoch


def test_session_errors() -> None:
    cache = FetchSessionCache(10)
    session_id = open_session(cache, {"a": [(0, 5)]})
    unknown = cache.context(fetch({}, session_id=session_id + 1, epoch=1), False, 1)
    assert unknown.error_code == ErrorCode.fetch_session_id_not_found
    wrong_epoch = cache.context(fetch({}, session_id=session_id, epoch=2), False, 1)
    assert wrong_epoch.error_code == ErrorCode.invalid_fetch_session_epoch
    other_naming = cache.context(fetch({}, session_id=session_id, epoch=1, version=13), False, 1)
    assert other_naming.error_code == ErrorCode.fetch_session_topic_id_error
    # None of these used the session up: epoch 1 still works.
    assert cache.context(fetch({}, session_id=session_id, epoch=1), False, 1).incremental


def test_sessionless_full_fetches_and_closing() -> None:
    cache = FetchSessionCache(10)
    request = fetch({"a": [(0, 5)]}, epoch=FINAL_EPOCH)  # librdkafka's fetches
    context = cache.context(request, False, 0)
    session_id, answer = cache.answer(context, request, read(context, {}), False, 0)
    assert (session_id, len(cache), answered(answer)) == (NO_SESSION_ID, 0, [("a", 0)])

    first = open_session(cache, {"a": [(0, 5)]})
    # A full fetch naming a session closes it (and, with epoch 0, opens another).
    request = fetch({"a": [(0, 6)]}, session_id=first, epoch=INITIAL_EPOCH)
    context = cache.context(request, False, 1)
    second, _ = cache.answer(context, request, read(context, {}), False, 1)
    assert cache.get(first) is None and cache.get(second) is not None
    cache.context(fetch({"a": [(0, 6)]}, session_id=second, epoch=FINAL_EPOCH), False, 2)
    assert len(cache) == 0


def test_forgetting_every_partition_ends_the_session() -> None:
    cache = FetchSessionCache(10)
    session_id = open_session(cache, {"a": [(0, 5)]})
    request = fetch({}, session_id=session_id, epoch=1, forgotten={"a": [0]})
    context = cache.context(request, False, 1)
    assert not context.incremental and context.topics == []
    assert cache.answer(context, request, [], False, 1)[0] == NO_SESSION_ID
    assert len(cache) == 0


def test_sessions_from_v13_hold_topics_by_id() -> None:
    cache = FetchSessionCache(10)
    topic_id = str(uuid.uuid4())
    session_id = open_session(cache, {topic_id: [(0, 1)]}, version=13)
    request = fetch({}, session_id=session_id, epoch=1, version=13, forgotten={topic_id: [0]})
    assert not cache.context(request, False, 1).incremental  # forgotten by its id
    assert cache.context(fetch({}, session_id=session_id, epoch=1), False, 1).error_code == (
        ErrorCode.fetch_session_id_not_found
    )


def test_a_session_holds_no_more_partitions_than_one_request_may_name() -> None:
    cache = FetchSessionCache(10, partitions_max=3)
    session_id = open_session(cache, {"a": [(0, 0), (1, 0)]})
    assert cache.context(
        fetch({"a": [(2, 0)]}, session_id=session_id, epoch=1), False, 1
    ).incremental
    too_many = cache.context(fetch({"a": [(3, 0)]}, session_id=session_id, epoch=2), False, 2)
    assert too_many.error_code == ErrorCode.invalid_request
    assert len(cache) == 0


def test_the_epoch_wraps_to_1() -> None:
    assert next_epoch(1) == 2
    assert next_epoch(INT32_MAX) == 1


def test_a_full_cache_evicts_only_by_kafka_rules() -> None:
    cache = FetchSessionCache(2)
    consumer = open_session(cache, {"a": [(0, 0)]}, now_ms=0)
    follower = open_session(cache, {"a": [(0, 0)]}, now_ms=0, replica_id=1)
    assert len(cache) == 2
    # A consumer may not evict a young session: declined, fetches in full.
    assert open_session(cache, {"b": [(0, 0), (1, 0)]}, now_ms=1) == NO_SESSION_ID
    # A follower evicts a consumer's session, however young.
    second_follower = open_session(cache, {"b": [(0, 0)]}, now_ms=2, replica_id=2)
    assert second_follower != NO_SESSION_ID
    assert cache.get(consumer) is None and cache.evictions_total == 1
    # A young follower session is safe from another follower.
    assert open_session(cache, {"c": [(0, 0)]}, now_ms=3, replica_id=3) == NO_SESSION_ID
    # Past the eviction time, sessions compete on their value: a bigger follower
    # session takes the place of the smaller one.
    later = SESSION_EVICTION_MS + 10
    for session_id in (follower, second_follower):  # both in use, neither idle
        request = fetch({}, session_id=session_id, epoch=1)
        cache.answer(cache.context(request, True, later), request, [], True, later)
    bigger = open_session(cache, {"c": [(0, 0), (1, 0)]}, now_ms=later + 1, replica_id=3)
    assert bigger != NO_SESSION_ID and cache.evictions_total == 2
    assert len(cache) == 2


def test_an_idle_session_is_evicted_first() -> None:
    cache = FetchSessionCache(1)
    follower = open_session(cache, {"a": [(0, 0), (1, 0)]}, now_ms=0, replica_id=1)
    # A small consumer session is worth less, but the follower's was unused too long.
    consumer = open_session(cache, {"b": [(0, 0)]}, now_ms=SESSION_EVICTION_MS + 1)
    assert consumer != NO_SESSION_ID and cache.get(follower) is None


def test_no_slots_no_sessions() -> None:
    cache = FetchSessionCache(0)
    assert open_session(cache, {"a": [(0, 0)]}, replica_id=1) == NO_SESSION_ID


def test_the_cache_slots_setting_has_kafkas_name_and_bounds() -> None:
    assert BrokerConfig().max_incremental_fetch_session_cache_slots == 1000
    config = BrokerConfig()
    config.apply_properties({"max.incremental.fetch.session.cache.slots": "0"})
    assert config.max_incremental_fetch_session_cache_slots == 0
    with pytest.raises(BrokerConfigError, match=r"max\.incremental\.fetch\.session\.cache\.slots"):
        config.apply_properties({"max.incremental.fetch.session.cache.slots": "-1"})


# ── the follower's side ────────────────────────────────────────────────────────────


def wanted(offset: int) -> Wanted:
    return Wanted(offset, 1, 0, 5, 1 << 20)


def test_a_follower_names_only_what_changed() -> None:
    a0, a1, b0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    session = FollowerFetchSession()
    plan = session.plan({a0: wanted(1), a1: wanted(1)})
    assert (plan.session_id, plan.epoch, plan.named) == (0, INITIAL_EPOCH, {a0, a1})
    session.answered(plan, 77)
    plan = session.plan({a0: wanted(2), a1: wanted(1), b0: wanted(0)})
    assert (plan.session_id, plan.epoch, plan.named, plan.forgotten) == (77, 1, {a0, b0}, ())
    session.answered(plan, 77)
    plan = session.plan({a0: wanted(2), b0: wanted(0)})
    assert (plan.epoch, plan.named, plan.forgotten) == (2, frozenset(), (a1,))
    # A failed fetch: full again, closing session 77.
    session.failed()
    plan = session.plan({a0: wanted(2), b0: wanted(0)})
    assert (plan.session_id, plan.epoch, plan.named) == (77, INITIAL_EPOCH, {a0, b0})


def test_a_follower_of_a_leader_declining_sessions_fetches_in_full() -> None:
    a0 = TopicPartition("a", 0)
    session = FollowerFetchSession()
    for offset in range(3):
        plan = session.plan({a0: wanted(offset)})
        assert (plan.session_id, plan.epoch, plan.named) == (0, INITIAL_EPOCH, {a0})
        session.answered(plan, NO_SESSION_ID)


# ── a follower's session, against a scripted leader ───────────────────────────────


def test_a_replica_fetcher_falls_back_to_a_full_fetch_on_a_session_error(tmp_path: Path) -> None:
    clock = ManualClock()
    state = PartitionState(replicas=(0, 1), leader=1, leader_epoch=3, isr=(0, 1), version=1)
    core: FollowerCore[Partition] = FollowerCore(
        1, BrokerConfig(), ReplicationThrottle(), lambda p: 0
    )
    for index in range(2):
        log = PartitionLog.create(tmp_path / f"orders-{index}", TopicConfig(), clock)
        partition = Partition(TopicPartition("orders", index), log, state, 0, Purgatory(), clock)
        core.follow(partition.topic_partition, partition)
    answers = [
        (ErrorCode.none, 42),  # full fetch: session 42 opened
        (ErrorCode.none, 42),  # incremental: nothing named, nothing new
        (ErrorCode.fetch_session_id_not_found, 0),  # evicted at the leader
        (ErrorCode.none, 43),  # full again: session 43
    ]
    sent = []
    for error_code, session_id in answers:
        round_ = core.begin_round(clock.monotonic_ms())  # empty logs: nothing to truncate
        assert not isinstance(round_, WaitUntil) and round_.epoch_query is None
        query = core.fetch_query(round_)
        assert isinstance(query, FetchQuery)
        sent.append((query.plan.session_id, query.plan.epoch, len(query.named)))
        partitions = [
            FetchedPartition(f.topic_partition, ErrorCode.none, 0, 0, None) for f in query.named
        ]
        commands = core.on_fetch_answer(query, error_code, session_id, partitions, 0)
        assert all(isinstance(c, AppendFetched) for c in commands)
    assert sent == [(0, 0, 2), (42, 1, 0), (42, 2, 0), (42, 0, 2)]
    assert (core.session.id, core.session.epoch) == (43, 1)
    assert core.next_retry_ms() == 0  # a session error holds nothing back
    assert (core.fetches_total, core.incremental_fetches_total) == (4, 2)
