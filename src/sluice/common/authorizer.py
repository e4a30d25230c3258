"""Kafka's ACL model and authorization rules, as pure logic (no I/O).

An ACL binding is a resource pattern (resource type, name, pattern type) and an access
control entry (principal, host, operation, allow or deny), the model of Kafka's
``org.apache.kafka.common.acl``. :class:`AclIndex` answers "may this principal, from this
host, do this operation on this resource?" as Kafka's ``StandardAuthorizer`` does:

1. a super user may do everything;
2. the ACLs that apply to the resource are the LITERAL ones naming it, the LITERAL ones
   named ``*`` and the PREFIXED ones whose name starts the resource's name;
3. an entry matches the request when its principal is the principal or ``User:*`` and
   its host is the client's IP address or ``*``;
4. a matching DENY of the operation (or of ALL) refuses, whatever allows it;
5. a matching ALLOW of the operation, of ALL, or of an operation implying it (READ,
   WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows;
6. when no ACL at all applies to the resource, ``allow.everyone.if.no.acl.found``
   decides (false by default: deny);
7. otherwise the request is refused.

Filters (:class:`AclBindingFilter`) select bindings for DescribeAcls and DeleteAcls with
Kafka's ANY and MATCH semantics.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

CLUSTER_NAME = "kafka-cluster"
"""The one name of the CLUSTER resource."""
WILDCARD = "*"
"""A LITERAL resource name, a principal's name or a host matching every one."""
WILDCARD_PRINCIPAL = "User:*"
ANONYMOUS = "User:ANONYMOUS"
"""The principal of a client that did not authenticate."""


class ResourceType(IntEnum):
    """Kafka's ``ResourceType`` codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    """Kafka's ``PatternType`` codes: LITERAL and PREFIXED are stored; ANY and MATCH
    only filter."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    """Kafka's ``AclOperation`` codes, with the filter and wildcard values."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    """Kafka's ``AclPermissionType`` codes."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


IMPLIED_BY: Mapping[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}
"""The ALLOWed operations that also allow the key (Kafka: ``StandardAuthorizerData``)."""

SUPPORTED_OPERATIONS: Mapping[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset(
        {
            Operation.READ,
            Operation.WRITE,
            Operation.CREATE,
            Operation.DESCRIBE,
            Operation.DELETE,
            Operation.ALTER,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset(
        {
            Operation.READ,
            Operation.DESCRIBE,
            Operation.DELETE,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
        }
    ),
    ResourceType.CLUSTER: frozenset(
        {
            Operation.CREATE,
            Operation.CLUSTER_ACTION,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
            Operation.IDEMPOTENT_WRITE,
            Operation.ALTER,
            Operation.DESCRIBE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.DESCRIBE, Operation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({Operation.DESCRIBE}),
    ResourceType.USER: frozenset(
        {
            Operation.CREATE_TOKENS,
            Operation.DESCRIBE_TOKENS,
        }
    ),
}
"""The operations Kafka supports on each resource type (``AclEntry.supportedOperations``),
what the ``authorized_operations`` fields are computed over."""


class AclValidationError(ValueError):
    """A binding CreateAcls must refuse (INVALID_REQUEST, with this message)."""


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: Operation
    permission: Permission


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def to_json(self) -> dict[str, object]:
        return {
            "resource_type": self.pattern.resource_type.name,
            "name": self.pattern.name,
            "pattern_type": self.pattern.pattern_type.name,
            "principal": self.entry.principal,
            "host": self.entry.host,
            "operation": self.entry.operation.name,
            "permission": self.entry.permission.name,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> AclBinding:
        return cls(
            ResourcePattern(
                ResourceType[str(data["resource_type"])],
                str(data["name"]),
                PatternType[str(data["pattern_type"])],
            ),
            AccessControlEntry(
                str(data["principal"]),
                str(data["host"]),
                Operation[str(data["operation"])],
                Permission[str(data["permission"])],
            ),
        )


def validate_new_binding(binding: AclBinding) -> None:
    """Raise :class:`AclValidationError` for a binding Kafka refuses to create
    (``AclControlManager.validateNewAcl``)."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise AclValidationError(f"Invalid resourceType {pattern.resource_type.name}")
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclValidationError(f"Invalid patternType {pattern.pattern_type.name}")
    if entry.operation in (Operation.UNKNOWN, Operation.ANY):
        raise AclValidationError(f"Invalid operation {entry.operation.name}")
    if entry.permission not in (Permission.ALLOW, Permission.DENY):
        raise AclValidationError(f"Invalid permissionType {entry.permission.name}")
    if not pattern.name:
        raise AclValidationError("Resource name should not be empty")
    if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        raise AclValidationError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if ":" not in entry.principal:
        raise AclValidationError(f"Could not parse principal from `{entry.principal}`")
    if not entry.host:
        raise AclValidationError("Host should not be empty")
    if (
        entry.operation is not Operation.ALL
        and entry.operation not in SUPPORTED_OPERATIONS[pattern.resource_type]
    ):
        raise AclValidationError(
            f"Operation {entry.operation.name} is not valid for a "
            f"{pattern.resource_type.name} resource"
        )


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    """None matches every name."""
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        """Kafka's ``ResourcePatternFilter.matches``: MATCH selects every pattern that
        would apply to a resource of this name (itself, ``*``, the prefixes of it)."""
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type is PatternType.LITERAL:
            return pattern.name in (self.name, WILDCARD)
        return self.name.startswith(pattern.name)

    def is_unknown(self) -> bool:
        return (
            self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN
        )


@dataclass(frozen=True, slots=True)
class EntryFilter:
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and self.operation in (Operation.ANY, entry.operation)
            and self.permission in (Permission.ANY, entry.permission)
        )

    def is_unknown(self) -> bool:
        return self.operation is Operation.UNKNOWN or self.permission is Permission.UNKNOWN


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: EntryFilter = EntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)

    def is_unknown(self) -> bool:
        return self.pattern.is_unknown() or self.entry.is_unknown()


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users``: principals separated by ``;`` (``User:admin;User:broker``)."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


_Key = tuple[ResourceType, str]


class AclIndex:
    """Every ACL, indexed by resource for the per-request check: a lookup per pattern
    that can apply (the literal name, ``*``, and each PREFIXED pattern of the type, of
    which there are few) and a walk over the few entries found."""

    def __init__(
        self,
        bindings: Iterable[AclBinding],
        *,
        super_users: frozenset[str] = frozenset(),
        allow_if_no_acl: bool = False,
    ) -> None:
        self.bindings = frozenset(bindings)
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        literal: dict[_Key, list[AccessControlEntry]] = defaultdict(list)
        prefixed: dict[ResourceType, list[tuple[str, AccessControlEntry]]] = defaultdict(list)
        for binding in self.bindings:
            pattern = binding.pattern
            if pattern.pattern_type is PatternType.LITERAL:
                literal[(pattern.resource_type, pattern.name)].append(binding.entry)
            elif pattern.pattern_type is PatternType.PREFIXED:
                prefixed[pattern.resource_type].append((pattern.name, binding.entry))
        self._literal = dict(literal)
        self._prefixed = dict(prefixed)

    def entries_for(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """Every entry whose pattern applies to the resource."""
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found.extend(self._literal.get((resource_type, WILDCARD), ()))
        for prefix, entry in self._prefixed.get(resource_type, ()):
            if name.startswith(prefix):
                found.append(entry)
        return found

    def authorize(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        entries = self.entries_for(resource_type, name)
        if not entries:
            return self.allow_if_no_acl
        allowing = IMPLIED_BY.get(operation, frozenset((operation,)))
        allowed = False
        for entry in entries:
            if entry.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if entry.host not in (host, WILDCARD):
                continue
            if entry.permission is Permission.DENY:
                if entry.operation in (operation, Operation.ALL):
                    return False
            elif entry.operation is Operation.ALL or entry.operation in allowing:
                allowed = True
        return allowed

    def authorize_any(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """Kafka's ``Authorizer.authorizeByResourceType``: true when some ALLOW of the
        operation on the type, for this principal and host, names a resource no DENY of
        it covers (a DENY of ``*`` covers them all)."""
        if principal in self.super_users:
            return True
        denied_literal: set[str] = set()
        denied_prefixes: list[str] = []
        allowed: list[ResourcePattern] = []
        found = False
        for binding in self.bindings:
            pattern, entry = binding.pattern, binding.entry
            if pattern.resource_type is not resource_type:
                continue
            found = True
            if entry.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if entry.host not in (host, WILDCARD):
                continue
            if entry.operation not in (operation, Operation.ALL):
                continue
            if entry.permission is Permission.DENY:
                if pattern.pattern_type is PatternType.LITERAL:
                    denied_literal.add(pattern.name)
                else:
                    denied_prefixes.append(pattern.name)
            else:
                allowed.append(pattern)
        if not found:
            return self.allow_if_no_acl
        if WILDCARD in denied_literal:
            return False
        for pattern in allowed:
            if any(pattern.name.startswith(prefix) for prefix in denied_prefixes):
                continue
            if pattern.pattern_type is PatternType.LITERAL and pattern.name in denied_literal:
                continue
            return True
        return False

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str
    ) -> int:
        """The ``authorized_operations`` bit field: bit n for each supported operation n
        the principal may do on the resource."""
        return sum(
            1 << int(operation)
            for operation in SUPPORTED_OPERATIONS[resource_type]
            if self.authorize(principal, host, operation, resource_type, name)
        )

    def matching(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return sorted(b for b in self.bindings if acl_filter.matches(b))
