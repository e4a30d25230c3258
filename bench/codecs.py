"""What the hand-written Produce and Fetch codecs (``sluice.protocol.fast_codecs``) save
per request, next to the general path (the schema walk of ``bounds``, then kio), in
process, with no broker and no I/O:

- decoding Produce v3, v8 and v9 requests (one partition of a 1 KiB batch; v9 also
  four partitions of 16 KiB) and Fetch v12, v15 (a follower's, with replica_state) and
  v17 requests (one partition, and 100 partitions);
- encoding Produce responses v3, v8 and v9 (one partition, and four);
- decoding Fetch responses v16 as a follower reads its leader's (1 and 50 partitions, a
  1 KiB batch each), through ``codec.decode_response``;
- encoding the responses of the other APIs by kio's ``entity_writer`` and by the writer
  generated for their class (``sluice.protocol.compiled_writer``, which the codec uses):
  Metadata v12 (1 topic × 1 partition, 100 topics × 10 partitions), ApiVersions v3,
  FindCoordinator v4, JoinGroup v9 (3 members), SyncGroup v5, Heartbeat v4, OffsetCommit
  v9 and OffsetFetch v9 (1 topic × 4 partitions), ListOffsets v9 (1 × 4), CreateTopics v7
  (1 topic with 20 configs). Their fields hold typical values, filled in generically.

Each case runs ``--iterations`` times, best of 5 rounds of CPU time.

    .venv/bin/python bench/codecs.py
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import io
import platform
import time
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from sluice.protocol import codec, compiled_writer
from sluice.protocol.bounds import checked_body
from sluice.protocol.codec import RequestHeader
from sluice.protocol.messages import request_module, response_module
from sluice.protocol.records import RecordInput, build_batch

ROUNDS = 5
PRODUCE, FETCH = 0, 1


def _produce(version: int, partitions: int, batch_bytes: int) -> Any:
    module = request_module(PRODUCE, version)
    batch = build_batch(
        [RecordInput(None, b"x" * 100) for _ in range(max(batch_bytes // 110, 1))],
        base_timestamp_ms=1_700_000_000_000,
    )
    key = {"topic_id": uuid.uuid4()} if version >= 13 else {"name": "orders"}
    return module.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            module.TopicProduceData(
                **key,
                partition_data=tuple(
                    module.PartitionProduceData(index=i, records=batch) for i in range(partitions)
                ),
            ),
        ),
    )


def _fetch(version: int, partitions: int, follower: bool) -> Any:
    module = request_module(FETCH, version)
    key = {"topic_id": uuid.uuid4()} if version >= 13 else {"topic": "orders"}
    extra: dict[str, Any] = {}
    if follower:
        extra["replica_state"] = module.ReplicaState(replica_id=1, replica_epoch=-1)
    return module.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=50 * 2**20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            module.FetchTopic(
                **key,
                partitions=tuple(
                    module.FetchPartition(
                        partition=p,
                        current_leader_epoch=3,
                        fetch_offset=1000 * p,
                        last_fetched_epoch=3,
                        partition_max_bytes=2**20,
                    )
                    for p in range(partitions)
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
        **extra,
    )


def _produce_response(version: int, partitions: int) -> Any:
    module = response_module(PRODUCE, version)
    extra: dict[str, Any] = {}
    if version >= 8:
        extra = {"record_errors": (), "error_message": None}
    return module.ProduceResponse(
        responses=(
            module.TopicProduceResponse(
                name="orders",
                partition_responses=tuple(
                    module.PartitionProduceResponse(
                        index=i,
                        error_code=ErrorCode.none,
                        base_offset=123_456 + i,
                        log_append_time=None,
                        **({"log_start_offset": 0} if version >= 5 else {}),
                        **extra,
                    )
                    for i in range(partitions)
                ),
            ),
        ),
        throttle_time=datetime.timedelta(0),
    )


def _fetch_response(version: int, partitions: int) -> Any:
    module = response_module(FETCH, version)
    batch = build_batch([RecordInput(None, b"x" * 1000)], base_timestamp_ms=1_700_000_000_000)
    return module.FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(
            module.FetchableTopicResponse(
                topic_id=uuid.uuid4(),
                partitions=tuple(
                    module.PartitionData(
                        partition_index=p,
                        error_code=ErrorCode.none,
                        high_watermark=100,
                        last_stable_offset=100,
                        log_start_offset=0,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=batch,
                    )
                    for p in range(partitions)
                ),
            ),
        ),
    )


def _decode_response_generic(version: int, frame: bytes) -> Any:
    """``codec.decode_response``'s general path: the schema walk, then kio."""
    schema = codec.response_schema(FETCH, version)
    assert schema is not None
    body, _ = checked_body(schema, frame, 5)
    return entity_reader(schema)(body, 5)[0]


_FILLER: dict[str, Any] = {
    "int8": 1,
    "int16": 3,
    "int32": 1_000,
    "int64": 1_700_000_000_000,
    "uint16": 9092,
    "float64": 0.5,
    "bool": False,
    "error_code": ErrorCode.none,
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(minutes=5),
    "datetime_i64": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    "uuid": uuid.UUID(int=0x1234_5678_9ABC_DEF0),
    "string": "orders-eu-west",
    "bytes": b"\x00" * 64,
    "records": None,
}


def _filled(cls: type[Any], counts: dict[str, int]) -> Any:
    """An instance of kio class ``cls`` with typical values: an array of entities named in
    ``counts`` has that many, any other array 1 (3 for primitive arrays)."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if "tag" in field.metadata:
            continue  # left at its default, as handlers mostly leave them
        annotation = field.type
        arguments = [a for a in getattr(annotation, "__args__", ()) if a is not type(None)]
        inner = arguments[0] if len(arguments) == 1 and "|" in str(annotation) else annotation
        if getattr(inner, "__origin__", None) is tuple:
            element = inner.__args__[0]
            element = next(
                (a for a in getattr(element, "__args__", (element,)) if a is not type(None)),
                element,
            )
            if dataclasses.is_dataclass(element):
                count = counts.get(field.name, 1)
                values[field.name] = tuple(_filled(element, counts) for _ in range(count))  # type: ignore[arg-type]
            else:
                values[field.name] = (_FILLER[field.metadata["kafka_type"]],) * 3
        elif dataclasses.is_dataclass(inner):
            values[field.name] = _filled(inner, counts)  # type: ignore[arg-type]
        else:
            values[field.name] = _FILLER[field.metadata["kafka_type"]]
    return cls(**values)


def _typical_responses() -> list[tuple[str, Any]]:
    def response(api_key: int, version: int, **counts: int) -> Any:
        cls = codec.response_schema(api_key, version)
        assert cls is not None
        return _filled(cls, counts)

    return [
        ("Metadata v12, 1 topic × 1 partition", response(3, 12)),
        ("Metadata v12, 100 topics × 10 partitions", response(3, 12, topics=100, partitions=10)),
        ("ApiVersions v3, 60 APIs", response(18, 3, api_keys=60)),
        ("FindCoordinator v4", response(10, 4)),
        ("JoinGroup v9, 3 members", response(11, 9, members=3)),
        ("SyncGroup v5", response(14, 5)),
        ("Heartbeat v4", response(12, 4)),
        ("OffsetCommit v9, 1 × 4", response(8, 9, partitions=4)),
        ("OffsetFetch v9, 1 × 4", response(9, 9, partitions=4)),
        ("ListOffsets v9, 1 × 4", response(2, 9, partitions=4)),
        ("CreateTopics v7, 20 configs", response(19, 7, configs=20)),
    ]


def _kio_encode(payload: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(payload))(buffer, payload)
    return buffer.getvalue()


def _best_seconds_per_call(function: Callable[[], object], iterations: int) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.process_time()
        for _ in range(iterations):
            function()
        best = min(best, (time.process_time() - started) / iterations)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=2000)
    arguments = parser.parse_args()
    iterations = arguments.iterations
    requests = [
        ("Produce v3, 1 × 1 KiB", _produce(3, 1, 1024)),
        ("Produce v8, 1 × 1 KiB", _produce(8, 1, 1024)),
        ("Produce v9, 1 × 1 KiB", _produce(9, 1, 1024)),
        ("Produce v9, 4 × 16 KiB", _produce(9, 4, 16 * 1024)),
        ("Fetch v12, 1 partition", _fetch(12, 1, follower=False)),
        ("Fetch v12, 100 partitions", _fetch(12, 100, follower=False)),
        ("Fetch v15 follower, 1 partition", _fetch(15, 1, follower=True)),
        ("Fetch v15 follower, 100 partitions", _fetch(15, 100, follower=True)),
        ("Fetch v17, 1 partition", _fetch(17, 1, follower=False)),
        ("Fetch v17, 100 partitions", _fetch(17, 100, follower=False)),
    ]
    print(f"Python {platform.python_version()}, {platform.machine()}")
    print()
    print("| decode | body bytes | general µs | fast µs | fast / general |")
    print("|---|---|---|---|---|")
    for name, payload in requests:
        body = codec.encode_body(payload)
        header = RequestHeader(int(payload.__api_key__), int(payload.__version__), 1, "bench")
        assert codec.decode_request_body(header, body, 0) == payload
        general_s = _best_seconds_per_call(
            lambda h=header, b=body: codec.decode_request_body_generic(h, b, 0), iterations
        )
        fast_s = _best_seconds_per_call(
            lambda h=header, b=body: codec.decode_request_body(h, b, 0), iterations
        )
        print(
            f"| {name} | {len(body):,} | {general_s * 1e6:.1f} | {fast_s * 1e6:.1f} | "
            f"{fast_s / general_s:.0%} |"
        )
    print()
    print("| encode | general µs | fast µs | fast / general |")
    print("|---|---|---|---|")
    for version in (3, 8, 9):
        for partitions in (1, 4):
            response = _produce_response(version, partitions)
            assert codec.encode_response(1, response) == codec.encode_response_generic(1, response)
            general_s = _best_seconds_per_call(
                lambda r=response: codec.encode_response_generic(1, r), iterations
            )
            fast_s = _best_seconds_per_call(
                lambda r=response: codec.encode_response(1, r), iterations
            )
            print(
                f"| Produce response v{version}, {partitions} partition(s) | "
                f"{general_s * 1e6:.1f} | {fast_s * 1e6:.1f} | {fast_s / general_s:.0%} |"
            )
    print()
    print("| decode response | general µs | fast µs | fast / general |")
    print("|---|---|---|---|")
    for partitions in (1, 50):
        response = _fetch_response(16, partitions)
        frame = codec.encode_response_generic(1, response)[4:]
        assert codec.decode_response(FETCH, 16, frame) == (1, response)
        assert _decode_response_generic(16, frame) == response
        general_s = _best_seconds_per_call(
            lambda f=frame: _decode_response_generic(16, f), iterations
        )
        fast_s = _best_seconds_per_call(
            lambda f=frame: codec.decode_response(FETCH, 16, f), iterations
        )
        print(
            f"| Fetch response v16, {partitions} × 1 KiB | "
            f"{general_s * 1e6:.1f} | {fast_s * 1e6:.1f} | {fast_s / general_s:.0%} |"
        )
    print()
    print("| encode response body | bytes | kio µs | compiled µs | compiled / kio |")
    print("|---|---|---|---|---|")
    for name, payload in _typical_responses():
        expected = _kio_encode(payload)
        assert compiled_writer.encode(payload) == expected, name
        rounds = max(iterations // max(len(expected) // 2000, 1), 20)
        kio_s = _best_seconds_per_call(lambda p=payload: _kio_encode(p), rounds)
        compiled_s = _best_seconds_per_call(lambda p=payload: compiled_writer.encode(p), rounds)
        print(
            f"| {name} | {len(expected):,} | {kio_s * 1e6:.1f} | {compiled_s * 1e6:.1f} | "
            f"{compiled_s / kio_s:.0%} |"
        )


if __name__ == "__main__":
    main()
