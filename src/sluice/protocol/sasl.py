"""SASL mechanisms as pure logic: SCRAM-SHA-256/512 (RFC 5802, RFC 7677) and PLAIN
(RFC 4616), server and client halves, no I/O.

A SCRAM exchange is two round trips, each token carried by one SaslAuthenticate::

    client-first   n,,n=alice,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<salt, base64>,i=<iterations>
    client-final   c=biws,r=<both nonces>,p=<proof, base64>
    server-final   v=<server signature, base64>

A user's stored credential (:class:`ScramCredential`) is the salt, the iteration count
and two keys derived from the password (StoredKey = H(HMAC(SaltedPassword, "Client
Key")), ServerKey = HMAC(SaltedPassword, "Server Key")): enough to check a proof and to
prove the server knows them, never enough to log in, and never the password.

PLAIN (``authzid NUL authcid NUL password``) is checked against the same credential:
the password is salted and hashed with the stored salt and iterations and must give the
stored key. Sluice keeps one user database for both mechanisms. An unknown user's
password is salted and hashed all the same, against a made-up credential of the default
cost (:func:`plain_password_matches`), so the time an answer takes does not tell whether
the user exists.

Failures raise :class:`SaslAuthenticationFailed`; its ``rfc_error`` is RFC 5802's
``e=`` value. The message never says whether the user exists: an unknown user goes
through the exchange with a made-up credential and fails at the proof, like a wrong
password.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

SCRAM_ITERATIONS_MIN = 4096
SCRAM_ITERATIONS_MAX = 16384
"""Kafka's bounds for a SCRAM credential's iteration count."""
SCRAM_ITERATIONS_DEFAULT = 4096
NONCE_BYTES = 24
SALT_BYTES = 32
GS2_HEADER = "n,,"


class SaslAuthenticationFailed(Exception):
    """The client failed to authenticate (bad proof, malformed message, refused
    mechanism); the message is safe to send back to the client."""

    def __init__(self, message: str, rfc_error: str = "other-error") -> None:
        super().__init__(message)
        self.rfc_error = rfc_error


class ScramMechanism(enum.Enum):
    """The SCRAM mechanisms, with the numbers of Kafka's AlterUserScramCredentials and
    DescribeUserScramCredentials (1 and 2)."""

    SCRAM_SHA_256 = ("SCRAM-SHA-256", "sha256", 1)
    SCRAM_SHA_512 = ("SCRAM-SHA-512", "sha512", 2)

    def __init__(self, mechanism_name: str, hash_name: str, wire_type: int) -> None:
        self.mechanism_name = mechanism_name
        self.hash_name = hash_name
        self.wire_type = wire_type

    @classmethod
    def by_name(cls, name: str) -> ScramMechanism:
        for mechanism in cls:
            if mechanism.mechanism_name == name:
                return mechanism
        raise ValueError(f"unknown SCRAM mechanism {name!r} (SCRAM-SHA-256 or SCRAM-SHA-512)")

    @classmethod
    def by_wire_type(cls, wire_type: int) -> ScramMechanism:
        for mechanism in cls:
            if mechanism.wire_type == wire_type:
                return mechanism
        raise ValueError(f"unknown SCRAM mechanism number {wire_type}")

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    @property
    def hash_bytes(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def salted_password(
        self,
        password: str,
        salt: bytes,
        iterations: int,
        derive: DeriveKey = hashlib.pbkdf2_hmac,
    ) -> bytes:
        """Hi(password, salt, i) of RFC 5802: PBKDF2 with HMAC of this hash (``derive``
        is ``hashlib.pbkdf2_hmac``; tests count the work through it)."""
        return derive(self.hash_name, password.encode(), salt, iterations)


DeriveKey = Callable[[str, bytes, bytes, int], bytes]
"""PBKDF2's signature (``hashlib.pbkdf2_hmac``): hash name, password, salt, iterations."""


PLAIN = "PLAIN"
SASL_MECHANISMS = (PLAIN, *(m.mechanism_name for m in ScramMechanism))


@dataclass(frozen=True)
class ScramCredential:
    """What is stored for one user and mechanism: never the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict[str, object]:
        return {
            "salt": base64.b64encode(self.salt).decode(),
            "stored_key": base64.b64encode(self.stored_key).decode(),
            "server_key": base64.b64encode(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ScramCredential:
        return cls(
            salt=base64.b64decode(str(data["salt"])),
            stored_key=base64.b64decode(str(data["stored_key"])),
            server_key=base64.b64decode(str(data["server_key"])),
            iterations=int(str(data["iterations"])),
        )


def credential_from_salted_password(
    mechanism: ScramMechanism, salted_password: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The stored form of a salted password (what AlterUserScramCredentials carries)."""
    client_key = mechanism.hmac(salted_password, b"Client Key")
    return ScramCredential(
        salt=salt,
        stored_key=mechanism.hash(client_key),
        server_key=mechanism.hmac(salted_password, b"Server Key"),
        iterations=iterations,
    )


def new_salt() -> bytes:
    return secrets.token_bytes(SALT_BYTES)


def make_credential(
    mechanism: ScramMechanism,
    password: str,
    *,
    salt: bytes | None = None,
    iterations: int = SCRAM_ITERATIONS_DEFAULT,
) -> ScramCredential:
    """A new credential for ``password`` (a fresh random salt unless one is given)."""
    check_iterations(iterations)
    salt = new_salt() if salt is None else salt
    salted = mechanism.salted_password(password, salt, iterations)
    return credential_from_salted_password(mechanism, salted, salt, iterations)


def check_iterations(iterations: int) -> None:
    if not SCRAM_ITERATIONS_MIN <= iterations <= SCRAM_ITERATIONS_MAX:
        raise ValueError(
            f"iterations {iterations} is outside [{SCRAM_ITERATIONS_MIN}, {SCRAM_ITERATIONS_MAX}]"
        )


def password_matches(
    mechanism: ScramMechanism,
    credential: ScramCredential,
    password: str,
    derive: DeriveKey = hashlib.pbkdf2_hmac,
) -> bool:
    """Whether ``password`` gives ``credential`` (PLAIN's check; costs one PBKDF2)."""
    salted = mechanism.salted_password(password, credential.salt, credential.iterations, derive)
    candidate = credential_from_salted_password(
        mechanism, salted, credential.salt, credential.iterations
    )
    return hmac.compare_digest(candidate.stored_key, credential.stored_key)


PLAIN_CREDENTIAL_ORDER = (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256)
"""Which of a user's SCRAM credentials a PLAIN password is checked against, first found."""


def plain_password_matches(
    credentials: Mapping[ScramMechanism, ScramCredential],
    username: str,
    password: str,
    derive: DeriveKey = hashlib.pbkdf2_hmac,
) -> bool:
    """PLAIN's check of ``password`` against the user's SCRAM credentials (none: an
    unknown user). Either way it costs one PBKDF2: an unknown user's password is salted
    and hashed against a made-up SCRAM-SHA-512 credential with the default iteration
    count (what ``sluice users`` and Kafka's tools create), then refused, so a known
    user and an unknown one take the same time to refuse."""
    for mechanism in PLAIN_CREDENTIAL_ORDER:
        credential = credentials.get(mechanism)
        if credential is not None:
            return password_matches(mechanism, credential, password, derive)
    mechanism = PLAIN_CREDENTIAL_ORDER[0]
    made_up = ScramCredential(
        salt=mechanism.hmac(b"sluice unknown user", username.encode())[:SALT_BYTES],
        stored_key=secrets.token_bytes(mechanism.hash_bytes),
        server_key=b"",
        iterations=SCRAM_ITERATIONS_DEFAULT,
    )
    password_matches(mechanism, made_up, password, derive)
    return False


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise SaslAuthenticationFailed(f"{what} is not base64", "invalid-encoding") from None


def decode_saslname(name: str) -> str:
    """RFC 5802's saslname: "=2C" stands for ",", "=3D" for "="; any other "=" is an error."""
    out = []
    i = 0
    while i < len(name):
        if name[i] == "=":
            escape = name[i : i + 3]
            if escape == "=2C":
                out.append(",")
            elif escape == "=3D":
                out.append("=")
            else:
                raise SaslAuthenticationFailed(
                    "invalid user name encoding", "invalid-username-encoding"
                )
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    """``k=v,k=v`` as pairs, in order; anything else is an error."""
    pairs = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise SaslAuthenticationFailed(f"invalid {what}", "invalid-encoding")
        pairs.append((part[0], part[2:]))
    return pairs


@dataclass(frozen=True)
class ClientFirst:
    username: str
    authzid: str | None
    nonce: str
    gs2_header: str
    bare: str


def parse_client_first(token: bytes) -> ClientFirst:
    """The client-first message. Channel binding ("p=") and extensions are refused; a
    client that could bind but thinks we cannot ("y") is accepted, as we cannot."""
    try:
        message = token.decode()
    except UnicodeDecodeError:
        raise SaslAuthenticationFailed(
            "client-first message is not UTF-8", "invalid-encoding"
        ) from None
    parts = message.split(",", 2)
    if len(parts) != 3:
        raise SaslAuthenticationFailed("invalid client-first message", "invalid-encoding")
    cbind, authz, bare = parts
    if cbind.startswith("p="):
        raise SaslAuthenticationFailed(
            "channel binding is not supported", "channel-binding-not-supported"
        )
    if cbind not in ("n", "y"):
        raise SaslAuthenticationFailed("invalid client-first message", "invalid-encoding")
    authzid: str | None = None
    if authz:
        if not authz.startswith("a="):
            raise SaslAuthenticationFailed("invalid client-first message", "invalid-encoding")
        authzid = decode_saslname(authz[2:])
    pairs = _attributes(bare, "client-first message")
    if pairs and pairs[0][0] == "m":
        raise SaslAuthenticationFailed(
            "mandatory extensions are not supported", "extensions-not-supported"
        )
    if len(pairs) != 2 or pairs[0][0] != "n" or pairs[1][0] != "r":
        raise SaslAuthenticationFailed(
            "client-first message must be n=<user>,r=<nonce> (no extensions)",
            "extensions-not-supported",
        )
    username = decode_saslname(pairs[0][1])
    nonce = pairs[1][1]
    if not username or not nonce or not nonce.isprintable():
        raise SaslAuthenticationFailed("invalid client-first message", "invalid-encoding")
    return ClientFirst(username, authzid, nonce, f"{cbind},{authz},", bare)


class ScramServer:
    """One SCRAM exchange, server side: :meth:`first` answers the client-first message
    (given the user's credential, or None for an unknown user), :meth:`final` checks the
    client-final message and answers with the server signature."""

    def __init__(self, mechanism: ScramMechanism, *, server_nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._server_nonce = server_nonce
        self._client_first: ClientFirst | None = None
        self._credential: ScramCredential | None = None
        self._known_user = False
        self._server_first = ""
        self._nonce = ""
        self.username: str | None = None
        """The authenticated user, once :meth:`final` succeeded."""

    @staticmethod
    def username_of(token: bytes) -> str:
        """The user a client-first message names (to look up the credential)."""
        first = parse_client_first(token)
        if first.authzid is not None and first.authzid != first.username:
            raise SaslAuthenticationFailed(
                "authorization id must be the user name", "invalid-username"
            )
        return first.username

    def first(self, token: bytes, credential: ScramCredential | None) -> bytes:
        first = parse_client_first(token)
        if first.authzid is not None and first.authzid != first.username:
            raise SaslAuthenticationFailed(
                "authorization id must be the user name", "invalid-username"
            )
        self._client_first = first
        self._known_user = credential is not None
        if credential is None:
            # Go on with a made-up credential (its salt fixed per user name), so an
            # unknown user is told nothing a wrong password is not told.
            salt = self.mechanism.hmac(b"sluice unknown user", first.username.encode())
            credential = ScramCredential(salt, secrets.token_bytes(32), b"", SCRAM_ITERATIONS_MIN)
        self._credential = credential
        server_nonce = self._server_nonce or secrets.token_urlsafe(NONCE_BYTES)
        self._nonce = first.nonce + server_nonce
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        return self._server_first.encode()

    def final(self, token: bytes) -> bytes:
        first = self._client_first
        credential = self._credential
        if first is None or credential is None:
            raise SaslAuthenticationFailed("client-final message before client-first")
        try:
            message = token.decode()
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed(
                "client-final message is not UTF-8", "invalid-encoding"
            ) from None
        without_proof, _, proof_part = message.rpartition(",")
        pairs = _attributes(message, "client-final message")
        if [k for k, _ in pairs] != ["c", "r", "p"] or not proof_part.startswith("p="):
            raise SaslAuthenticationFailed(
                "client-final message must be c=,r=,p= (no extensions)", "extensions-not-supported"
            )
        values = dict(pairs)
        if _unb64(values["c"], "channel binding") != first.gs2_header.encode():
            raise SaslAuthenticationFailed(
                "channel bindings do not match", "channel-bindings-dont-match"
            )
        # Kafka checks only that the nonce ends with the one it sent, and librdkafka
        # before 2.x-something (kcat's) repeats the client's part: accept what Kafka
        # accepts. The fresh server nonce is in it either way, so nothing is replayed.
        if not values["r"].endswith(self._nonce):
            raise SaslAuthenticationFailed("nonce does not match", "invalid-proof")
        proof = _unb64(values["p"], "proof")
        auth_message = f"{first.bare},{self._server_first},{without_proof}".encode()
        signature = self.mechanism.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslAuthenticationFailed("invalid proof", "invalid-proof")
        client_key = _xor(proof, signature)
        if not self._known_user or not hmac.compare_digest(
            self.mechanism.hash(client_key), credential.stored_key
        ):
            raise SaslAuthenticationFailed("invalid credentials", "invalid-proof")
        self.username = first.username
        server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        return f"v={_b64(server_signature)}".encode()


class ScramClient:
    """One SCRAM exchange, client side (the broker's own connections to other brokers
    and Sluice's client): :meth:`first`, :meth:`final` given the server-first message,
    :meth:`verify` given the server-final message."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        username: str,
        password: str,
        *,
        nonce: str | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._username = username
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(NONCE_BYTES)
        self._bare = f"n={encode_saslname(username)},r={self._nonce}"
        self._auth_message = b""
        self._server_key = b""

    def first(self) -> bytes:
        return (GS2_HEADER + self._bare).encode()

    def final(self, server_first: bytes) -> bytes:
        message = server_first.decode()
        pairs = _attributes(message, "server-first message")
        values = dict(pairs)
        if "e" in values:
            raise SaslAuthenticationFailed(f"server refused: {values['e']}", values["e"])
        if not {"r", "s", "i"} <= set(values) or not values["r"].startswith(self._nonce):
            raise SaslAuthenticationFailed("invalid server-first message")
        iterations = int(values["i"])
        salt = _unb64(values["s"], "salt")
        salted = self.mechanism.salted_password(self._password, salt, iterations)
        client_key = self.mechanism.hmac(salted, b"Client Key")
        stored_key = self.mechanism.hash(client_key)
        without_proof = f"c={_b64(GS2_HEADER.encode())},r={values['r']}"
        self._auth_message = f"{self._bare},{message},{without_proof}".encode()
        signature = self.mechanism.hmac(stored_key, self._auth_message)
        self._server_key = self.mechanism.hmac(salted, b"Server Key")
        return f"{without_proof},p={_b64(_xor(client_key, signature))}".encode()

    def verify(self, server_final: bytes) -> None:
        values = dict(_attributes(server_final.decode(), "server-final message"))
        if "e" in values:
            raise SaslAuthenticationFailed(f"server refused: {values['e']}", values["e"])
        expected = self.mechanism.hmac(self._server_key, self._auth_message)
        if not hmac.compare_digest(_unb64(values.get("v", ""), "signature"), expected):
            raise SaslAuthenticationFailed("the server's signature is wrong: not our broker")


@dataclass(frozen=True)
class PlainCredentials:
    authzid: str
    username: str
    password: str


def parse_plain(token: bytes) -> PlainCredentials:
    """``authzid NUL authcid NUL password`` (RFC 4616); the authorization id must be
    empty or the user's own name, as in Kafka."""
    parts = token.split(b"\0")
    if len(parts) != 3:
        raise SaslAuthenticationFailed("invalid PLAIN message: expected authzid\\0user\\0password")
    try:
        authzid, username, password = (part.decode() for part in parts)
    except UnicodeDecodeError:
        raise SaslAuthenticationFailed("invalid PLAIN message: not UTF-8") from None
    if not username or not password:
        raise SaslAuthenticationFailed("invalid PLAIN message: empty user name or password")
    if authzid and authzid != username:
        raise SaslAuthenticationFailed("authorization id must be empty or the user name")
    return PlainCredentials(authzid, username, password)


def plain_token(username: str, password: str) -> bytes:
    return b"\0" + username.encode() + b"\0" + password.encode()
