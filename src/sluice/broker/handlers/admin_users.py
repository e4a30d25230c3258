"""DescribeUserScramCredentials and AlterUserScramCredentials: SCRAM users, as Kafka's
tools (``kafka-configs --alter --entity-type users``, the admin clients) and ``sluice
users`` manage them.

The client salts and hashes the password itself (AlterUserScramCredentials carries the
salt, the iteration count and SaltedPassword); the broker keeps only the stored and
server keys derived from it (:mod:`sluice.protocol.sasl`), in the metadata store, so
every broker of the cluster knows the user at once. Results are per user, as in Kafka:
one error (the first) for a user whatever the number of its changes, and a user named
twice for one mechanism in one request is refused (DUPLICATE_RESOURCE) with all its
changes.

With the authorizer on, describing needs DESCRIBE and altering ALTER on the cluster
(CLUSTER_AUTHORIZATION_FAILED), as in Kafka. An unauthorized describe is answered in
Kafka's shape: the error and "Cluster authorization failed." at the top, and one result
with the same error per user asked for, in the order asked (none for "all users").
Kafka leaves those results' user name empty; Sluice names the user.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.handlers.acl_rules import CLUSTER_ALTER, CLUSTER_DESCRIBE
from sluice.broker.services import UsesAuthorizer, UsesStore
from sluice.common.errors import ErrorCode
from sluice.protocol.messages import make, response_module
from sluice.protocol.sasl import (
    ScramMechanism,
    check_iterations,
    credential_from_salted_password,
)
from sluice.protocol.versions import ApiKey

if TYPE_CHECKING:
    from sluice.broker.context import RequestContext


class AdminUsersServices(UsesAuthorizer, UsesStore, Protocol):
    """What the admin users handlers use of the broker."""


CLUSTER_AUTHORIZATION_FAILED_MESSAGE = "Cluster authorization failed."
"""Kafka's message for CLUSTER_AUTHORIZATION_FAILED, which an unauthorized
DescribeUserScramCredentials carries at the top and in each user's result."""


async def handle_describe_user_scram_credentials(
    services: AdminUsersServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, context.header.api_version)
    store = services.store
    asked = [user.name for user in request.users or ()]
    if not services.authorizer.allows(context, CLUSTER_DESCRIBE):
        # Kafka's shape: the request-level error with its message, and the same error
        # once per user named (none when all users were asked for).
        return make(
            module.DescribeUserScramCredentialsResponse,
            throttle_time=0,
            error_code=CLUSTER_DESCRIBE.error_code,
            error_message=CLUSTER_AUTHORIZATION_FAILED_MESSAGE,
            results=tuple(
                make(
                    module.DescribeUserScramCredentialsResult,
                    user=user,
                    error_code=CLUSTER_DESCRIBE.error_code,
                    error_message=CLUSTER_AUTHORIZATION_FAILED_MESSAGE,
                    credential_infos=(),
                )
                for user in asked
            ),
        )
    counts = Counter(asked)
    results = []
    for user in dict.fromkeys(asked) if asked else await store.scram_users():
        if counts[user] > 1:
            results.append(
                make(
                    module.DescribeUserScramCredentialsResult,
                    user=user,
                    error_code=ErrorCode.duplicate_resource,
                    error_message=f"Cannot describe SCRAM credentials for the same user "
                    f"twice in a single request: {user}",
                    credential_infos=(),
                )
            )
            continue
        credentials = await store.scram_credentials(user)
        if not credentials:
            results.append(
                make(
                    module.DescribeUserScramCredentialsResult,
                    user=user,
                    error_code=ErrorCode.resource_not_found,
                    error_message=f"Attempt to describe a user credential that does not "
                    f"exist: {user}",
                    credential_infos=(),
                )
            )
            continue
        results.append(
            make(
                module.DescribeUserScramCredentialsResult,
                user=user,
                error_code=ErrorCode.none,
                error_message=None,
                credential_infos=tuple(
                    make(
                        module.CredentialInfo,
                        mechanism=mechanism.wire_type,
                        iterations=credential.iterations,
                    )
                    for mechanism, credential in sorted(
                        credentials.items(), key=lambda item: item[0].wire_type
                    )
                ),
            )
        )
    return make(
        module.DescribeUserScramCredentialsResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        results=tuple(results),
    )


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _mechanism(wire_type: int) -> ScramMechanism:
    try:
        return ScramMechanism.by_wire_type(wire_type)
    except ValueError:
        raise _Refused(
            ErrorCode.unsupported_sasl_mechanism, f"Unknown SCRAM mechanism {wire_type}"
        ) from None


async def handle_alter_user_scram_credentials(
    services: AdminUsersServices, context: RequestContext, request: Any
) -> Any:
    module = response_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, context.header.api_version)
    store = services.store
    errors: dict[str, tuple[ErrorCode, str]] = {}
    users: list[str] = []
    changes = Counter(
        (change.name, change.mechanism) for change in (*request.deletions, *request.upsertions)
    )
    for change in (*request.deletions, *request.upsertions):
        if change.name not in users:
            users.append(change.name)
        if changes[(change.name, change.mechanism)] > 1:
            errors.setdefault(
                change.name,
                (
                    ErrorCode.duplicate_resource,
                    "A user credential cannot be altered twice in the same request",
                ),
            )
        elif not change.name:
            errors.setdefault(
                change.name, (ErrorCode.unacceptable_credential, "Username must not be empty")
            )
    if not services.authorizer.allows(context, CLUSTER_ALTER):
        errors = {user: (CLUSTER_ALTER.error_code, "") for user in users}
    for deletion in request.deletions:
        if deletion.name in errors:
            continue
        try:
            mechanism = _mechanism(deletion.mechanism)
            if not await store.delete_scram_credential(deletion.name, mechanism):
                raise _Refused(
                    ErrorCode.resource_not_found,
                    f"Attempt to delete a user credential that does not exist: "
                    f"{deletion.name} {mechanism.mechanism_name}",
                )
        except _Refused as refused:
            errors[deletion.name] = (refused.code, str(refused))
    for upsertion in request.upsertions:
        if upsertion.name in errors:
            continue
        try:
            mechanism = _mechanism(upsertion.mechanism)
            try:
                check_iterations(upsertion.iterations)
            except ValueError as e:
                raise _Refused(ErrorCode.unacceptable_credential, f"Iterations: {e}") from None
            if not upsertion.salt or not upsertion.salted_password:
                raise _Refused(
                    ErrorCode.unacceptable_credential, "Salt and salted password must not be empty"
                )
            credential = credential_from_salted_password(
                mechanism, upsertion.salted_password, upsertion.salt, upsertion.iterations
            )
            await store.set_scram_credential(upsertion.name, mechanism, credential)
        except _Refused as refused:
            errors[upsertion.name] = (refused.code, str(refused))
    return make(
        module.AlterUserScramCredentialsResponse,
        throttle_time=0,
        results=tuple(
            make(
                module.AlterUserScramCredentialsResult,
                user=user,
                error_code=errors.get(user, (ErrorCode.none, ""))[0],
                error_message=errors[user][1] if user in errors else None,
            )
            for user in users
        ),
    )
