"""Listener settings under Kafka's names: several listeners, the security protocol map,
the inter-broker listener, TLS settings globally and per listener, and the errors for
combinations that cannot be served; broker registrations with every endpoint, old ones
(host and port only) still read."""

from __future__ import annotations

import pytest

from sluice.cluster.model import BrokerInfo, Endpoint
from sluice.common.config import (
    SERVED_SECURITY_PROTOCOLS,
    BrokerConfig,
    BrokerConfigError,
    Listener,
)


def _config(**properties: str) -> BrokerConfig:
    config = BrokerConfig()
    config.apply_properties({name.replace("_", "."): value for name, value in properties.items()})
    return config


def test_several_listeners_with_custom_names_map_to_security_protocols() -> None:
    config = BrokerConfig()
    config.apply_properties(
        {
            "listeners": "INTERNAL://127.0.0.1:9093,EXTERNAL://:9094",
            "advertised.listeners": "EXTERNAL://broker1.example:19094",
            "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "internal",
            "ssl.keystore.location": "/keys/broker.pem",
            "listener.name.internal.ssl.client.auth": "required",
        }
    )
    config.check_listeners()
    config.check_advertised_address()
    assert config.listener_list() == (
        Listener("INTERNAL", "127.0.0.1", 9093),
        Listener("EXTERNAL", "", 9094),
    )
    assert (config.host, config.port) == ("127.0.0.1", 9093)
    assert config.security_protocol("INTERNAL") == "SSL"
    assert config.security_protocol("EXTERNAL") == "PLAINTEXT"
    assert config.inter_broker_listener() == "INTERNAL"
    assert config.listener_setting("INTERNAL", "ssl.client.auth") == "required"
    assert config.listener_setting("EXTERNAL", "ssl.client.auth") is None
    assert config.listener_setting("EXTERNAL", "ssl.keystore.location") == "/keys/broker.pem"


def test_defaults_are_one_plaintext_listener_which_is_the_inter_broker_one() -> None:
    config = BrokerConfig()
    config.check_listeners()
    assert config.listener_list() == (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    assert config.inter_broker_listener() == "PLAINTEXT"
    assert config.security_protocol("SSL") == "SSL"


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        (
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:9093",
                "zookeeper.connect": "127.0.0.1:2181",
                "sluice.inter.broker.sasl.username": "broker",
            },
            "set sluice.inter.broker.sasl.username and sluice.inter.broker.sasl.password",
        ),
        ({"listeners": "SASL_SSL://127.0.0.1:9093"}, "ssl.keystore.location"),
        ({"listeners": "SSL://127.0.0.1:9093"}, "ssl.keystore.location"),
        ({"listeners": "OTHER://127.0.0.1:9093"}, "listener OTHER has no security protocol"),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9093,SSL://127.0.0.1:9093"},
            "each listener needs a port of its own",
        ),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:9093",
                "listener.name.ssl.ssl.keystore.location": "/k.pem",
            },
            "no listener is named SSL",
        ),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9093", "inter.broker.listener.name": "SSL"},
            "inter.broker.listener.name=SSL names no listener",
        ),
    ],
)
def test_combinations_that_cannot_be_served_are_refused(
    properties: dict[str, str], expected: str
) -> None:
    config = BrokerConfig()
    config.apply_properties(properties)
    with pytest.raises(BrokerConfigError, match=expected):
        config.check_listeners()


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("ssl.client.auth", "sometimes", "not one of none, requested, required"),
        ("sasl.enabled.mechanisms", "GSSAPI", "GSSAPI: the mechanisms served are SCRAM-SHA-256"),
        ("ssl.keystore.type", "JKS", "not one of PEM"),
        ("listener.security.protocol.map", "INTERNAL=SSL", "is not NAME:PROTOCOL"),
        ("ssl.enabled.protocols", "TLSv1.1", "not one of TLSv1.2, TLSv1.3"),
        ("listeners", "SSL://a:1,SSL://b:2", "given twice"),
    ],
)
def test_bad_values_are_refused_with_their_setting(name: str, value: str, expected: str) -> None:
    with pytest.raises(BrokerConfigError, match=expected):
        BrokerConfig().apply_properties({name: value})


def test_every_security_protocol_is_served() -> None:
    assert {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"} <= SERVED_SECURITY_PROTOCOLS
    config = BrokerConfig()
    config.apply_properties({"listeners": "SASL_PLAINTEXT://127.0.0.1:9093"})
    config.check_listeners()


def test_registrations_carry_every_endpoint_and_old_ones_still_read() -> None:
    broker = BrokerInfo(
        1,
        "10.0.0.1",
        9093,
        endpoints=(
            Endpoint("INTERNAL", "10.0.0.1", 9093, "SSL"),
            Endpoint("EXTERNAL", "broker1.example", 19094, "PLAINTEXT"),
        ),
    )
    again = BrokerInfo.from_json(broker.to_json(), epoch=7)
    assert again.endpoints == broker.endpoints and again.epoch == 7
    assert again.address("EXTERNAL") == ("broker1.example", 19094)
    assert again.address("INTERNAL") == ("10.0.0.1", 9093)
    assert again.address("UNKNOWN") == ("10.0.0.1", 9093)
    old = BrokerInfo.from_json({"node_id": 2, "host": "h", "port": 9092, "rack": None})
    assert old.endpoints == () and old.address("SSL") == ("h", 9092)
