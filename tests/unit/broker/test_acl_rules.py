"""Every API the broker serves has a row in the authorization table."""

from __future__ import annotations

from sluice.broker.handlers.acl_rules import PRIVATE_RULES, RULES
from sluice.broker.handlers.table import HANDLERS, PRIVATE_HANDLERS
from sluice.protocol import private


def test_every_api_of_the_handler_table_has_a_rule() -> None:
    assert set(HANDLERS) - set(RULES) == set()
    assert set(RULES) - set(HANDLERS) == set()


def test_every_private_api_has_a_rule() -> None:
    names = {private.PRIVATE_API_NAMES[key] for key in PRIVATE_HANDLERS}
    assert names == set(PRIVATE_RULES)


def test_only_what_comes_before_authentication_needs_nothing() -> None:
    """ApiVersions and the SASL APIs come before authentication; everything else asks
    for something."""
    assert {key.name for key, needs in RULES.items() if not needs} == {
        "API_VERSIONS",
        "SASL_HANDSHAKE",
        "SASL_AUTHENTICATE",
    }
