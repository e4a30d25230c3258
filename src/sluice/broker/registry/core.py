"""The registry's logic the broker runs (:mod:`sluice.registry`): its shard, made with
the broker's settings, the parsing and compatibility checks a shard's task asks for,
and what a call touches, for authorization."""

from __future__ import annotations

from collections.abc import Callable

from sluice.broker.registry.forwarding import RegistryShard
from sluice.broker.registry.service import RegistryCore
from sluice.common.config import BrokerConfig
from sluice.registry import checks, routes
from sluice.registry.config import RegistryConfig
from sluice.registry.shard import RegistryShard as Shard


def _new_shard(config: BrokerConfig) -> Callable[[], RegistryShard]:
    registry_config = RegistryConfig(
        compatibility_level=config.schema_compatibility_level,
        schema_max_bytes=config.schema_registry_schema_max_bytes,
    )
    return lambda: Shard(registry_config)


REGISTRY_CORE = RegistryCore(_new_shard, checks.run, routes.subject_of, routes.is_write)
"""What every broker runs; tests may give a broker another."""
