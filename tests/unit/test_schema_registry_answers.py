"""The answers the broker's side of the registry gives by itself
(:mod:`sluice.broker.registry.answers`) come from the one error table,
:mod:`sluice.registry.errors`: codes and statuses as Confluent's."""

from __future__ import annotations

from sluice.broker.registry.answers import error_answer, forwarding_error, loading_timeout
from sluice.registry.errors import ErrorCode


def test_the_listener_s_own_codes_are_in_the_one_table_with_confluent_s_statuses() -> None:
    expected = {
        ErrorCode.BAD_REQUEST: 400,
        ErrorCode.UNAUTHORIZED: 401,
        ErrorCode.USER_NOT_AUTHORIZED: 403,
        ErrorCode.PAYLOAD_TOO_LARGE: 413,
        ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
        ErrorCode.SCHEMA_TOO_LARGE: 422,
    }
    for code, status in expected.items():
        answer = error_answer(code, "why")
        assert answer.status == status == code.http_status
        assert answer.body == {"error_code": int(code), "message": "why"}


def test_forwarding_failures_say_confluent_s_message_and_why() -> None:
    answer = forwarding_error("no leader")
    assert answer.status == 500
    assert answer.body == {
        "error_code": 50003,
        "message": "Error while forwarding the request to the leader: no leader",
    }
    timed_out = loading_timeout("_schemas is being loaded")
    assert timed_out.status == 500 and timed_out.body["error_code"] == 50002
