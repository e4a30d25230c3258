"""TLS for listeners and for this broker's connections to other brokers, with the
standard library's ``ssl``, under Kafka's setting names.

A listener's server context needs TLS 1.2 or later and holds the key and certificate
chain of ``ssl.keystore.location`` (one PEM file, the key encrypted under
``ssl.key.password`` or not); ``ssl.truststore.location`` (a PEM CA bundle) is what
client certificates are checked against, and ``ssl.client.auth`` whether one is asked
for (``requested``) or needed (``required``).

Certificates are replaced without a restart: every handshake looks at the modification
times of the keystore and truststore (two ``stat`` calls), and when either changed the
listener builds a new context from the files and hands it to that connection and every
later one (connections already open keep theirs). A file that does not load (half
written, wrong password) is logged and the previous context kept.

A verified client certificate names the connection's principal the way Kafka's default
principal builder does: ``User:`` and the certificate's subject in RFC 2253 form
(``User:CN=alice,OU=eng``); without one the principal is ``User:ANONYMOUS``.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sluice.common.config import BrokerConfig, BrokerConfigError

log = logging.getLogger(__name__)

ANONYMOUS = "User:ANONYMOUS"

_RFC2253_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
"""The attribute keywords RFC 2253 (and Java's X500Principal) write by name."""


def _escape_rfc2253(value: str) -> str:
    """Escape an attribute value as RFC 2253 section 2.4 asks."""
    escaped = "".join(f"\\{c}" if c in ',+"\\<>;' else c for c in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped


def subject_rfc2253(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """A certificate subject, as ``ssl.SSLSocket.getpeercert()['subject']`` gives it
    (relative distinguished names, most significant first), in RFC 2253 form: the
    names in reverse order, comma separated, multi-valued ones joined with ``+``."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append(
            "+".join(
                f"{_RFC2253_KEYWORDS.get(name, name)}={_escape_rfc2253(value)}"
                for name, value in rdn
            )
        )
    return ",".join(rdns)


def principal_from_peercert(peercert: dict[str, Any] | None) -> str:
    """Kafka's default principal of a TLS connection: ``User:`` + the verified client
    certificate's subject, or ``User:ANONYMOUS`` without one."""
    if not peercert or not peercert.get("subject"):
        return ANONYMOUS
    return "User:" + subject_rfc2253(peercert["subject"])


@dataclass(frozen=True)
class TlsFiles:
    """What a TLS context is made of, read from the broker settings of one listener."""

    keystore: str | None
    key_password: str | None
    truststore: str | None
    client_auth: str
    enabled_protocols: str | None
    cipher_suites: str | None
    check_hostname: bool

    @classmethod
    def of_listener(cls, config: BrokerConfig, listener: str) -> TlsFiles:
        def setting(key: str) -> str | None:
            return config.listener_setting(listener, key)

        return cls(
            keystore=setting("ssl.keystore.location"),
            key_password=setting("ssl.key.password"),
            truststore=setting("ssl.truststore.location"),
            client_auth=setting("ssl.client.auth") or "none",
            enabled_protocols=setting("ssl.enabled.protocols"),
            cipher_suites=setting("ssl.cipher.suites"),
            # Kafka's default ssl.endpoint.identification.algorithm is https.
            check_hostname=setting("ssl.endpoint.identification.algorithm") != "",
        )

    def mtimes(self) -> tuple[float | None, float | None]:
        return (_mtime(self.keystore), _mtime(self.truststore))


def _mtime(path: str | None) -> float | None:
    if path is None:
        return None
    try:
        return os.stat(path).st_mtime_ns / 1e9
    except OSError:
        return None


def _versions(context: ssl.SSLContext, enabled_protocols: str | None) -> None:
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if enabled_protocols:
        versions = enabled_protocols.split(",")
        if "TLSv1.2" not in versions:
            context.minimum_version = ssl.TLSVersion.TLSv1_3
        if "TLSv1.3" not in versions:
            context.maximum_version = ssl.TLSVersion.TLSv1_2


def _load_keystore(context: ssl.SSLContext, files: TlsFiles, what: str) -> None:
    assert files.keystore is not None
    try:
        context.load_cert_chain(files.keystore, password=files.key_password)
    except (OSError, ssl.SSLError) as e:
        raise BrokerConfigError(
            f"{what}: ssl.keystore.location={files.keystore} does not load as a PEM file "
            f"with a private key and its certificate chain (is ssl.key.password right?): {e}"
        ) from None


def _load_truststore(context: ssl.SSLContext, files: TlsFiles, what: str) -> None:
    assert files.truststore is not None
    try:
        context.load_verify_locations(cafile=files.truststore)
    except (OSError, ssl.SSLError) as e:
        raise BrokerConfigError(
            f"{what}: ssl.truststore.location={files.truststore} does not load as a PEM "
            f"bundle of CA certificates: {e}"
        ) from None


def server_context(files: TlsFiles, what: str) -> ssl.SSLContext:
    """A listener's server context. Raises BrokerConfigError naming what does not load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(context, files.enabled_protocols)
    if files.cipher_suites:
        context.set_ciphers(files.cipher_suites)
    if files.keystore is None:
        raise BrokerConfigError(f"{what}: ssl.keystore.location is not set")
    _load_keystore(context, files, what)
    if files.client_auth != "none":
        if files.truststore is not None:
            _load_truststore(context, files, what)
        else:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        context.verify_mode = (
            ssl.CERT_REQUIRED if files.client_auth == "required" else ssl.CERT_OPTIONAL
        )
    return context


def client_context(files: TlsFiles, what: str) -> ssl.SSLContext:
    """This broker's context for connecting to another broker's TLS listener: the
    truststore to check its certificate (the system's CAs without one), and this
    broker's own certificate, for listeners that ask for client certificates."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(context, files.enabled_protocols)
    if files.cipher_suites:
        context.set_ciphers(files.cipher_suites)
    if files.truststore is not None:
        _load_truststore(context, files, what)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    context.check_hostname = files.check_hostname
    if files.keystore is not None:
        _load_keystore(context, files, what)
    return context


class ReloadingServerContext:
    """A listener's server context that follows its files: see the module docstring.

    :attr:`context` is what the listening socket is created with; its SNI callback runs
    at every handshake and puts the newest context on the connection."""

    def __init__(self, files: TlsFiles, what: str) -> None:
        self._files = files
        self._what = what
        self._mtimes = files.mtimes()
        self._current = server_context(files, what)
        self.context = server_context(files, what)
        self.context.sni_callback = self._on_handshake

    @property
    def current(self) -> ssl.SSLContext:
        """The context new connections get."""
        self.reload_if_changed()
        return self._current

    def reload_if_changed(self) -> bool:
        """Build a new context when the keystore or truststore changed since the last
        look; True when one was built."""
        mtimes = self._files.mtimes()
        if mtimes == self._mtimes:
            return False
        self._mtimes = mtimes
        try:
            self._current = server_context(self._files, self._what)
        except (BrokerConfigError, ssl.SSLError) as e:
            log.error("%s: keeping the previous certificate: %s", self._what, e)
            return False
        log.info(
            "%s: reloaded the TLS keystore %s and truststore %s",
            self._what,
            self._files.keystore,
            self._files.truststore,
        )
        return True

    def _on_handshake(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: Any
    ) -> None:
        connection.context = self.current
