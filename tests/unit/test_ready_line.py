"""Reading a broker's ports back from its ready line (sluice.testing.ready_line)."""

from __future__ import annotations

from sluice.testing.ready_line import ReadyListener, ready_http_url, ready_listeners

STARTING = (
    "2026-01-01 00:00:00,000 INFO sluice.broker.replication.partition: __consumer_offsets-0: ...\n"
)


def test_no_ready_line_yet() -> None:
    assert ready_listeners("") is None
    assert ready_listeners(STARTING) is None


def test_every_listener_of_the_ready_line_in_order() -> None:
    line = (
        "2026-01-01 00:00:01,000 INFO sluice.broker.app: sluice broker 3 ready on "
        "PLAINTEXT 127.0.0.1:41233 (PLAINTEXT), INTERNAL_2 0.0.0.0:38911 (SASL_SSL), "
        "V6 :::40001 (SSL) (data in /tmp/a, b (c), 3 partition(s))\n"
    )
    assert ready_listeners(STARTING + line + "later lines\n") == [
        ReadyListener("PLAINTEXT", "127.0.0.1", 41233, "PLAINTEXT"),
        ReadyListener("INTERNAL_2", "0.0.0.0", 38911, "SASL_SSL"),
        ReadyListener("V6", "::", 40001, "SSL"),
    ]


def test_the_http_url_of_the_ready_line() -> None:
    ready = (
        "2026-01-01 00:00:01,000 INFO sluice.broker.app: sluice broker 0 ready on "
        "PLAINTEXT 127.0.0.1:41233 (PLAINTEXT) (data in /tmp/a, 50 partition(s); single node; "
        "HTTP http://127.0.0.1:41877)\n"
    )
    assert ready_http_url(STARTING + ready + "HTTP http://x:1)\n") == "http://127.0.0.1:41877"
    without = ready.replace("HTTP http://127.0.0.1:41877", "no HTTP listener (http.port=0)")
    assert ready_http_url(STARTING + without) is None
    assert ready_http_url(STARTING) is None
