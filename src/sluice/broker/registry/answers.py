"""The registry answers the broker itself gives, without the shard: Confluent's error
bodies (``{"error_code": int, "message": str}``) for a request the listener refuses, and
for a call no broker could answer (no leader of ``_schemas``-0, the leader still
loading, forwarding failed).

Confluent's codes: a five-digit code's HTTP status is its first three digits (40301 →
403, 50003 → 500); a three-digit code is the status itself (401, 415).
"""

from __future__ import annotations

from typing import Final

from sluice.registry.api import Answer

UNAUTHORIZED: Final = 401
FORBIDDEN: Final = 40301
NOT_FOUND: Final = 404
BAD_REQUEST: Final = 400
PAYLOAD_TOO_LARGE: Final = 413
UNSUPPORTED_MEDIA_TYPE: Final = 415
INVALID_SCHEMA: Final = 42201
STORE_ERROR: Final = 50001
OPERATION_TIMEOUT: Final = 50002
FORWARDING_ERROR: Final = 50003

FORWARDING_MESSAGE: Final = "Error while forwarding the request to the leader"
"""Confluent's message of 50003 (the broker adds why)."""


def status_of(error_code: int) -> int:
    """The HTTP status of a Confluent error code."""
    return error_code if error_code < 1000 else error_code // 100


def error_answer(error_code: int, message: str) -> Answer:
    return Answer(status_of(error_code), {"error_code": error_code, "message": message})


def error_code_of(answer: Answer) -> int | None:
    """The ``error_code`` of an error answer; None for any other answer."""
    body = answer.body
    if answer.status < 400 or not isinstance(body, dict):
        return None
    code = body.get("error_code")
    return code if isinstance(code, int) and not isinstance(code, bool) else None
