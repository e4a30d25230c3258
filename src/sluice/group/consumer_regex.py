"""Regular-expression subscriptions of consumer groups (KIP-848), in RE2 syntax.

Kafka compiles a member's ``SubscribedTopicRegex`` with RE2/J and subscribes the member
to every topic whose whole name matches it (internal topics never match: the caller
leaves them out). Sluice uses
RE2 itself (the ``google-re2`` package), for two reasons:

- the same syntax: what RE2/J refuses (backreferences such as ``(a)\\1``, lookahead and
  lookbehind) RE2 refuses too, and both accept the same character classes, so a
  pattern means the same on Sluice as on Kafka. Python's ``re`` would accept patterns
  Kafka refuses and read some (``\\pL``, ``\\z``) differently;
- matching in time linear in the topic name: the pattern comes from a client and runs
  inside the coordinator, and a backtracking engine lets one pattern such as
  ``(a+)+$`` stall the broker for minutes.

A pattern RE2 refuses, or one longer than :data:`SUBSCRIBED_TOPIC_REGEX_BYTES_MAX`,
gets INVALID_REGULAR_EXPRESSION with RE2's reason.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

SUBSCRIBED_TOPIC_REGEX_BYTES_MAX = 32_767
"""Longest pattern accepted, in UTF-8 bytes: what the request's string can carry, and a
bound on the memory a compiled pattern may take."""
COMPILED_PATTERN_MEMORY_BYTES_MAX = 8 << 20
"""RE2's budget for one compiled pattern (its ``max_mem``, RE2's own default)."""
COMPILED_PATTERNS_CACHED_MAX = 1_024
"""Distinct patterns kept compiled; members of a group usually share one."""


class InvalidRegularExpression(ValueError):
    """The pattern is not valid RE2; the message says why."""


@functools.lru_cache(maxsize=COMPILED_PATTERNS_CACHED_MAX)
def _compile(pattern: str) -> object:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = COMPILED_PATTERN_MEMORY_BYTES_MAX
    try:
        return re2.compile(pattern, options)
    except re2.error as error:
        reason = error.args[0] if error.args else error
        if isinstance(reason, bytes):
            reason = reason.decode(errors="replace")
        raise InvalidRegularExpression(
            f"Invalid regular expression {pattern!r}: {reason}."
        ) from None


def check(pattern: str) -> None:
    """Raise :class:`InvalidRegularExpression` unless ``pattern`` is valid RE2."""
    if len(pattern.encode()) > SUBSCRIBED_TOPIC_REGEX_BYTES_MAX:
        raise InvalidRegularExpression(
            f"The regular expression is longer than {SUBSCRIBED_TOPIC_REGEX_BYTES_MAX} bytes."
        )
    _compile(pattern)


def matching_topics(pattern: str, topic_names: Iterable[str]) -> frozenset[str]:
    """The topics whose whole name matches ``pattern`` (checked first)."""
    check(pattern)
    compiled = _compile(pattern)
    return frozenset(
        name
        for name in topic_names
        if compiled.fullmatch(name) is not None  # type: ignore[attr-defined]
    )
