"""The client's ``security_protocol`` and its options, as Kafka clients name them.

Kafka clients name a listener's security with ``security_protocol``, one of::

    PLAINTEXT        no TLS, no SASL
    SSL              TLS (ssl_cafile; ssl_certfile/ssl_keyfile for a client certificate)
    SASL_PLAINTEXT   SASL (sasl_mechanism, sasl_plain_username, sasl_plain_password)
    SASL_SSL         both: TLS first, then SASL inside it

:func:`security_from_options` turns those options (as ``sluice.Producer``,
``sluice.Consumer``, ``sluice.ShareConsumer`` and ``sluice.Admin`` take them) into the
two settings objects a :class:`~sluice.client.cluster.Cluster` is given,
:class:`~sluice.client.tls.TlsSettings` and
:class:`~sluice.client.connection.SaslSettings`, each None when the protocol does not
use it. Every inconsistency (SSL options with PLAINTEXT,
a missing file, SASL_SSL without credentials) is a ``ValueError`` raised before
anything connects, naming the option.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypedDict

from sluice.client.arguments import check_option_names
from sluice.client.connection import SaslSettings
from sluice.client.tls import TlsSettings

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")


class SecurityOptions(TypedDict, total=False):
    """The security options every client entry point takes as keywords (Kafka's
    names, as kafka-python spells them); see :func:`security_from_options`."""

    security_protocol: str
    ssl_cafile: str | None
    ssl_certfile: str | None
    ssl_keyfile: str | None
    ssl_password: str | None
    ssl_check_hostname: bool
    sasl_mechanism: str | None
    sasl_plain_username: str | None
    sasl_plain_password: str | None


def option_names(init: Callable[..., Any]) -> frozenset[str]:
    """Every keyword option a client class takes: the named parameters of its
    ``__init__`` and the security options its ``**security`` collects."""
    named = {
        name
        for name, parameter in inspect.signature(init).parameters.items()
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
        and name != "self"
    }
    return frozenset(named | SecurityOptions.__optional_keys__)


def security_for(
    owner: str, security: Mapping[str, Any], accepted: Collection[str]
) -> tuple[TlsSettings | None, SaslSettings | None]:
    """:func:`security_from_options` of the keywords a client class's ``**security``
    collected: those that are not security options are options ``owner`` does not take
    (a typo, usually), a TypeError naming the option and the closest of ``accepted``."""
    check_option_names(owner, security, SecurityOptions.__optional_keys__ | set(accepted))
    return security_from_options(**security)


def security_from_options(
    security_protocol: str = "PLAINTEXT",
    *,
    ssl_cafile: str | None = None,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
    ssl_password: str | None = None,
    ssl_check_hostname: bool = True,
    sasl_mechanism: str | None = None,
    sasl_plain_username: str | None = None,
    sasl_plain_password: str | None = None,
) -> tuple[TlsSettings | None, SaslSettings | None]:
    """The TLS and SASL settings of ``security_protocol`` and its options (Kafka's
    names); ``ValueError`` when they do not fit together."""
    protocol = security_protocol.upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(
            f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, "
            f"not {security_protocol!r}"
        )
    uses_tls = protocol in ("SSL", "SASL_SSL")
    uses_sasl = protocol.startswith("SASL_")
    tls: TlsSettings | None = None
    if uses_tls:
        tls = TlsSettings(
            ssl_cafile,
            certfile=ssl_certfile,
            keyfile=ssl_keyfile,
            password=ssl_password,
            check_hostname=ssl_check_hostname,
        )
        tls.context()  # unusable files fail now, not at the first connection
    else:
        given = [
            name
            for name, value in (
                ("ssl_cafile", ssl_cafile),
                ("ssl_certfile", ssl_certfile),
                ("ssl_keyfile", ssl_keyfile),
                ("ssl_password", ssl_password),
            )
            if value is not None
        ]
        if given:
            raise ValueError(
                f"{', '.join(given)} given but security_protocol is {protocol} (no TLS): "
                "use SSL or SASL_SSL"
            )
    sasl: SaslSettings | None = None
    if uses_sasl:
        if not (sasl_mechanism and sasl_plain_username and sasl_plain_password is not None):
            raise ValueError(
                f"security_protocol {protocol} needs sasl_mechanism, sasl_plain_username "
                "and sasl_plain_password"
            )
        mechanism = sasl_mechanism.upper()
        if mechanism not in SASL_MECHANISMS:
            raise ValueError(
                f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)}, "
                f"not {sasl_mechanism!r}"
            )
        sasl = SaslSettings(mechanism, sasl_plain_username, sasl_plain_password)
    elif sasl_mechanism or sasl_plain_username or sasl_plain_password is not None:
        raise ValueError(
            f"SASL options given but security_protocol is {protocol}: "
            "use SASL_PLAINTEXT or SASL_SSL"
        )
    return tls, sasl
