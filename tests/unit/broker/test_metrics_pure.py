"""The pure parts of the broker's metrics: finding error codes in kio responses (top
level, per topic, per partition), the lag rule, how instruments become Prometheus
families, and the HTTP listener's own routes winning over a console's."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import kio.schema.describe_groups.v5.response as describe_groups
import kio.schema.produce.v9.response as produce
from aiohttp import web
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64
from prometheus_client.parser import text_string_to_metric_families

from sluice.broker.observability.http_server import HttpListener
from sluice.broker.observability.metrics.errors import error_codes, error_name, error_paths
from sluice.broker.observability.metrics.groups import lag
from sluice.broker.observability.metrics.registry import BrokerMetrics
from sluice.protocol.messages import make


def _partition(index: int, error: ErrorCode) -> object:
    return make(
        produce.PartitionProduceResponse,
        index=i32(index),
        error_code=error,
        base_offset=i64(-1),
        log_append_time=i64(-1),
        log_start_offset=i64(-1),
        record_errors=(),
        error_message=None,
    )


def test_error_codes_are_found_in_nested_partitions() -> None:
    response = make(
        produce.ProduceResponse,
        responses=(
            make(
                produce.TopicProduceResponse,
                name="a",
                partition_responses=(
                    _partition(0, ErrorCode.none),
                    _partition(1, ErrorCode.not_leader_or_follower),
                ),
            ),
            make(
                produce.TopicProduceResponse,
                name="b",
                partition_responses=(_partition(0, ErrorCode.unknown_topic_or_partition),),
            ),
        ),
        throttle_time=0,
    )
    assert sorted(error_codes(response)) == [3, 6]
    assert error_paths(produce.ProduceResponse).nested == ("responses",)


def test_a_response_without_errors_yields_none_and_top_level_codes_count() -> None:
    group = make(
        describe_groups.DescribedGroup,
        error_code=ErrorCode.group_authorization_failed,
        group_id="g",
        group_state="",
        protocol_type="",
        protocol_data="",
        members=(),
        authorized_operations=i32(0),
    )
    response = make(
        describe_groups.DescribeGroupsResponse,
        throttle_time=0,
        groups=(group,),
    )
    assert list(error_codes(response)) == [int(ErrorCode.group_authorization_failed)]
    empty = make(describe_groups.DescribeGroupsResponse, throttle_time=0, groups=())
    assert list(error_codes(empty)) == []


def test_error_names_are_kafkas() -> None:
    assert error_name(3) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert error_name(6) == "NOT_LEADER_OR_FOLLOWER"
    assert error_name(31_999) == "ERROR_31999"


def test_lag_is_never_negative() -> None:
    assert lag(10, 4) == 6
    assert lag(10, 10) == 0
    assert lag(8, 10) == 0  # a stale end offset behind the commit


def _families(metrics: BrokerMetrics) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_instruments_become_labelled_families() -> None:
    metrics = BrokerMetrics()
    metrics.requests.finished("Produce", "PLAINTEXT", 0.003)
    metrics.requests.finished("Produce", "PLAINTEXT", 0.2)
    metrics.requests.finished("Fetch", "SSL", 0.5)
    metrics.requests.count_errors("Produce", [3, 3, 6])
    metrics.traffic.produced("t", 100, 4)
    metrics.traffic.produced("t", 50, 1)
    metrics.traffic.bytes_out["t", "follower"] += 150
    found = _families(metrics)
    assert found["sluice_requests_total"] == {
        (("api", "Fetch"), ("listener", "SSL")): 1,
        (("api", "Produce"), ("listener", "PLAINTEXT")): 2,
    }
    assert found["sluice_request_errors_total"] == {
        (("api", "Produce"), ("error", "NOT_LEADER_OR_FOLLOWER")): 1,
        (("api", "Produce"), ("error", "UNKNOWN_TOPIC_OR_PARTITION")): 2,
    }
    buckets = found["sluice_request_duration_seconds_bucket"]
    assert buckets[(("api", "Produce"), ("le", "0.005"))] == 1
    assert buckets[(("api", "Produce"), ("le", "+Inf"))] == 2
    assert found["sluice_topic_bytes_in_total"] == {(("topic", "t"),): 150}
    assert found["sluice_topic_records_in_total"] == {(("topic", "t"),): 5}
    assert found["sluice_topic_bytes_out_total"] == {(("fetcher", "follower"), ("topic", "t")): 150}


def test_registries_are_per_broker() -> None:
    first, second = BrokerMetrics(), BrokerMetrics()
    first.traffic.produced("t", 1, 1)
    assert "sluice_topic_bytes_in_total" in _families(first)
    assert "sluice_topic_bytes_in_total" not in _families(second)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_brokers_routes_win_over_a_consoles_catch_all() -> None:
    async def console_page(request: web.Request) -> web.Response:
        return web.Response(text="console " + request.path)

    console = web.Application()
    console.router.add_get("/{tail:.*}", console_page)
    reasons: list[str | None] = ["loading"]

    async def scenario() -> None:
        listener = HttpListener("127.0.0.1", 0, BrokerMetrics(), lambda: reasons[0], console)
        await listener.start()
        try:
            base = listener.url
            loop = asyncio.get_running_loop()

            async def get(path: str) -> tuple[int, str]:
                return await loop.run_in_executor(None, _get, base + path)

            assert await get("/topics") == (200, "console /topics")
            assert await get("/") == (200, "console /")
            status, body = await get("/ready")
            assert (status, json.loads(body)) == (503, {"status": "not ready", "reason": "loading"})
            reasons[0] = None
            status, body = await get("/ready")
            assert (status, json.loads(body)) == (200, {"status": "ready"})
            status, body = await get("/health")
            assert (status, json.loads(body)) == (200, {"status": "ok"})
            status, body = await get("/metrics")
            assert status == 200 and "sluice_requests_in_flight" in body
        finally:
            await listener.stop()

    asyncio.run(scenario())
