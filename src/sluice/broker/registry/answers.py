"""The registry answers the broker itself gives, without the shard: for a request the
listener refuses, and for a call no broker could answer (no leader of ``_schemas``-0,
the leader still loading, forwarding failed). Every code and status comes from the one
error table, :mod:`sluice.registry.errors`.
"""

from __future__ import annotations

from sluice.registry.api import Answer
from sluice.registry.errors import (
    ErrorCode,
    RegistryError,
    answer_for,
    forwarding_failed,
    operation_timeout,
)


def error_answer(code: ErrorCode, message: str) -> Answer:
    """Confluent's error answer: the code's HTTP status, ``{"error_code", "message"}``."""
    return answer_for(RegistryError(code, message))


def forwarding_error(why: str) -> Answer:
    """50003 with Confluent's message and why the call could not be forwarded."""
    return answer_for(forwarding_failed(f"{forwarding_failed().message}: {why}"))


def loading_timeout(why: str) -> Answer:
    """50002: the registry's leader was still loading ``_schemas`` when time ran out."""
    return answer_for(operation_timeout(f"Operation timed out: {why}"))


def error_code_of(answer: Answer) -> int | None:
    """The ``error_code`` of an error answer; None for any other answer."""
    body = answer.body
    if answer.status < 400 or not isinstance(body, dict):
        return None
    code = body.get("error_code")
    return code if isinstance(code, int) and not isinstance(code, bool) else None
