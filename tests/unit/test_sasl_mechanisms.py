"""SCRAM (RFC 5802/7677) and PLAIN as pure logic: the RFC's own exchange, both halves
against each other, and the messages a server must refuse."""

from __future__ import annotations

import base64
import hashlib

import pytest

from sluice.protocol.sasl import (
    SCRAM_ITERATIONS_DEFAULT,
    SCRAM_ITERATIONS_MIN,
    SaslAuthenticationFailed,
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    make_credential,
    parse_plain,
    password_matches,
    plain_password_matches,
    plain_token,
)

# RFC 7677 section 3: user "user", password "pencil".
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC7677_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512


def _rfc_credential() -> ScramCredential:
    return make_credential(SHA256, "pencil", salt=RFC7677_SALT, iterations=4096)


def test_rfc7677_server_side() -> None:
    server = ScramServer(SHA256, server_nonce=RFC7677_SERVER_NONCE)
    assert ScramServer.username_of(RFC7677_CLIENT_FIRST) == "user"
    assert server.first(RFC7677_CLIENT_FIRST, _rfc_credential()) == RFC7677_SERVER_FIRST
    assert server.final(RFC7677_CLIENT_FINAL) == RFC7677_SERVER_FINAL
    assert server.username == "user"


def test_rfc7677_client_side() -> None:
    client = ScramClient(SHA256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == RFC7677_CLIENT_FIRST
    assert client.final(RFC7677_SERVER_FIRST) == RFC7677_CLIENT_FINAL
    client.verify(RFC7677_SERVER_FINAL)
    with pytest.raises(SaslAuthenticationFailed, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_client_and_server_agree(mechanism: ScramMechanism) -> None:
    credential = make_credential(mechanism, "s3cret")
    assert credential.iterations == SCRAM_ITERATIONS_MIN
    assert ScramCredential.from_json(credential.to_json()) == credential
    client = ScramClient(mechanism, "al,i=ce", "s3cret")
    server = ScramServer(mechanism)
    assert ScramServer.username_of(client.first()) == "al,i=ce"
    final = client.final(server.first(client.first(), credential))
    client.verify(server.final(final))
    assert server.username == "al,i=ce"


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_wrong_password_fails_at_the_proof(mechanism: ScramMechanism) -> None:
    credential = make_credential(mechanism, "right")
    client = ScramClient(mechanism, "alice", "wrong")
    server = ScramServer(mechanism)
    final = client.final(server.first(client.first(), credential))
    with pytest.raises(SaslAuthenticationFailed) as failure:
        server.final(final)
    assert failure.value.rfc_error == "invalid-proof"
    assert server.username is None


def test_unknown_user_looks_like_a_wrong_password() -> None:
    client = ScramClient(SHA512, "nobody", "x")
    server = ScramServer(SHA512)
    server_first = server.first(client.first(), None)
    again = ScramServer(SHA512).first(client.first(), None)
    # the made-up salt does not change between attempts
    assert server_first.split(b",")[1] == again.split(b",")[1]
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
        server.final(client.final(server_first))


@pytest.mark.parametrize(
    ("token", "error"),
    [
        (b"p=tls-unique,,n=user,r=abc", "channel-binding-not-supported"),
        (b"n,,n=user,r=abc,x=ext", "extensions-not-supported"),
        (b"n,,m=ext,n=user,r=abc", "extensions-not-supported"),
        (b"n,,n=us=er,r=abc", "invalid-username-encoding"),
        (b"n,,r=abc", "extensions-not-supported"),
        (b"garbage", "invalid-encoding"),
        (b"\xff\xfe", "invalid-encoding"),
        (b"n,a=other,n=user,r=abc", "invalid-username"),
    ],
)
def test_refused_client_first(token: bytes, error: str) -> None:
    with pytest.raises(SaslAuthenticationFailed) as failure:
        ScramServer(SHA256).first(token, _rfc_credential())
    assert failure.value.rfc_error == error


def test_refused_client_final() -> None:
    def started() -> ScramServer:
        server = ScramServer(SHA256, server_nonce=RFC7677_SERVER_NONCE)
        server.first(RFC7677_CLIENT_FIRST, _rfc_credential())
        return server

    other_nonce = RFC7677_CLIENT_FINAL.replace(b"hNlF", b"hNlG")
    with pytest.raises(SaslAuthenticationFailed, match="nonce"):
        started().final(other_nonce)
    cut_nonce = RFC7677_CLIENT_FINAL.replace(b"$k0,", b",")
    with pytest.raises(SaslAuthenticationFailed, match="nonce"):
        started().final(cut_nonce)
    with pytest.raises(SaslAuthenticationFailed, match="channel bindings"):
        started().final(RFC7677_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"))
    with pytest.raises(SaslAuthenticationFailed, match="no extensions"):
        started().final(RFC7677_CLIENT_FINAL.replace(b",p=", b",x=1,p="))
    with pytest.raises(SaslAuthenticationFailed, match="before client-first"):
        ScramServer(SHA256).final(RFC7677_CLIENT_FINAL)


def test_iterations_are_bounded() -> None:
    with pytest.raises(ValueError, match="iterations"):
        make_credential(SHA256, "p", iterations=1000)


def test_plain() -> None:
    assert parse_plain(plain_token("alice", "pw")).username == "alice"
    assert parse_plain(b"alice\0alice\0pw").password == "pw"
    for bad in (b"bob\0alice\0pw", b"\0alice", b"\0\0pw", b"\0alice\0", b"\0a\0b\0c"):
        with pytest.raises(SaslAuthenticationFailed):
            parse_plain(bad)


def test_plain_checks_against_the_scram_credential() -> None:
    credential = make_credential(SHA512, "pw")
    assert password_matches(SHA512, credential, "pw")
    assert not password_matches(SHA512, credential, "pW")


class CountingDerive:
    """PBKDF2 that records each call's hash, salt length and iteration count."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def __call__(self, hash_name: str, password: bytes, salt: bytes, iterations: int) -> bytes:
        self.calls.append((hash_name, len(salt), iterations))
        return hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)


def test_plain_does_the_same_work_for_an_unknown_user_as_for_a_known_one() -> None:
    known = {SHA512: make_credential(SHA512, "pw"), SHA256: make_credential(SHA256, "pw")}
    right, wrong, unknown = CountingDerive(), CountingDerive(), CountingDerive()
    assert plain_password_matches(known, "alice", "pw", right)
    assert not plain_password_matches(known, "alice", "guess", wrong)
    assert not plain_password_matches({}, "mallory", "guess", unknown)
    # One PBKDF2 each, of the same hash, salt size and iteration count.
    assert right.calls == wrong.calls == unknown.calls == [("sha512", 32, SCRAM_ITERATIONS_DEFAULT)]


def test_plain_never_accepts_an_unknown_user() -> None:
    for password in ("", "pw", "sluice unknown user"):
        assert not plain_password_matches({}, "mallory", password)


def test_plain_falls_back_to_the_scram_sha_256_credential() -> None:
    only_256 = {SHA256: make_credential(SHA256, "pw", iterations=8192)}
    derive = CountingDerive()
    assert plain_password_matches(only_256, "carol", "pw", derive)
    assert derive.calls == [("sha256", 32, 8192)]
