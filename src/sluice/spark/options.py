"""The data source's options, parsed and checked once, on the driver.

Options are named after Spark's Kafka source, so a job written for
``format("kafka")`` keeps its options with ``format("sluice")``::

    bootstrap.servers     host:port[,host:port]                      (required)
    subscribe             topic[,topic]           ┐
    subscribePattern      regular expression      ├ exactly one of these
    assign                {"topic": [0, 1]}       ┘
    startingOffsets       earliest | latest | {"topic": {"0": 42, "1": -2}}
    endingOffsets         latest | {"topic": {"0": 100, "1": -1}}     (batch only)
    startingTimestamp     ms since the epoch: first offset at or after it
    maxOffsetsPerTrigger  records per micro-batch, across partitions  (streaming)
    failOnDataLoss        true | false: offsets deleted by retention are an error
    minPartitions         split offset ranges until there are at least this many tasks
    includeHeaders        true | false: add the ``headers`` column

Schema Registry options (reader and writer; see :mod:`sluice.spark.registry_values`)::

    valueSchema / keySchema   registry: values (keys) are framed registry values, read
                              into typed columns / written from them
    schemaRegistryUrl         base URL(s), comma-separated (default http://127.0.0.1:8081)
    schemaRegistryUserInfo    user:password for HTTP basic auth
    subject / keySubject      default <topic>-value / <topic>-key (one topic only)
    schemaVersion             reader: the value subject's version to plan with (latest)
    mode                      reader: PERMISSIVE (default; a _decode_error column) |
                              FAILFAST (an undecodable record fails the query)
    autoRegister              writer: register the DataFrame's value (key) type as an
                              Avro schema (default false: use the subject's latest)

Writer options::

    bootstrap.servers       host:port[,host:port]                    (required)
    topic                   every row goes there (else the topic column)
    acks, linger.ms, compression.type     as the producer's
    deliveryGuarantee       at-least-once (default) | exactly-once   (exactly-once:
                            streaming only, each micro-batch committed in transactions
                            keyed by the query's checkpointLocation)
    transactionalIdPrefix   exactly-once: the prefix of the tasks' transactional ids
                            (default: derived from checkpointLocation)
    transaction.timeout.ms  exactly-once: how long a micro-batch's transactions may stay
                            open before the broker aborts them (default 600000)

In offset JSON, -2 means earliest and -1 means latest, as in Kafka. Every problem is
a :class:`SluiceOptionError` whose message names the option.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from sluice.client.cluster import parse_bootstrap
from sluice.common.ids import TopicPartition

EARLIEST = -2
LATEST = -1

PARTITION_BYTES_MAX_DEFAULT = 8 * 1024 * 1024
"""Bytes one partition contributes to one Fetch answer in a read task: large, because
a task reads one partition and each answer becomes one Arrow batch."""

FETCH_WAIT_MS_DEFAULT = 500
"""Long-poll wait of one Fetch in a read task (the range end is known to exist)."""


class SluiceOptionError(ValueError):
    """A data source option is missing, malformed or contradicts another one."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which topics to read: one of ``topics``, ``pattern`` or ``assigned``."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def describe(self) -> str:
        if self.pattern is not None:
            return f"subscribePattern {self.pattern!r}"
        if self.assigned:
            return "assign " + ", ".join(f"{tp.topic}-{tp.partition}" for tp in self.assigned)
        return "subscribe " + ",".join(self.topics)


@dataclass(frozen=True, slots=True)
class OffsetChoice:
    """``earliest``/``latest`` for every partition, or per partition (JSON)."""

    default: int
    """EARLIEST or LATEST, for partitions the JSON does not name."""
    per_partition: tuple[tuple[TopicPartition, int], ...] = ()

    def for_partition(self, topic_partition: TopicPartition) -> int:
        for named, offset in self.per_partition:
            if named == topic_partition:
                return offset
        return self.default


REGISTRY = "registry"
"""The value of ``valueSchema`` / ``keySchema`` that turns on registry decoding."""

DEFAULT_SCHEMA_REGISTRY_URL = "http://127.0.0.1:8081"
PERMISSIVE = "PERMISSIVE"
FAILFAST = "FAILFAST"


@dataclass(frozen=True, slots=True)
class RegistryOptions:
    """Keys and values framed with a registry schema id: where the registry is and which
    subjects name the schemas. A subject of None means that part stays bytes."""

    url: str
    user_info: str | None
    value_subject: str | None
    key_subject: str | None
    value_version: str = "latest"
    fail_fast: bool = False
    auto_register: bool = False


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Everything the reader needs, picklable (plain data, no sockets)."""

    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetChoice
    ending: OffsetChoice
    starting_timestamp_ms: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    min_partitions: int | None
    include_headers: bool
    partition_bytes_max: int = PARTITION_BYTES_MAX_DEFAULT
    fetch_wait_ms: int = FETCH_WAIT_MS_DEFAULT
    registry: RegistryOptions | None = None
    """Decode keys and/or values with registry schemas."""


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """Everything the writers need."""

    bootstrap_servers: str
    topic: str | None
    """When set, every row goes to this topic (it overrides a ``topic`` column)."""
    acks: str
    linger_ms: int
    compression_type: str
    exactly_once: bool = False
    transactional_id_prefix: str | None = None
    """Exactly-once: task ``p`` of every micro-batch writes as ``<prefix>-<p>``."""
    transaction_timeout_ms: int = 600_000
    registry: RegistryOptions | None = None
    """Encode keys and/or values with registry schemas."""


EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once"
TRANSACTION_TIMEOUT_MS_DEFAULT = 600_000
TRANSACTIONAL_ID_PREFIX_FROM_CHECKPOINT = "sluice-spark-"
"""Default prefix: this plus a digest of the checkpoint location, so a restarted query
(same checkpoint) fences and takes over its own earlier tasks' transactions."""


def _lower_keys(options: dict[str, str]) -> dict[str, str]:
    # Spark passes options case-insensitively (a CaseInsensitiveDict); normalise.
    return {str(k).lower(): str(v) for k, v in options.items()}


def _bootstrap(options: dict[str, str]) -> str:
    value = options.get("bootstrap.servers") or options.get("kafka.bootstrap.servers")
    if not value:
        raise SluiceOptionError(
            "option bootstrap.servers is required, e.g. "
            '.option("bootstrap.servers", "127.0.0.1:9092")'
        )
    try:
        parse_bootstrap(value)
    except ValueError as e:
        raise SluiceOptionError(f"option bootstrap.servers: {e}") from None
    return value


def _json(options: dict[str, str], name: str) -> Any:
    text = options[name.lower()]
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SluiceOptionError(f"option {name} is not valid JSON ({e.msg}): {text!r}") from None


def _subscription(options: dict[str, str]) -> Subscription:
    given = [
        name for name in ("subscribe", "subscribePattern", "assign") if name.lower() in options
    ]
    if len(given) != 1:
        raise SluiceOptionError(
            "exactly one of the options subscribe, subscribePattern, assign is required"
            + (f" (got {', '.join(given)})" if given else "")
        )
    if given[0] == "subscribe":
        topics = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
        if not topics:
            raise SluiceOptionError("option subscribe names no topic")
        return Subscription(topics=topics)
    if given[0] == "subscribePattern":
        pattern = options["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as e:
            raise SluiceOptionError(f"option subscribePattern {pattern!r}: {e}") from None
        return Subscription(pattern=pattern)
    assigned = _json(options, "assign")
    if not isinstance(assigned, dict) or not assigned:
        raise SluiceOptionError(
            'option assign must be a JSON object of topic to partitions, e.g. {"orders": [0, 1]}'
        )
    partitions: list[TopicPartition] = []
    for topic, indexes in assigned.items():
        if not isinstance(indexes, list) or not all(isinstance(i, int) and i >= 0 for i in indexes):
            raise SluiceOptionError(
                f"option assign: topic {topic!r} must map to a list of partition numbers"
            )
        partitions.extend(TopicPartition(topic, i) for i in indexes)
    return Subscription(assigned=tuple(partitions))


def _offsets(
    options: dict[str, str], name: str, default: int, *, allow_earliest: bool
) -> OffsetChoice:
    text = options.get(name.lower())
    if text is None:
        return OffsetChoice(default)
    word = text.strip().lower()
    if word == "earliest":
        if not allow_earliest:
            raise SluiceOptionError(f"option {name} cannot be earliest")
        return OffsetChoice(EARLIEST)
    if word == "latest":
        return OffsetChoice(LATEST)
    parsed = _json(options, name)
    if not isinstance(parsed, dict):
        raise SluiceOptionError(
            f'option {name} must be earliest, latest or JSON like {{"orders": {{"0": 42}}}}'
        )
    per_partition: list[tuple[TopicPartition, int]] = []
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise SluiceOptionError(
                f"option {name}: topic {topic!r} must map to an object of partition to offset"
            )
        for partition_text, offset in partitions.items():
            try:
                partition = int(partition_text)
            except ValueError:
                raise SluiceOptionError(
                    f"option {name}: partition {partition_text!r} of topic {topic!r} "
                    "is not a number"
                ) from None
            if not isinstance(offset, int) or offset < EARLIEST:
                raise SluiceOptionError(
                    f"option {name}: offset {offset!r} of {topic}-{partition} must be an "
                    "offset >= 0, -2 (earliest) or -1 (latest)"
                )
            if offset == EARLIEST and not allow_earliest:
                raise SluiceOptionError(f"option {name}: -2 (earliest) is not an ending offset")
            per_partition.append((TopicPartition(topic, partition), offset))
    return OffsetChoice(default, tuple(per_partition))


def _positive_int(options: dict[str, str], name: str) -> int | None:
    text = options.get(name.lower())
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise SluiceOptionError(f"option {name} must be a whole number, not {text!r}") from None
    if value <= 0:
        raise SluiceOptionError(f"option {name} must be positive, not {value}")
    return value


def _boolean(options: dict[str, str], name: str, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    if text.strip().lower() in {"true", "1", "yes"}:
        return True
    if text.strip().lower() in {"false", "0", "no"}:
        return False
    raise SluiceOptionError(f"option {name} must be true or false, not {text!r}")


def _registry(
    options: dict[str, str], topic: str | None, *, writing: bool
) -> RegistryOptions | None:
    """The registry options, or None when neither valueSchema nor keySchema asks."""
    wanted: dict[str, bool] = {}
    for part in ("value", "key"):
        text = options.get(f"{part}schema")
        if text is not None and text.strip().lower() != REGISTRY:
            raise SluiceOptionError(f"option {part}Schema must be {REGISTRY}, not {text!r}")
        wanted[part] = text is not None
    if not any(wanted.values()):
        for name in ("subject", "keySubject", "autoRegister", "schemaVersion"):
            if name.lower() in options:
                raise SluiceOptionError(
                    f"option {name} needs valueSchema=registry or keySchema=registry"
                )
        return None
    subjects: dict[str, str | None] = {}
    for part, option in (("value", "subject"), ("key", "keySubject")):
        given = options.get(option.lower()) or None
        if not wanted[part]:
            subjects[part] = None
        elif given is not None:
            subjects[part] = given
        elif topic is None:
            raise SluiceOptionError(
                f"option {option} is required with {part}Schema=registry when "
                + ("the topic option is not set" if writing else "more than one topic is read")
            )
        else:
            subjects[part] = f"{topic}-{part}"
    if writing and "schemaversion" in options:
        raise SluiceOptionError("option schemaVersion is for reading")
    if not writing and "autoregister" in options:
        raise SluiceOptionError("option autoRegister is for writing")
    version = options.get("schemaversion", "latest").strip().lower()
    if version != "latest" and not (version.isdigit() and int(version) > 0):
        raise SluiceOptionError(
            f"option schemaVersion must be latest or a version number, not {version!r}"
        )
    mode = options.get("mode", PERMISSIVE).strip().upper()
    if not writing and mode not in (PERMISSIVE, FAILFAST):
        raise SluiceOptionError(f"option mode must be {PERMISSIVE} or {FAILFAST}, not {mode!r}")
    return RegistryOptions(
        url=options.get("schemaregistryurl") or DEFAULT_SCHEMA_REGISTRY_URL,
        user_info=options.get("schemaregistryuserinfo") or None,
        value_subject=subjects["value"],
        key_subject=subjects["key"],
        value_version=version,
        fail_fast=mode == FAILFAST,
        auto_register=_boolean(options, "autoRegister", False),
    )


def _single_topic(subscription: Subscription) -> str | None:
    topics = set(subscription.topics) | {tp.topic for tp in subscription.assigned}
    return next(iter(topics)) if len(topics) == 1 else None


def parse_source_registry_options(raw: dict[str, str]) -> RegistryOptions | None:
    """Only the reader's registry options (what the columns depend on)."""
    options = _lower_keys(raw)
    return _registry(options, _single_topic(_subscription(options)), writing=False)


def parse_source_options(raw: dict[str, str], *, streaming: bool) -> SourceOptions:
    """Check the reader options. Streaming starts at latest by default (as Spark's
    Kafka source does), batch at earliest."""
    options = _lower_keys(raw)
    bootstrap = _bootstrap(options)
    subscription = _subscription(options)
    if "startingtimestamp" in options and "startingoffsets" in options:
        raise SluiceOptionError("options startingOffsets and startingTimestamp exclude each other")
    starting_timestamp_ms: int | None = None
    if "startingtimestamp" in options:
        text = options["startingtimestamp"]
        try:
            starting_timestamp_ms = int(text)
        except ValueError:
            raise SluiceOptionError(
                f"option startingTimestamp must be milliseconds since the epoch, not {text!r}"
            ) from None
    if streaming and "endingoffsets" in options:
        raise SluiceOptionError("option endingOffsets is for batch queries only")
    if not streaming and "maxoffsetspertrigger" in options:
        raise SluiceOptionError("option maxOffsetsPerTrigger is for streaming queries only")
    return SourceOptions(
        bootstrap_servers=bootstrap,
        subscription=subscription,
        starting=_offsets(
            options, "startingOffsets", LATEST if streaming else EARLIEST, allow_earliest=True
        ),
        ending=_offsets(options, "endingOffsets", LATEST, allow_earliest=False),
        starting_timestamp_ms=starting_timestamp_ms,
        max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger"),
        fail_on_data_loss=_boolean(options, "failOnDataLoss", True),
        min_partitions=_positive_int(options, "minPartitions"),
        include_headers=_boolean(options, "includeHeaders", False),
        partition_bytes_max=_positive_int(options, "fetch.partition.bytes.max")
        or PARTITION_BYTES_MAX_DEFAULT,
        registry=_registry(options, _single_topic(subscription), writing=False),
    )


def parse_sink_options(raw: dict[str, str], *, streaming: bool = False) -> SinkOptions:
    """Check the writer options (the columns are checked against the schema)."""
    options = _lower_keys(raw)
    acks = options.get("acks", "all")
    if acks not in {"all", "-1", "0", "1"}:
        raise SluiceOptionError(f"option acks must be all, 0 or 1, not {acks!r}")
    guarantee = options.get("deliveryguarantee", AT_LEAST_ONCE)
    if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise SluiceOptionError(
            f"option deliveryGuarantee must be {AT_LEAST_ONCE} or {EXACTLY_ONCE}, not {guarantee!r}"
        )
    exactly_once = guarantee == EXACTLY_ONCE
    prefix = options.get("transactionalidprefix") or None
    if exactly_once:
        if not streaming:
            raise SluiceOptionError(
                "option deliveryGuarantee exactly-once is for streaming writes "
                "(writeStream): a batch write that is run again writes again"
            )
        if acks not in {"all", "-1"}:
            raise SluiceOptionError("option deliveryGuarantee exactly-once needs acks=all")
        if prefix is None:
            checkpoint = options.get("checkpointlocation")
            if not checkpoint:
                raise SluiceOptionError(
                    "option deliveryGuarantee exactly-once needs a checkpointLocation "
                    "(or the option transactionalIdPrefix): the query's transactions are "
                    "keyed by it"
                )
            digest = hashlib.sha256(os.path.abspath(checkpoint).encode()).hexdigest()[:16]
            prefix = TRANSACTIONAL_ID_PREFIX_FROM_CHECKPOINT + digest
    linger_text = options.get("linger.ms", "5")
    try:
        linger_ms = int(linger_text)
    except ValueError:
        raise SluiceOptionError(f"option linger.ms must be a number, not {linger_text!r}") from None
    return SinkOptions(
        bootstrap_servers=_bootstrap(options),
        topic=options.get("topic") or None,
        acks=acks,
        linger_ms=linger_ms,
        compression_type=options.get("compression.type", "none"),
        exactly_once=exactly_once,
        transactional_id_prefix=prefix if exactly_once else None,
        transaction_timeout_ms=_positive_int(options, "transaction.timeout.ms")
        or TRANSACTION_TIMEOUT_MS_DEFAULT,
        registry=_registry(options, options.get("topic") or None, writing=True),
    )
