"""The registry's operations: what a call of Confluent's API asks, once its path, query
and body are checked (:mod:`~sluice.registry.routes` makes them, the shard does them).

Reads the shard answers at once from its state; *parsed reads* (a lookup, a
compatibility check, a ``format=serialized`` read) need the candidate parsed first, off
the event loop; *writes* append records and are answered once those are committed.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.schemas.api import Reference, SchemaType

LATEST = -1
"""The version ``latest`` (or ``-1``) names."""
NO_LIMIT = -1
"""A listing's ``limit`` that takes everything (so does any limit of 0 or less)."""


@dataclass(frozen=True, slots=True)
class SchemaRequest:
    """A schema in a request body (register, lookup, compatibility)."""

    schema_type: SchemaType
    text: str
    references: tuple[Reference, ...] = ()
    id: int | None = None
    """IMPORT mode only: the id to register the schema with."""
    version: int | None = None
    """IMPORT mode only: the version to register it as."""


# ====================================================================== reads


@dataclass(frozen=True, slots=True)
class GetRoot:
    pass


@dataclass(frozen=True, slots=True)
class GetSchemaTypes:
    pass


@dataclass(frozen=True, slots=True)
class GetContexts:
    pass


@dataclass(frozen=True, slots=True)
class GetSchemaById:
    schema_id: int
    part: str = "full"
    """``full`` (the schema object), ``schema`` (the text alone), ``subjects``, ``versions``."""
    subject: str | None = None
    serialized: bool = False
    deleted: bool = False
    offset: int = 0
    """For ``subjects`` and ``versions``: how many to skip, then at most ``limit``."""
    limit: int = NO_LIMIT


@dataclass(frozen=True, slots=True)
class ListSchemas:
    subject_prefix: str = ""
    deleted: bool = False
    latest_only: bool = False
    offset: int = 0
    limit: int = NO_LIMIT


@dataclass(frozen=True, slots=True)
class ListSubjects:
    subject_prefix: str = ""
    deleted: bool = False
    deleted_only: bool = False
    """Only subjects with soft-deleted versions (wins over ``deleted``)."""
    offset: int = 0
    limit: int = NO_LIMIT


@dataclass(frozen=True, slots=True)
class ListVersions:
    subject: str
    deleted: bool = False
    deleted_only: bool = False
    """Only the soft-deleted versions (wins over ``deleted``)."""
    offset: int = 0
    limit: int = NO_LIMIT


@dataclass(frozen=True, slots=True)
class GetVersion:
    subject: str
    version: int
    """A version, or :data:`LATEST`."""
    deleted: bool = False
    schema_only: bool = False
    serialized: bool = False


@dataclass(frozen=True, slots=True)
class GetReferencedBy:
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class GetConfig:
    subject: str | None
    default_to_global: bool = False


@dataclass(frozen=True, slots=True)
class GetMode:
    subject: str | None
    default_to_global: bool = False


# ============================================================== parsed reads


@dataclass(frozen=True, slots=True)
class LookUp:
    subject: str
    schema: SchemaRequest
    normalize: bool = False
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class CheckCompatibility:
    subject: str
    version: int | None
    """One version (or :data:`LATEST`) to check against; None: as the level says."""
    schema: SchemaRequest
    normalize: bool = False
    verbose: bool = False


# ===================================================================== writes


@dataclass(frozen=True, slots=True)
class Register:
    subject: str
    schema: SchemaRequest
    normalize: bool = False


@dataclass(frozen=True, slots=True)
class DeleteSubject:
    subject: str
    permanent: bool = False


@dataclass(frozen=True, slots=True)
class DeleteVersion:
    subject: str
    version: int
    permanent: bool = False


@dataclass(frozen=True, slots=True)
class SetConfig:
    subject: str | None
    level: str


@dataclass(frozen=True, slots=True)
class DeleteConfig:
    subject: str | None


@dataclass(frozen=True, slots=True)
class SetMode:
    subject: str | None
    mode: str
    force: bool = False


@dataclass(frozen=True, slots=True)
class DeleteMode:
    subject: str | None


Read = (
    GetRoot
    | GetSchemaTypes
    | GetContexts
    | GetSchemaById
    | ListSchemas
    | ListSubjects
    | ListVersions
    | GetVersion
    | GetReferencedBy
    | GetConfig
    | GetMode
)
ParsedRead = LookUp | CheckCompatibility
Write = Register | DeleteSubject | DeleteVersion | SetConfig | DeleteConfig | SetMode | DeleteMode
Operation = Read | ParsedRead | Write
