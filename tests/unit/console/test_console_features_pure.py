"""What the console decides about Sluice's features from what the client returned:
views, whether delayed delivery is offered, delays per topic, share group lag, and
which transactions are open or hanging."""

from __future__ import annotations

from sluice.client.admin import ConfigEntry, ConfigSource
from sluice.client.admin_delays import PartitionDelays
from sluice.client.admin_share_groups import SharePartitionOffset
from sluice.client.admin_transactions import TransactionDescription, TransactionListing
from sluice.client.cluster import PartitionMetadata, TopicMetadata
from sluice.common import errors
from sluice.common.ids import TopicPartition
from sluice.console import features, formatting, make_app
from sluice.console.keys import TEMPLATES_KEY
from sluice.console.sampler import share_lag_of, share_lags


def config(
    name: str, value: str | None, source: ConfigSource = ConfigSource.DEFAULT
) -> ConfigEntry:
    return ConfigEntry(name, value, source)


def topic(name: str, *leaders: int, internal: bool = False) -> TopicMetadata:
    return TopicMetadata(
        name,
        tuple(
            PartitionMetadata(name, index, leader, 0, (leader,), (leader,))
            for index, leader in enumerate(leaders)
        ),
        is_internal=internal,
    )


def test_a_view_is_known_by_its_source_config() -> None:
    configs = {
        "sluice.view.source": config("sluice.view.source", "orders", ConfigSource.TOPIC),
        "sluice.view.filter": config("sluice.view.filter", "tag = 'red'", ConfigSource.TOPIC),
    }
    assert features.view_of(configs) == features.ViewOf("orders", "tag = 'red'")
    ordinary = {"sluice.view.source": config("sluice.view.source", None)}
    assert features.view_of(ordinary) is None
    assert features.view_of({}) is None  # a cluster without views


def test_only_topics_laid_out_like_the_source_can_be_its_views() -> None:
    source = topic("orders", 0, 1)
    candidates = [
        source,
        topic("red-orders", 0, 1),
        topic("other", 1, 0),
        topic("small", 0),
        topic("__internal", 0, 1, internal=True),
    ]
    assert features.view_candidates(source, candidates) == ["red-orders"]


def test_delayed_delivery_is_offered_where_topics_carry_its_config() -> None:
    assert features.offers_delayed_delivery(
        {"sluice.delivery.delay.ms": config("sluice.delivery.delay.ms", "0")}
    )
    assert not features.offers_delayed_delivery({"retention.ms": config("retention.ms", "1")})


def test_a_topics_delays_add_up_over_its_partitions() -> None:
    partitions = [
        PartitionDelays(0, 0, pending=2, fired=5, next_due_ms=2_000, first=()),
        PartitionDelays(1, 0, pending=0, fired=1, next_due_ms=None, first=()),
        PartitionDelays(2, 0, pending=1, fired=0, next_due_ms=1_000, first=()),
    ]
    assert features.topic_delays("t", partitions) == features.TopicDelays("t", 3, 6, 1_000, 2)
    assert features.topic_delays("t", []) == features.TopicDelays("t", 0, 0, None, 0)


def test_share_lag_is_the_reported_one_else_end_minus_start() -> None:
    assert share_lag_of(SharePartitionOffset(4, lag=6), end_offset=100) == 6
    assert share_lag_of(SharePartitionOffset(4), end_offset=10) == 6
    assert share_lag_of(SharePartitionOffset(4), end_offset=None) is None
    assert share_lag_of(SharePartitionOffset(-1), end_offset=10) is None  # not read yet
    failed = SharePartitionOffset(4, error=errors.for_code(3)("gone"))
    assert share_lag_of(failed, end_offset=10) is None
    read, unread = TopicPartition("t", 0), TopicPartition("t", 1)
    lags = share_lags(
        {unread: SharePartitionOffset(-1), read: SharePartitionOffset(4, lag=5)},
        {read: 10, unread: 3}.get,
    )
    assert list(lags) == [read]
    assert (lags[read].committed, lags[read].end_offset, lags[read].lag) == (4, 10, 5)


def described(state: str, start_ms: int, timeout_ms: int = 60_000) -> TransactionDescription:
    return TransactionDescription("tx", state, 7, 0, timeout_ms, start_ms, ())


def test_a_transaction_open_past_its_timeout_hangs() -> None:
    listing = TransactionListing("tx", 7, "Ongoing")
    now_ms = 1_000_000
    young = features.transaction_row(listing, described("Ongoing", now_ms - 1_000), now_ms)
    assert (young.hanging, young.open_ms) == (False, 1_000)
    old = features.transaction_row(listing, described("Ongoing", now_ms - 61_000), now_ms)
    assert (old.hanging, old.open_ms) == (True, 61_000)
    done = features.transaction_row(listing, described("CompleteCommit", -1), now_ms)
    assert (done.hanging, done.open_ms, done.state) == (False, None, "CompleteCommit")
    unknown = features.transaction_row(listing, None, now_ms)
    assert (unknown.hanging, unknown.state, unknown.partitions) == (False, "Ongoing", ())


def test_open_and_hanging_transactions_come_first() -> None:
    now_ms = 1_000_000

    def row(transactional_id: str, state: str, age_ms: int) -> features.TransactionRow:
        listing = TransactionListing(transactional_id, 1, state)
        start_ms = now_ms - age_ms if features.is_open(state) else -1
        description = TransactionDescription(transactional_id, state, 1, 0, 60_000, start_ms, ())
        return features.transaction_row(listing, description, now_ms)

    rows = [
        row("a", "CompleteCommit", 0),
        row("b", "Ongoing", 1_000),
        row("c", "Empty", 0),
        row("d", "PrepareCommit", 120_000),
    ]
    assert [r.listing.transactional_id for r in features.row_order(rows)] == ["d", "b", "a", "c"]
    listings = [r.listing for r in rows]
    assert [t.transactional_id for t in features.listing_order(listings)] == ["b", "d", "a", "c"]


def test_durations_read_in_the_largest_unit_that_fits() -> None:
    assert formatting.format_duration_ms(None) == "–"
    assert formatting.format_duration_ms(850) == "850 ms"
    assert formatting.format_duration_ms(12_500) == "12.5 s"
    assert formatting.format_duration_ms(200_000) == "3 min 20 s"
    assert formatting.format_duration_ms(7_500_000) == "2 h 5 min"


def render(template: str, **context: object) -> str:
    """A page of the console as its handler renders it (make_app connects to nothing
    until it starts)."""
    environment = make_app("127.0.0.1:9", {})[TEMPLATES_KEY]
    page: str = environment.get_template(template).render(
        bootstrap="127.0.0.1:9",
        read_only=False,
        interval_s=2.0,
        refresh_ms=2000,
        sampler=None,
        path=f"/{template.removesuffix('.html')}",
        **context,
    )
    return page


def test_a_cluster_without_delayed_delivery_gets_a_note_not_a_table() -> None:
    page = render("delays.html", offered=False, rows=[])
    assert "This cluster does not offer delayed delivery" in page
    assert '<table id="delays">' not in page


def test_a_cluster_refusing_transactions_gets_a_note_not_a_table() -> None:
    page = render(
        "transactions.html", rows=[], refused="UNSUPPORTED VERSION: no ListTransactions", capped=0
    )
    assert 'id="transactions-refused"' in page
    assert "(UNSUPPORTED VERSION: no ListTransactions)" in page
    assert '<table id="transactions">' not in page
