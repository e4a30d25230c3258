"""Kafka's default principal of a TLS connection: ``User:`` and the verified client
certificate's subject in RFC 2253 form; ``User:ANONYMOUS`` without one."""

from __future__ import annotations

from sluice.broker.network.tls import ANONYMOUS, principal_from_peercert, subject_rfc2253


def test_subject_is_written_most_specific_first_with_rfc2253_keywords() -> None:
    # getpeercert() lists the relative distinguished names as the certificate holds
    # them: country first, common name last.
    subject = (
        (("countryName", "DE"),),
        (("organizationName", "Example"),),
        (("organizationalUnitName", "eng"),),
        (("commonName", "alice"),),
    )
    assert subject_rfc2253(subject) == "CN=alice,OU=eng,O=Example,C=DE"
    assert principal_from_peercert({"subject": subject}) == "User:CN=alice,OU=eng,O=Example,C=DE"


def test_special_characters_and_multi_valued_names_are_escaped_and_joined() -> None:
    subject = (
        (("organizationName", "Acme, Inc."),),
        (("commonName", "#bob"), ("userId", "b+1")),
    )
    assert subject_rfc2253(subject) == "CN=\\#bob+UID=b\\+1,O=Acme\\, Inc."


def test_no_verified_certificate_is_anonymous() -> None:
    assert principal_from_peercert(None) == ANONYMOUS
    assert principal_from_peercert({}) == ANONYMOUS == "User:ANONYMOUS"
