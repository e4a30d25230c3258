"""The registry's settings, as the broker reads them from its configuration."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_COMPATIBILITY_LEVEL = "BACKWARD"
"""Confluent's default for ``schema.compatibility.level``."""

SCHEMA_MAX_BYTES_DEFAULT = 1024 * 1024
"""The default bound on one schema's text: a schema is a record of ``_schemas``, and
Kafka's default ``max.message.bytes`` is about one MiB."""

WRITES_WAITING_MAX = 1024
"""Writes queued behind the one in flight (they run one at a time); more are refused
with 50002 rather than held without bound."""

PARSES_IN_FLIGHT_MAX = 256
"""Parses (registrations, lookups, compatibility checks, serialized reads) handed to the
broker's worker threads and not yet done; more are refused with 50002."""


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    compatibility_level: str = DEFAULT_COMPATIBILITY_LEVEL
    """``schema.compatibility.level``: the global level until one is set through the API."""
    schema_max_bytes: int = SCHEMA_MAX_BYTES_DEFAULT
    """``schema.registry.schema.max.bytes``: the largest schema text accepted (UTF-8)."""
