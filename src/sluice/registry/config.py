"""The registry's settings, as the broker reads them from its configuration."""

from __future__ import annotations

from dataclasses import dataclass

from sluice.common.config import SCHEMA_COMPATIBILITY_LEVEL_DEFAULT, SCHEMA_MAX_BYTES_MAX

WRITES_WAITING_MAX = 1024
"""Writes queued behind the one in flight (they run one at a time); more are refused
with 50002 rather than held without bound."""

PARSES_IN_FLIGHT_MAX = 256
"""Parses (registrations, lookups, compatibility checks, serialized reads) handed to the
broker's worker threads and not yet done; more are refused with 50002."""


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    compatibility_level: str = SCHEMA_COMPATIBILITY_LEVEL_DEFAULT
    """``schema.compatibility.level``: the global level until one is set through the API."""
    schema_max_bytes: int = SCHEMA_MAX_BYTES_MAX
    """``schema.registry.schema.max.bytes``: the largest schema text accepted (UTF-8)."""
