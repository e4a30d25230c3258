"""TLS settings of the client's connections to an SSL or SASL_SSL listener.

:class:`TlsSettings` checks its files when made and builds the client's
``ssl.SSLContext``; a :class:`~sluice.client.cluster.Cluster` builds that context once
and every :class:`~sluice.client.connection.BrokerConnection` it opens wraps its socket
with it (TLS first, then ApiVersions and, on SASL_SSL, SASL inside it).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class TlsSettings:
    """TLS for the connections to an SSL or SASL_SSL listener.

    The broker's certificate is verified against ``cafile`` (a PEM bundle of the CA
    certificates to trust) and, with ``check_hostname``, must name the host the
    client connects to. Sluice's listeners are served with certificates of the
    operator's own CA, so the CA is required rather than taken from the system's
    store. ``certfile`` and ``keyfile`` (PEM; ``password`` if the key is encrypted)
    are the client's certificate, for listeners with ``ssl.client.auth=required``;
    ``certfile`` alone works when it holds the key as well.
    """

    cafile: str | None
    certfile: str | None = None
    keyfile: str | None = None
    password: str | None = field(default=None, repr=False)
    check_hostname: bool = True

    def __post_init__(self) -> None:
        if not self.cafile:
            raise ValueError(
                "TLS needs ssl_cafile, the CA certificate(s) that signed the broker's "
                "certificate (PEM), to verify the broker"
            )
        if self.keyfile and not self.certfile:
            raise ValueError("ssl_keyfile needs ssl_certfile, the client certificate it belongs to")
        if self.password is not None and not self.certfile:
            raise ValueError("ssl_password needs ssl_certfile (it decrypts the client's key)")
        for option, path in (
            ("ssl_cafile", self.cafile),
            ("ssl_certfile", self.certfile),
            ("ssl_keyfile", self.keyfile),
        ):
            if path and not Path(path).is_file():
                raise ValueError(f"{option} {path!r} is not a readable file")

    def context(self) -> ssl.SSLContext:
        """A client SSLContext for these settings; ``ValueError`` naming the option
        whose file cannot be used (not PEM, a key that does not match, a wrong
        password)."""
        # Only the given CAs are trusted, not the system's store as well.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_verify_locations(cafile=self.cafile)
        except ssl.SSLError as e:
            raise ValueError(
                f"ssl_cafile {self.cafile!r} holds no usable CA certificate: {e.reason or e}"
            ) from None
        context.check_hostname = self.check_hostname
        if self.certfile:
            try:
                context.load_cert_chain(self.certfile, self.keyfile, self.password)
            except ssl.SSLError as e:
                raise ValueError(
                    f"ssl_certfile {self.certfile!r} / ssl_keyfile {self.keyfile!r}: not a "
                    f"certificate and its matching key ({e.reason or e}; is ssl_password right?)"
                ) from None
        return context
