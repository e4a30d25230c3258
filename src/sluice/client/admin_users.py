"""SCRAM users as an administrator sees them: DescribeUserScramCredentials and
AlterUserScramCredentials (what ``sluice users`` does, and Kafka's ``kafka-configs
--entity-type users`` asks).

The password never leaves the client: it is salted and hashed here (PBKDF2 with a fresh
random salt, ``iterations`` rounds) and only the salted password is sent, from which the
broker derives and stores its keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.client.cluster import Cluster
from sluice.client.messages import Request
from sluice.common import errors
from sluice.common.errors import ErrorCode
from sluice.protocol.sasl import (
    SCRAM_ITERATIONS_DEFAULT,
    ScramMechanism,
    check_iterations,
    new_salt,
)
from sluice.protocol.versions import ApiKey


@dataclass(frozen=True)
class ScramCredentialInfo:
    mechanism: str
    """SCRAM-SHA-256 or SCRAM-SHA-512."""
    iterations: int


async def describe_users(
    cluster: Cluster, users: list[str] | None = None
) -> dict[str, list[ScramCredentialInfo]]:
    """Each user's SCRAM mechanisms and iteration counts (every user when ``users`` is
    None). A named user without credentials raises ResourceNotFound."""
    connection = await cluster.any_connection()
    response = await connection.request(
        Request(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
            {"users": None if users is None else [{"name": user} for user in users]},
        )
    )
    if response.error_code != ErrorCode.none:
        raise errors.for_code(response.error_code)(response.error_message or "describing users")
    described: dict[str, list[ScramCredentialInfo]] = {}
    for result in response.results:
        if result.error_code != ErrorCode.none:
            raise errors.for_code(result.error_code)(result.error_message or result.user)
        described[result.user] = [
            ScramCredentialInfo(
                ScramMechanism.by_wire_type(int(info.mechanism)).mechanism_name,
                int(info.iterations),
            )
            for info in result.credential_infos
        ]
    return dict(sorted(described.items()))


async def set_password(
    cluster: Cluster,
    user: str,
    password: str,
    mechanism: ScramMechanism,
    *,
    iterations: int = SCRAM_ITERATIONS_DEFAULT,
) -> None:
    """Create or replace ``user``'s credential for ``mechanism``."""
    check_iterations(iterations)
    salt = new_salt()
    salted = mechanism.salted_password(password, salt, iterations)
    await _alter(
        cluster,
        {
            "deletions": [],
            "upsertions": [
                {
                    "name": user,
                    "mechanism": mechanism.wire_type,
                    "iterations": iterations,
                    "salt": salt,
                    "salted_password": salted,
                }
            ],
        },
    )


async def delete_credential(cluster: Cluster, user: str, mechanism: ScramMechanism) -> None:
    """Remove ``user``'s credential for ``mechanism`` (ResourceNotFound if none)."""
    await _alter(
        cluster,
        {"deletions": [{"name": user, "mechanism": mechanism.wire_type}], "upsertions": []},
    )


async def _alter(cluster: Cluster, body: dict[str, object]) -> None:
    connection = await cluster.any_connection()
    response = await connection.request(Request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body))
    for result in response.results:
        if result.error_code != ErrorCode.none:
            raise errors.for_code(result.error_code)(
                f"user {result.user}: {result.error_message or 'refused'}"
            )
