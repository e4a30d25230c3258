"""The client's security settings: ``security_protocol`` and its ssl_*/sasl_* options
checked before anything connects, the TLS context they make, every entry point taking
them, and the CLI's SLUICE_* variables. Connections over TLS to a real broker are in
tests/integration/test_client_tls.py.

The PEM files are made with the ``openssl`` command line, as the integration tests' are."""

from __future__ import annotations

import re
import ssl
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest

import sluice
from sluice.cli.common import SECURITY_ENV_VARS, security_from_environment
from sluice.client.connection import SaslSettings
from sluice.client.security import security_from_options
from sluice.client.tls import TlsSettings

KEY_PASSWORD = "client-key-secret"


class Pem:
    """A self-signed certificate (its own CA) with its key, plain and encrypted."""

    def __init__(self, directory: Path) -> None:
        self.certificate = directory / "cert.pem"
        self.key = directory / "key.pem"
        self.encrypted_key = directory / "key-encrypted.pem"
        self.not_pem = directory / "not.pem"
        subprocess.run(
            [
                "openssl", "req", "-x509", "-newkey", "ec",
                "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", str(self.key), "-out", str(self.certificate),
                "-days", "1", "-subj", "/CN=client",
            ],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        subprocess.run(
            [
                "openssl", "pkey", "-in", str(self.key), "-out", str(self.encrypted_key),
                "-aes256", "-passout", f"pass:{KEY_PASSWORD}",
            ],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        self.not_pem.write_text("not a certificate\n")


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> Pem:
    return Pem(tmp_path_factory.mktemp("pem"))


# ── security_protocol and its options ─────────────────────────────────────────────────


def test_plaintext_uses_neither_tls_nor_sasl() -> None:
    assert security_from_options() == (None, None)
    assert security_from_options("plaintext") == (None, None)


def test_ssl_gives_tls_settings_from_the_ssl_options(pem: Pem) -> None:
    tls, sasl = security_from_options(
        "SSL",
        ssl_cafile=str(pem.certificate),
        ssl_certfile=str(pem.certificate),
        ssl_keyfile=str(pem.encrypted_key),
        ssl_password=KEY_PASSWORD,
        ssl_check_hostname=False,
    )
    assert sasl is None
    assert tls == TlsSettings(
        str(pem.certificate),
        certfile=str(pem.certificate),
        keyfile=str(pem.encrypted_key),
        password=KEY_PASSWORD,
        check_hostname=False,
    )
    assert KEY_PASSWORD not in repr(tls)


def test_sasl_ssl_gives_both(pem: Pem) -> None:
    tls, sasl = security_from_options(
        "sasl_ssl",
        ssl_cafile=str(pem.certificate),
        sasl_mechanism="scram-sha-256",
        sasl_plain_username="alice",
        sasl_plain_password="alice-secret",
    )
    assert tls == TlsSettings(str(pem.certificate))
    assert sasl == SaslSettings("SCRAM-SHA-256", "alice", "alice-secret")


def test_sasl_plaintext_gives_sasl_only() -> None:
    assert security_from_options(
        "SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password="alice-secret",
    ) == (None, SaslSettings("PLAIN", "alice", "alice-secret"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"security_protocol": "TLS"}, "security_protocol must be one of PLAINTEXT, SSL"),
        ({"security_protocol": "SSL"}, "TLS needs ssl_cafile"),
        (
            {"security_protocol": "SSL", "ssl_cafile": "/nonexistent/ca.pem"},
            "ssl_cafile '/nonexistent/ca.pem' is not a readable file",
        ),
        ({"ssl_cafile": "ca.pem"}, "ssl_cafile given but security_protocol is PLAINTEXT"),
        (
            {"security_protocol": "SASL_PLAINTEXT", "ssl_certfile": "c.pem"},
            "ssl_certfile given but security_protocol is SASL_PLAINTEXT (no TLS)",
        ),
        (
            {"security_protocol": "SASL_SSL", "ssl_cafile": "{ca}"},
            "security_protocol SASL_SSL needs sasl_mechanism, sasl_plain_username",
        ),
        (
            {"sasl_mechanism": "PLAIN", "sasl_plain_username": "a", "sasl_plain_password": "b"},
            "SASL options given but security_protocol is PLAINTEXT",
        ),
        (
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "GSSAPI",
                "sasl_plain_username": "a",
                "sasl_plain_password": "b",
            },
            "sasl_mechanism must be one of SCRAM-SHA-256, SCRAM-SHA-512, PLAIN, not 'GSSAPI'",
        ),
        (
            {"security_protocol": "SSL", "ssl_cafile": "{ca}", "ssl_keyfile": "{key}"},
            "ssl_keyfile needs ssl_certfile",
        ),
        (
            {"security_protocol": "SSL", "ssl_cafile": "{ca}", "ssl_password": "x"},
            "ssl_password needs ssl_certfile",
        ),
        (
            {"security_protocol": "SSL", "ssl_cafile": "{ca}", "ssl_certfile": "/nonexistent/c"},
            "ssl_certfile '/nonexistent/c' is not a readable file",
        ),
    ],
)
def test_options_that_do_not_fit_together_are_refused_naming_the_option(
    pem: Pem, options: dict[str, Any], message: str
) -> None:
    files = {"ca": str(pem.certificate), "key": str(pem.key)}
    options = {
        name: value.format(**files) if isinstance(value, str) else value
        for name, value in options.items()
    }
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        security_from_options(**options)


# ── the TLS context ───────────────────────────────────────────────────────────────────


def test_the_context_verifies_the_broker_against_the_ca_and_checks_its_name(pem: Pem) -> None:
    context = TlsSettings(str(pem.certificate)).context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "client"),),)]


def test_without_hostname_checking_the_certificate_is_still_verified(pem: Pem) -> None:
    context = TlsSettings(str(pem.certificate), check_hostname=False).context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert not context.check_hostname


def test_a_client_certificate_with_an_encrypted_key_loads_with_its_password(pem: Pem) -> None:
    TlsSettings(
        str(pem.certificate),
        certfile=str(pem.certificate),
        keyfile=str(pem.encrypted_key),
        password=KEY_PASSWORD,
    ).context()


def test_a_wrong_key_password_is_a_clear_error(pem: Pem) -> None:
    settings = TlsSettings(
        str(pem.certificate),
        certfile=str(pem.certificate),
        keyfile=str(pem.encrypted_key),
        password="wrong",
    )
    with pytest.raises(ValueError, match="is ssl_password right"):
        settings.context()


def test_a_ca_file_that_is_not_pem_is_a_clear_error(pem: Pem) -> None:
    with pytest.raises(ValueError, match=r"^ssl_cafile .* holds no usable CA certificate"):
        TlsSettings(str(pem.not_pem)).context()


# ── every entry point takes them ──────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "make",
    [
        lambda **o: sluice.Producer("127.0.0.1:9", **o),
        lambda **o: sluice.Consumer(bootstrap_servers="127.0.0.1:9", **o),
        lambda **o: sluice.ShareConsumer("t", group_id="g", bootstrap_servers="127.0.0.1:9", **o),
        lambda **o: sluice.Admin("127.0.0.1:9", **o),
    ],
    ids=["Producer", "Consumer", "ShareConsumer", "Admin"],
)
def test_every_entry_point_checks_the_security_options_when_made(make: Any, pem: Pem) -> None:
    with pytest.raises(ValueError, match="TLS needs ssl_cafile"):
        make(security_protocol="SSL")
    with pytest.raises(ValueError, match="holds no usable CA certificate"):
        make(security_protocol="SSL", ssl_cafile=str(pem.not_pem))


def test_the_sync_facades_pass_the_security_options_on() -> None:
    with pytest.raises(ValueError, match="TLS needs ssl_cafile"):
        sluice.sync.Admin("127.0.0.1:9", security_protocol="SSL")


# ── the CLI's variables ───────────────────────────────────────────────────────────────


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in SECURITY_ENV_VARS.values():
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_cli_is_plaintext_without_variables(clean_environment: pytest.MonkeyPatch) -> None:
    assert security_from_environment() == (None, None)


def test_the_cli_sasl_variables_alone_mean_sasl_plaintext(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    clean_environment.setenv("SLUICE_SASL_MECHANISM", "scram-sha-512")
    clean_environment.setenv("SLUICE_SASL_USERNAME", "admin")
    clean_environment.setenv("SLUICE_SASL_PASSWORD", "admin-secret")
    assert security_from_environment() == (
        None,
        SaslSettings("SCRAM-SHA-512", "admin", "admin-secret"),
    )


def test_the_cli_reads_the_ssl_variables(clean_environment: pytest.MonkeyPatch, pem: Pem) -> None:
    clean_environment.setenv("SLUICE_SECURITY_PROTOCOL", "SSL")
    clean_environment.setenv("SLUICE_SSL_CA_LOCATION", str(pem.certificate))
    clean_environment.setenv("SLUICE_SSL_CERTIFICATE_LOCATION", str(pem.certificate))
    clean_environment.setenv("SLUICE_SSL_KEY_LOCATION", str(pem.encrypted_key))
    clean_environment.setenv("SLUICE_SSL_KEY_PASSWORD", KEY_PASSWORD)
    clean_environment.setenv("SLUICE_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM", "none")
    assert security_from_environment() == (
        TlsSettings(
            str(pem.certificate),
            certfile=str(pem.certificate),
            keyfile=str(pem.encrypted_key),
            password=KEY_PASSWORD,
            check_hostname=False,
        ),
        None,
    )


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"SLUICE_SECURITY_PROTOCOL": "SSL"}, "TLS needs SLUICE_SSL_CA_LOCATION"),
        (
            {"SLUICE_SECURITY_PROTOCOL": "SSL", "SLUICE_SSL_CA_LOCATION": "/nonexistent/ca.pem"},
            "SLUICE_SSL_CA_LOCATION '/nonexistent/ca.pem' is not a readable file",
        ),
        (
            {"SLUICE_SSL_CA_LOCATION": "ca.pem"},
            "SLUICE_SSL_CA_LOCATION given but SLUICE_SECURITY_PROTOCOL is PLAINTEXT",
        ),
        (
            {"SLUICE_SECURITY_PROTOCOL": "SASL_SSL", "SLUICE_SSL_CA_LOCATION": "{ca}"},
            "SLUICE_SECURITY_PROTOCOL SASL_SSL needs SLUICE_SASL_MECHANISM",
        ),
        ({"SLUICE_SASL_USERNAME": "admin"}, "SASL needs all of SLUICE_SASL_MECHANISM"),
        (
            {"SLUICE_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM": "off"},
            "SLUICE_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM must be https",
        ),
    ],
)
def test_the_cli_names_the_variable_that_is_wrong(
    clean_environment: pytest.MonkeyPatch, pem: Pem, variables: dict[str, str], message: str
) -> None:
    for name, value in variables.items():
        clean_environment.setenv(name, value.format(ca=str(pem.certificate)))
    with pytest.raises(click.UsageError) as raised:
        security_from_environment()
    assert raised.value.message.startswith(message)
