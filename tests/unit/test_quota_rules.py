"""Quota entities, Kafka's precedence, sampled rates and the throttle time formula."""

from __future__ import annotations

import pytest

from sluice.common.quotas import (
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaEntity,
    SampledRate,
    WindowConfig,
    parse_quota_value,
    resolve,
    throttle_ms,
)


def test_entity_keys_round_trip() -> None:
    for entity in (
        QuotaEntity("alice", None),
        QuotaEntity(None, "app"),
        QuotaEntity("alice", DEFAULT),
        QuotaEntity(DEFAULT, None),
    ):
        assert QuotaEntity.from_key(entity.key) == entity
    assert QuotaEntity("alice", "app").key == "user=alice,client-id=app"
    with pytest.raises(ValueError):
        QuotaEntity(None, None)
    with pytest.raises(ValueError):
        QuotaEntity.from_key("group=x")


def test_precedence_follows_kafka_and_is_per_quota_type() -> None:
    quotas = {
        QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 1.0, CONSUMER_BYTE_RATE: 1.0},
        QuotaEntity(None, "app"): {PRODUCER_BYTE_RATE: 2.0},
        QuotaEntity(DEFAULT, None): {PRODUCER_BYTE_RATE: 3.0},
        QuotaEntity(DEFAULT, "app"): {PRODUCER_BYTE_RATE: 4.0},
        QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 5.0},
        QuotaEntity("alice", "app"): {PRODUCER_BYTE_RATE: 6.0},
    }
    found = resolve(quotas, PRODUCER_BYTE_RATE, "alice", "app")
    assert found is not None and found.bound == 6.0 and found.bucket == ("alice", "app")
    found = resolve(quotas, PRODUCER_BYTE_RATE, "alice", "other")
    assert found is not None and found.bound == 5.0 and found.bucket == ("alice", None)
    found = resolve(quotas, PRODUCER_BYTE_RATE, "bob", "app")
    assert found is not None and found.bound == 4.0
    found = resolve(quotas, PRODUCER_BYTE_RATE, "bob", "other")
    assert found is not None and found.bound == 3.0 and found.bucket == ("bob", None)
    # Consumer rates are only set for the default client id.
    found = resolve(quotas, CONSUMER_BYTE_RATE, "alice", "app")
    assert found is not None and found.bound == 1.0 and found.bucket == (None, "app")
    assert resolve(quotas, REQUEST_PERCENTAGE, "alice", "app") is None
    only_clients = {QuotaEntity(None, "app"): {PRODUCER_BYTE_RATE: 2.0}}
    assert resolve(only_clients, PRODUCER_BYTE_RATE, "alice", "app") is not None
    assert resolve(only_clients, PRODUCER_BYTE_RATE, "alice", "other") is None


def test_rate_counts_at_least_all_but_one_window() -> None:
    rate = SampledRate(WindowConfig(samples=11, sample_seconds=1))
    rate.record(1000, now=100.0)
    # A lone burst is spread over ten windows (Kafka's Rate.windowSize).
    assert rate.measure(100.5) == pytest.approx(1000 / 10.5)
    for second in range(1, 20):
        rate.record(1000, now=100.0 + second)
    # Steady 1000 per second: samples older than eleven windows are gone.
    assert rate.measure(119.5) == pytest.approx(11_000 / 10.5)


def test_throttle_time_is_kafkas_formula_capped_at_the_whole_window() -> None:
    config = WindowConfig(samples=11, sample_seconds=1)
    rate = SampledRate(config)
    rate.record(1000, now=0.0)
    assert throttle_ms(rate, bound=1000, now=0.0) == 0
    rate = SampledRate(config)
    rate.record(11_000, now=0.0)
    # observed 1100/s against 1000/s over a 10 s window: 1 s.
    assert throttle_ms(rate, bound=1000, now=0.0) == 1000
    rate.record(9_000, now=0.0)
    assert throttle_ms(rate, bound=1000, now=0.0) == 10_000
    rate = SampledRate(config)
    rate.record(10_500, now=0.0)
    assert throttle_ms(rate, bound=1000, now=0.0) == 500
    rate.record(1_000_000, now=0.0)
    assert throttle_ms(rate, bound=1000, now=0.0) == 11_000
    rate.unrecord(1_000_000, now=0.0)
    assert throttle_ms(rate, bound=1000, now=0.0) == 500


def test_quota_values_are_checked() -> None:
    assert parse_quota_value(PRODUCER_BYTE_RATE, 1024) == 1024.0
    assert parse_quota_value(REQUEST_PERCENTAGE, 12.5) == 12.5
    for quota_type, value in (
        (PRODUCER_BYTE_RATE, -1),
        (PRODUCER_BYTE_RATE, 1.5),
        (REQUEST_PERCENTAGE, 0),
        ("controller_mutation_rate", 1),
    ):
        with pytest.raises(ValueError):
            parse_quota_value(quota_type, value)
