"""What the pages about Sluice's own features decide without asking the cluster: which
topic is a view of which, whether a cluster offers delayed delivery, which transactions
are open and which of those hang, and how the delays of a topic add up.

Everything here works on what the client already returned (configs, metadata,
descriptions), so it is tested without a broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sluice.client.admin import ConfigEntry
from sluice.client.admin_delays import PartitionDelays
from sluice.client.admin_transactions import TransactionDescription, TransactionListing
from sluice.client.cluster import TopicMetadata
from sluice.common.ids import TopicPartition

VIEW_SOURCE_CONFIG = "sluice.view.source"
VIEW_FILTER_CONFIG = "sluice.view.filter"
DELIVERY_DELAY_CONFIG = "sluice.delivery.delay.ms"
"""A topic config only a cluster with delayed delivery describes. SluiceDescribeDelays
is never advertised in ApiVersions (no Kafka client may see it), and a Kafka broker
closes the connection on an API key it does not know, so the console asks only a
cluster whose topics carry this config."""

OPEN_TRANSACTION_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})
"""States of a transaction that has begun and not yet ended (Kafka's names)."""


# ── views ──────────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class ViewOf:
    """A view's source topic and filter."""

    source: str
    filter: str


@dataclass(frozen=True, slots=True)
class ViewOver:
    """One view over a source topic: the view's name and filter."""

    name: str
    filter: str


def _value(configs: Mapping[str, ConfigEntry], name: str) -> str | None:
    entry = configs.get(name)
    return entry.value if entry is not None and entry.value else None


def view_of(configs: Mapping[str, ConfigEntry]) -> ViewOf | None:
    """The view a topic's configs describe; None for an ordinary topic (or a cluster
    without views)."""
    source = _value(configs, VIEW_SOURCE_CONFIG)
    if source is None:
        return None
    return ViewOf(source, _value(configs, VIEW_FILTER_CONFIG) or "")


def _layout(topic: TopicMetadata) -> tuple[tuple[int, int, tuple[int, ...]], ...]:
    return tuple(
        (p.partition, p.leader_id, tuple(p.replica_ids))
        for p in sorted(topic.partitions, key=lambda p: p.partition)
    )


def view_candidates(source: TopicMetadata, topics: Iterable[TopicMetadata]) -> list[str]:
    """Topics that may be views of ``source``, by name: a view is described with its
    source's partitions, leaders and replicas, so only topics laid out exactly like it
    can be (their configs decide)."""
    layout = _layout(source)
    return sorted(
        topic.name
        for topic in topics
        if topic.name != source.name and not topic.is_internal and _layout(topic) == layout
    )


# ── delayed delivery ───────────────────────────────────────────────────────────────────


def offers_delayed_delivery(configs: Mapping[str, ConfigEntry]) -> bool:
    """Whether the cluster that described these topic configs has delayed delivery."""
    return DELIVERY_DELAY_CONFIG in configs


@dataclass(frozen=True, slots=True)
class TopicDelays:
    """The delayed records of one topic, all partitions together."""

    topic: str
    pending: int
    fired: int
    next_due_ms: int | None
    partitions_waiting: int


def topic_delays(topic: str, partitions: Sequence[PartitionDelays]) -> TopicDelays:
    due = [p.next_due_ms for p in partitions if p.next_due_ms is not None]
    return TopicDelays(
        topic,
        sum(p.pending for p in partitions),
        sum(p.fired for p in partitions),
        min(due) if due else None,
        sum(1 for p in partitions if p.pending),
    )


# ── transactions ───────────────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class TransactionRow:
    """One transactional id on the transactions page. Without ``description`` (its
    coordinator would not describe it) only the listing's fields are known."""

    listing: TransactionListing
    description: TransactionDescription | None
    hanging: bool = False
    open_ms: int | None = None
    """How long the open transaction has run (None: none is open, or unknown)."""

    @property
    def state(self) -> str:
        return self.description.state if self.description else self.listing.state

    @property
    def partitions(self) -> tuple[TopicPartition, ...]:
        return self.description.partitions if self.description else ()


def is_open(state: str) -> bool:
    return state in OPEN_TRANSACTION_STATES


def transaction_row(
    listing: TransactionListing, description: TransactionDescription | None, now_ms: int
) -> TransactionRow:
    """The row of one id; *hanging* when its transaction has been open longer than its
    timeout (the coordinator should have aborted it by then)."""
    if description is None or not is_open(description.state) or description.start_ms < 0:
        return TransactionRow(listing, description)
    open_ms = max(now_ms - description.start_ms, 0)
    return TransactionRow(listing, description, open_ms > description.timeout_ms, open_ms)


def listing_order(listings: Iterable[TransactionListing]) -> list[TransactionListing]:
    """Open transactions first, then by transactional id (so a cap on how many are
    described keeps the ones worth seeing)."""
    return sorted(listings, key=lambda t: (not is_open(t.state), t.transactional_id))


def row_order(rows: Iterable[TransactionRow]) -> list[TransactionRow]:
    """Hanging ones first, then the other open ones, then the rest; by id within each."""
    return sorted(
        rows, key=lambda r: (not r.hanging, not is_open(r.state), r.listing.transactional_id)
    )
