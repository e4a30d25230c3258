"""Test certificates made with the ``openssl`` command line, never committed: a CA, and
leaf certificates it signs (for brokers, with 127.0.0.1 and localhost as subject
alternative names; for clients, with the subject their principal is made of).

A broker keystore is one PEM file holding the private key and the certificate chain
(Kafka's ``ssl.keystore.type=PEM``); a truststore is the CA certificate in PEM.
"""

from __future__ import annotations

import itertools
import subprocess
from dataclasses import dataclass
from pathlib import Path

_serials = itertools.count(0x1000)


def _openssl(*arguments: str | Path) -> None:
    subprocess.run(["openssl", *map(str, arguments)], check=True, capture_output=True, timeout=60)


def _new_key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path)


@dataclass(frozen=True)
class Leaf:
    """A signed certificate: its key, certificate and the keystore holding both with
    the CA's certificate after them (the chain)."""

    key: Path
    certificate: Path
    keystore: Path
    serial: int
    encrypted_key: Path | None = None
    """The key encrypted under the ``key_password`` it was issued with, if any."""


@dataclass(frozen=True)
class CertificateAuthority:
    directory: Path
    name: str

    @property
    def key(self) -> Path:
        return self.directory / f"{self.name}-ca.key"

    @property
    def certificate(self) -> Path:
        return self.directory / f"{self.name}-ca.pem"

    @classmethod
    def create(cls, directory: Path, name: str = "test") -> CertificateAuthority:
        directory.mkdir(parents=True, exist_ok=True)
        ca = cls(directory, name)
        _new_key(ca.key)
        _openssl(
            "req",
            "-x509",
            "-new",
            "-key",
            ca.key,
            "-out",
            ca.certificate,
            "-days",
            "2",
            "-subj",
            f"/O=Sluice tests/CN={name} CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        )
        return ca

    def issue(
        self,
        name: str,
        subject: str,
        *,
        server: bool = False,
        key_password: str | None = None,
    ) -> Leaf:
        """A certificate for ``subject`` (OpenSSL's ``/O=…/CN=…`` form); a server one
        names 127.0.0.1 and localhost. With ``key_password`` the keystore's key is
        encrypted under it."""
        key = self.directory / f"{name}.key"
        request = self.directory / f"{name}.csr"
        certificate = self.directory / f"{name}.pem"
        extensions = self.directory / f"{name}.ext"
        _new_key(key)
        _openssl("req", "-new", "-key", key, "-out", request, "-subj", subject)
        lines = ["basicConstraints=CA:FALSE"]
        if server:
            lines.append("subjectAltName=IP:127.0.0.1,DNS:localhost")
        extensions.write_text("\n".join(lines) + "\n")
        serial = next(_serials)
        _openssl(
            "x509",
            "-req",
            "-in",
            request,
            "-CA",
            self.certificate,
            "-CAkey",
            self.key,
            "-set_serial",
            str(serial),
            "-days",
            "2",
            "-out",
            certificate,
            "-extfile",
            extensions,
        )
        stored_key = key
        if key_password is not None:
            stored_key = self.directory / f"{name}.encrypted.key"
            _openssl(
                "pkey",
                "-in",
                key,
                "-aes256",
                "-passout",
                f"pass:{key_password}",
                "-out",
                stored_key,
            )
        keystore = self.directory / f"{name}-keystore.pem"
        keystore.write_text(
            stored_key.read_text() + certificate.read_text() + self.certificate.read_text()
        )
        encrypted_key = None if key_password is None else stored_key
        return Leaf(key, certificate, keystore, serial, encrypted_key)
