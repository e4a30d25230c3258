"""What the registry is asked and what it answers: an HTTP call of Confluent's API as
plain data, so the broker that received it can answer it or forward it unchanged to the
broker hosting the registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JSON = Any
"""A value ``json.loads`` returns (or ``json.dumps`` takes)."""


@dataclass(frozen=True, slots=True)
class Call:
    """One request of Confluent's REST API.

    ``segments`` is the path split at ``/`` with each part percent-decoded
    (``/subjects/a%2Fb/versions`` is ``("subjects", "a/b", "versions")``), so a subject
    may hold any character. ``body`` is the parsed JSON body (None without one).
    """

    method: str
    segments: tuple[str, ...]
    query: Mapping[str, str] = field(default_factory=dict)
    body: JSON = None

    def to_json(self) -> dict[str, JSON]:
        return {
            "method": self.method,
            "segments": list(self.segments),
            "query": dict(self.query),
            "body": self.body,
        }

    @classmethod
    def from_json(cls, document: Mapping[str, JSON]) -> Call:
        """The call :meth:`to_json` wrote. Raises ValueError on any other document."""
        method, segments = document.get("method"), document.get("segments")
        query = document.get("query")
        if not isinstance(method, str) or not isinstance(segments, list):
            raise ValueError("a forwarded call needs a method and path segments")
        if not all(isinstance(part, str) for part in segments) or not isinstance(query, dict):
            raise ValueError("a forwarded call's segments and query must be strings")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in query.items()):
            raise ValueError("a forwarded call's query must map strings to strings")
        return cls(method, tuple(segments), query, document.get("body"))


@dataclass(frozen=True, slots=True)
class Answer:
    """The HTTP status and JSON body of Confluent's answer (errors are
    ``{"error_code": int, "message": str}``)."""

    status: int
    body: JSON

    def to_json(self) -> dict[str, JSON]:
        return {"status": self.status, "body": self.body}

    @classmethod
    def from_json(cls, document: Mapping[str, JSON]) -> Answer:
        status = document.get("status")
        if not isinstance(status, int) or isinstance(status, bool):
            raise ValueError("a forwarded answer needs an integer status")
        return cls(status, document.get("body"))
