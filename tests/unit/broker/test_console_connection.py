"""What the web console is told about reaching its broker: the inter-broker listener's
bootstrap address (a wildcard host made loopback) and Kafka client options for its
security protocol, or, for a console acting as each HTTP caller, a SASL listener without
the broker's credentials (no sockets: the broker is only built, not started)."""

from __future__ import annotations

from pathlib import Path

from sluice.broker.app import Broker
from sluice.common.config import BrokerConfig


def _broker(tmp_path: Path, properties: dict[str, str]) -> Broker:
    config = BrokerConfig()
    config.apply_properties(properties)
    config.data_dir = tmp_path / "data"
    return Broker(config)


def test_a_plaintext_listener_on_every_interface_is_reached_on_loopback(tmp_path: Path) -> None:
    broker = _broker(tmp_path, {"listeners": "PLAINTEXT://0.0.0.0:19092"})
    assert broker.console_connection() == ("127.0.0.1:19092", {"security_protocol": "PLAINTEXT"})


def test_the_inter_broker_listener_and_its_sasl_options_are_given(tmp_path: Path) -> None:
    broker = _broker(
        tmp_path,
        {
            "listeners": "CLIENTS://127.0.0.1:19092,BROKERS://127.0.0.2:19093",
            "listener.security.protocol.map": "CLIENTS:PLAINTEXT,BROKERS:SASL_PLAINTEXT",
            "inter.broker.listener.name": "BROKERS",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
            "sluice.inter.broker.sasl.username": "broker",
            "sluice.inter.broker.sasl.password": "secret",
        },
    )
    assert broker.console_connection() == (
        "127.0.0.2:19093",
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": "broker",
            "sasl_plain_password": "secret",
        },
    )


def test_a_console_acting_as_callers_gets_a_sasl_listener_and_no_credentials(
    tmp_path: Path,
) -> None:
    broker = _broker(
        tmp_path,
        {
            "listeners": "CLIENTS://0.0.0.0:19092,USERS://127.0.0.1:19093",
            "listener.security.protocol.map": "CLIENTS:PLAINTEXT,USERS:SASL_PLAINTEXT",
            "sluice.inter.broker.sasl.username": "broker",
            "sluice.inter.broker.sasl.password": "secret",
        },
    )
    assert broker.console_caller_connection() == (
        "127.0.0.1:19093",
        {"security_protocol": "SASL_PLAINTEXT"},
    )


def test_without_a_sasl_listener_no_console_can_act_as_callers(tmp_path: Path) -> None:
    broker = _broker(
        tmp_path, {"listeners": "PLAINTEXT://127.0.0.1:19092", "authorizer.enabled": "true"}
    )
    assert broker.config.http_secured()
    assert broker.console_caller_connection() is None
