"""Confluent's error table: each error code of the Schema Registry API with its HTTP
status and the wording of its message, one exception carrying both, and the answer a
client receives for it.

Confluent answers every error with ``{"error_code": <int>, "message": <str>}`` and an
HTTP status that is the code's first three digits (40401 → 404, 42201 → 422,
50001 → 500); the odd ones out are the plain codes that are statuses themselves (400,
404, 405). Clients (confluent-kafka's ``SchemaRegistryError``, the Java
``RestClientException``) act on ``error_code``, so the codes are kept exactly; the
messages follow Confluent's wording so people searching for them find the same answers.
"""

from __future__ import annotations

import enum

from sluice.registry.api import Answer


class ErrorCode(enum.IntEnum):
    """Confluent's ``error_code`` values (``rest/exceptions/Errors.java``)."""

    BAD_REQUEST = 400
    """A body that is not JSON, or of the wrong shape (an object where a string goes,
    …): what Confluent's REST layer answers when Jackson cannot read or map the body
    (rest-utils' ``JsonMappingExceptionMapper``: status 400, the plain status as the
    code)."""
    UNAUTHORIZED = 401
    """No credentials, or wrong ones, on a registry that asks for them."""
    NOT_FOUND = 404
    """An unknown path, or a query parameter that is not the integer it must be (as
    Jersey answers one)."""
    METHOD_NOT_ALLOWED = 405
    PAYLOAD_TOO_LARGE = 413
    """A request body over the listener's bound."""
    UNSUPPORTED_MEDIA_TYPE = 415
    """A request body of a content type Confluent does not accept."""
    USER_NOT_AUTHORIZED = 40301
    """A signed-in caller the authorizer refuses (Confluent's RBAC answers 40301)."""
    SUBJECT_NOT_FOUND = 40401
    VERSION_NOT_FOUND = 40402
    SCHEMA_NOT_FOUND = 40403
    SUBJECT_SOFT_DELETED = 40404
    SUBJECT_NOT_SOFT_DELETED = 40405
    VERSION_SOFT_DELETED = 40406
    VERSION_NOT_SOFT_DELETED = 40407
    SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
    SUBJECT_MODE_NOT_CONFIGURED = 40409
    INCOMPATIBLE_SCHEMA = 40901
    INVALID_SCHEMA = 42201
    INVALID_VERSION = 42202
    INVALID_COMPATIBILITY_LEVEL = 42203
    INVALID_MODE = 42204
    OPERATION_NOT_PERMITTED = 42205
    REFERENCE_EXISTS = 42206
    INVALID_SUBJECT = 42208
    SCHEMA_TOO_LARGE = 42209
    STORE_ERROR = 50001
    OPERATION_TIMEOUT = 50002
    REQUEST_FORWARDING_FAILED = 50003
    UNKNOWN_LEADER = 50004
    JSON_PARSE_ERROR = 50005
    """What Confluent's REST layer answers for a body that is not JSON (status 400)."""

    @property
    def http_status(self) -> int:
        """The HTTP status Confluent answers this code with."""
        if self.value < 1000:
            return self.value
        if self is ErrorCode.JSON_PARSE_ERROR:
            return 400
        return self.value // 100


class RegistryError(Exception):
    """A call refused with one of Confluent's error codes; ``message`` is the body's."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.value}: {self.message}"


def answer_for(error: RegistryError) -> Answer:
    """The answer Confluent gives for ``error``."""
    return Answer(
        error.code.http_status, {"error_code": error.code.value, "message": error.message}
    )


# The errors with Confluent's own wording, by what they say.


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(ErrorCode.SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(version: int | str) -> RegistryError:
    return RegistryError(ErrorCode.VERSION_NOT_FOUND, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RegistryError:
    if schema_id is None:
        return RegistryError(ErrorCode.SCHEMA_NOT_FOUND, "Schema not found")
    return RegistryError(ErrorCode.SCHEMA_NOT_FOUND, f"Schema {schema_id} not found")


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(
        ErrorCode.SUBJECT_SOFT_DELETED,
        f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently",
    )


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(
        ErrorCode.SUBJECT_NOT_SOFT_DELETED,
        f"Subject '{subject}' was not deleted first before being permanently deleted",
    )


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        ErrorCode.VERSION_SOFT_DELETED,
        f"Subject '{subject}' Version {version} was soft deleted."
        "Set permanent=true to delete permanently",
    )


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        ErrorCode.VERSION_NOT_SOFT_DELETED,
        f"Subject '{subject}' Version {version} was not deleted "
        "first before being permanently deleted",
    )


def subject_compatibility_not_configured(subject: str) -> RegistryError:
    return RegistryError(
        ErrorCode.SUBJECT_COMPATIBILITY_NOT_CONFIGURED,
        f"Subject '{subject}' does not have subject-level compatibility configured",
    )


def subject_mode_not_configured(subject: str) -> RegistryError:
    return RegistryError(
        ErrorCode.SUBJECT_MODE_NOT_CONFIGURED,
        f"Subject '{subject}' does not have subject-level mode configured",
    )


def incompatible_schema(subject: str, messages: list[str]) -> RegistryError:
    """Confluent's message ends with the list of what is incompatible, as Java prints a
    list."""
    return RegistryError(
        ErrorCode.INCOMPATIBLE_SCHEMA,
        "Schema being registered is incompatible with an earlier schema for subject "
        f'"{subject}", details: [{", ".join(messages)}]',
    )


def invalid_schema(detail: str) -> RegistryError:
    return RegistryError(ErrorCode.INVALID_SCHEMA, detail)


def invalid_version(version: str) -> RegistryError:
    return RegistryError(
        ErrorCode.INVALID_VERSION,
        f"The specified version '{version}' is not a valid version id. "
        'Allowed values are between [1, 2^31-1] and the string "latest"',
    )


def invalid_compatibility_level() -> RegistryError:
    return RegistryError(
        ErrorCode.INVALID_COMPATIBILITY_LEVEL,
        "Invalid compatibility level. Valid values are none, backward, forward, full, "
        "backward_transitive, forward_transitive, and full_transitive",
    )


def invalid_mode(detail: str = "") -> RegistryError:
    return RegistryError(
        ErrorCode.INVALID_MODE,
        detail
        or "Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE and IMPORT.",
    )


def operation_not_permitted(detail: str) -> RegistryError:
    return RegistryError(ErrorCode.OPERATION_NOT_PERMITTED, detail)


def reference_exists(subject: str, version: int) -> RegistryError:
    """A schema others reference cannot be deleted; Confluent names it by its key."""
    return RegistryError(
        ErrorCode.REFERENCE_EXISTS,
        "One or more references exist to the schema "
        f"{{magic=1,keytype=SCHEMA,subject={subject},version={version}}}.",
    )


def invalid_subject(subject: str) -> RegistryError:
    return RegistryError(
        ErrorCode.INVALID_SUBJECT, f"The specified subject '{subject}' is not a valid."
    )


def schema_too_large(limit_bytes: int) -> RegistryError:
    return RegistryError(
        ErrorCode.SCHEMA_TOO_LARGE,
        f"Write failed because schema is too large (more than {limit_bytes} bytes)",
    )


def store_error(detail: str = "") -> RegistryError:
    return RegistryError(ErrorCode.STORE_ERROR, detail or "Error in the backend data store")


def operation_timeout(detail: str) -> RegistryError:
    return RegistryError(ErrorCode.OPERATION_TIMEOUT, detail)


def forwarding_failed(detail: str = "") -> RegistryError:
    return RegistryError(
        ErrorCode.REQUEST_FORWARDING_FAILED,
        detail or "Error while forwarding the request to the leader",
    )


def unknown_path() -> RegistryError:
    return RegistryError(ErrorCode.NOT_FOUND, "HTTP 404 Not Found")


def method_not_allowed() -> RegistryError:
    return RegistryError(ErrorCode.METHOD_NOT_ALLOWED, "HTTP 405 Method Not Allowed")


def wrong_shape(detail: str) -> RegistryError:
    """A body of the wrong shape: Confluent answers 400 with the plain status as code."""
    return RegistryError(ErrorCode.BAD_REQUEST, detail)
