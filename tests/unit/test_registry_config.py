"""The registry's settings and codes have one source each: the broker's settings, the
registry and the CLI take the same compatibility levels, defaults and error codes."""

from __future__ import annotations

import pytest

from sluice.cli.schemas import registry_failure
from sluice.client.schema_registry import SchemaRegistryError
from sluice.common.config import SCHEMA_COMPATIBILITY_LEVELS, SCHEMA_MAX_BYTES_MAX, BrokerConfig
from sluice.registry.api import Call
from sluice.registry.config import RegistryConfig
from sluice.registry.errors import ErrorCode, RegistryError
from sluice.registry.routes import route


def test_the_registry_s_defaults_are_the_broker_settings_defaults() -> None:
    broker, registry = BrokerConfig(), RegistryConfig()
    assert registry.compatibility_level == broker.schema_compatibility_level == "BACKWARD"
    assert registry.schema_max_bytes == broker.schema_registry_schema_max_bytes
    assert registry.schema_max_bytes == SCHEMA_MAX_BYTES_MAX == 1024 * 1024


@pytest.mark.parametrize("level", SCHEMA_COMPATIBILITY_LEVELS)
def test_every_level_the_setting_takes_the_api_takes(level: str) -> None:
    BrokerConfig().apply_properties({"schema.compatibility.level": level.lower()})
    route(Call("PUT", ("config",), {}, {"compatibility": level.lower()}))


def test_a_level_the_setting_refuses_the_api_refuses() -> None:
    with pytest.raises(RegistryError) as refused:
        route(Call("PUT", ("config",), {}, {"compatibility": "SIDEWAYS"}))
    assert refused.value.code is ErrorCode.INVALID_COMPATIBILITY_LEVEL


@pytest.mark.parametrize(
    ("code", "status"), [(ErrorCode.INCOMPATIBLE_SCHEMA.value, None), (409, 409)]
)
def test_the_cli_hints_by_the_registry_s_codes(code: int, status: int | None) -> None:
    """By the code the registry answers (40901) alone, and by Confluent 7.x's 409."""
    failure = registry_failure(SchemaRegistryError("incompatible", error_code=code, status=status))
    assert "sluice schemas check" in failure.message
