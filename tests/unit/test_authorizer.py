"""The pure authorizer: Kafka's matching, implication, deny-wins and default rules."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.common.authorizer import (
    IMPLIED_BY,
    SUPPORTED_OPERATIONS,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclIndex,
    AclValidationError,
    EntryFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    parse_super_users,
    validate_new_binding,
)

NO_DEADLINE = settings(deadline=None)
"""Properties check results, not speed: the suite runs on busy workers."""

ALICE = "User:alice"
BOB = "User:bob"
HOST = "10.0.0.1"
OTHER_HOST = "10.0.0.2"
REAL_OPERATIONS = [op for op in Operation if op > Operation.ALL]


def acl(
    name: str,
    operation: Operation,
    permission: Permission = Permission.ALLOW,
    *,
    principal: str = ALICE,
    host: str = "*",
    resource_type: ResourceType = ResourceType.TOPIC,
    pattern_type: PatternType = PatternType.LITERAL,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource_type, name, pattern_type),
        AccessControlEntry(principal, host, operation, permission),
    )


def allows(
    index: AclIndex,
    operation: Operation,
    name: str = "orders",
    *,
    principal: str = ALICE,
    host: str = HOST,
    resource_type: ResourceType = ResourceType.TOPIC,
) -> bool:
    return index.authorize(principal, host, operation, resource_type, name)


def test_deny_by_default_and_allow_everyone_if_no_acl_found() -> None:
    assert not allows(AclIndex([]), Operation.READ)
    assert allows(AclIndex([], allow_if_no_acl=True), Operation.READ)
    # An ACL on the resource for someone else: no longer "no ACL found".
    index = AclIndex([acl("orders", Operation.READ, principal=BOB)], allow_if_no_acl=True)
    assert not allows(index, Operation.READ)
    assert allows(index, Operation.READ, "payments")


def test_super_users_may_do_everything_even_when_denied() -> None:
    index = AclIndex(
        [acl("orders", Operation.ALL, Permission.DENY)], super_users=frozenset({ALICE})
    )
    assert all(allows(index, op) for op in REAL_OPERATIONS)
    assert parse_super_users(" User:admin; User:broker ;") == {"User:admin", "User:broker"}


def test_literal_wildcard_and_prefixed_patterns() -> None:
    index = AclIndex(
        [
            acl("orders", Operation.READ),
            acl("*", Operation.WRITE),
            acl("pay", Operation.DELETE, pattern_type=PatternType.PREFIXED),
        ]
    )
    assert allows(index, Operation.READ, "orders")
    assert not allows(index, Operation.READ, "orders2")
    assert allows(index, Operation.WRITE, "anything")
    assert allows(index, Operation.DELETE, "payments")
    assert allows(index, Operation.DELETE, "pay")
    assert not allows(index, Operation.DELETE, "pa")
    # A LITERAL "pay*" is not a prefix: only the name "pay*" itself.
    assert not allows(AclIndex([acl("pay*", Operation.READ)]), Operation.READ, "payments")
    # Patterns apply to their resource type only.
    assert not allows(index, Operation.READ, "orders", resource_type=ResourceType.GROUP)


def test_principal_and_host_matching() -> None:
    index = AclIndex(
        [
            acl("orders", Operation.READ, host=HOST),
            acl("events", Operation.READ, principal="User:*"),
        ]
    )
    assert allows(index, Operation.READ, "orders")
    assert not allows(index, Operation.READ, "orders", host=OTHER_HOST)
    assert not allows(index, Operation.READ, "orders", principal=BOB)
    assert allows(index, Operation.READ, "events", principal=BOB)


def test_deny_wins_over_allow_and_only_for_its_operation() -> None:
    index = AclIndex(
        [
            acl("orders", Operation.ALL),
            acl("orders", Operation.WRITE, Permission.DENY),
        ]
    )
    assert allows(index, Operation.READ)
    assert not allows(index, Operation.WRITE)
    # A DENY of DESCRIBE does not deny READ (implication is for ALLOW only).
    index = AclIndex(
        [acl("orders", Operation.READ), acl("orders", Operation.DESCRIBE, Permission.DENY)]
    )
    assert allows(index, Operation.READ)
    assert not allows(index, Operation.DESCRIBE)
    # A DENY from another host, or for another principal, does not apply.
    index = AclIndex(
        [
            acl("orders", Operation.READ),
            acl("orders", Operation.READ, Permission.DENY, host=OTHER_HOST),
            acl("orders", Operation.READ, Permission.DENY, principal=BOB),
        ]
    )
    assert allows(index, Operation.READ)
    # A prefixed DENY wins over a literal ALLOW.
    index = AclIndex(
        [
            acl("orders", Operation.READ),
            acl("ord", Operation.READ, Permission.DENY, pattern_type=PatternType.PREFIXED),
        ]
    )
    assert not allows(index, Operation.READ)


@pytest.mark.parametrize("granted", REAL_OPERATIONS, ids=lambda op: op.name)
@pytest.mark.parametrize("asked", REAL_OPERATIONS, ids=lambda op: op.name)
def test_allow_matrix_of_implications(granted: Operation, asked: Operation) -> None:
    """An ALLOW of ``granted`` allows ``asked`` exactly when they are equal or Kafka's
    implications say so (READ/WRITE/DELETE/ALTER → DESCRIBE, ALTER_CONFIGS →
    DESCRIBE_CONFIGS)."""
    index = AclIndex([acl("orders", granted)])
    expected = granted == asked or granted in IMPLIED_BY.get(asked, frozenset())
    assert allows(index, asked) is expected


def test_all_allows_and_denies_every_operation() -> None:
    allow_all = AclIndex([acl("orders", Operation.ALL)])
    deny_all = AclIndex(
        [acl("orders", Operation.ALL), acl("orders", Operation.ALL, Permission.DENY)]
    )
    for op in REAL_OPERATIONS:
        assert allows(allow_all, op)
        assert not allows(deny_all, op)


def test_authorized_operations_bit_field() -> None:
    index = AclIndex([acl("orders", Operation.READ), acl("orders", Operation.ALTER_CONFIGS)])
    field = index.authorized_operations(ALICE, HOST, ResourceType.TOPIC, "orders")
    expected = {Operation.READ, Operation.DESCRIBE, Operation.ALTER_CONFIGS}
    expected.add(Operation.DESCRIBE_CONFIGS)
    assert field == sum(1 << op for op in expected)
    super_index = AclIndex([], super_users=frozenset({ALICE}))
    assert super_index.authorized_operations(ALICE, HOST, ResourceType.GROUP, "g") == sum(
        1 << op for op in SUPPORTED_OPERATIONS[ResourceType.GROUP]
    )


def test_filters_any_match_literal_prefixed() -> None:
    bindings = [
        acl("orders", Operation.READ),
        acl("*", Operation.READ),
        acl("ord", Operation.READ, pattern_type=PatternType.PREFIXED),
        acl("other", Operation.WRITE, Permission.DENY, principal=BOB),
        acl("orders", Operation.READ, resource_type=ResourceType.GROUP),
    ]
    index = AclIndex(bindings)

    def names(f: AclBindingFilter) -> list[tuple[str, str]]:
        return sorted((b.pattern.resource_type.name, b.pattern.name) for b in index.matching(f))

    topic = ResourceType.TOPIC
    assert len(index.matching(AclBindingFilter())) == 5
    assert names(AclBindingFilter(ResourcePatternFilter(topic, "orders", PatternType.MATCH))) == [
        ("TOPIC", "*"),
        ("TOPIC", "ord"),
        ("TOPIC", "orders"),
    ]
    assert names(AclBindingFilter(ResourcePatternFilter(topic, "orders", PatternType.ANY))) == [
        ("TOPIC", "orders")
    ]
    assert names(AclBindingFilter(ResourcePatternFilter(topic, "ord", PatternType.PREFIXED))) == [
        ("TOPIC", "ord")
    ]
    assert names(AclBindingFilter(ResourcePatternFilter(topic, "ord", PatternType.LITERAL))) == []
    assert names(AclBindingFilter(ResourcePatternFilter(name="orders"))) == [
        ("GROUP", "orders"),
        ("TOPIC", "orders"),
    ]
    assert names(AclBindingFilter(entry=EntryFilter(principal=BOB))) == [("TOPIC", "other")]
    assert names(AclBindingFilter(entry=EntryFilter(permission=Permission.DENY))) == [
        ("TOPIC", "other")
    ]
    assert names(AclBindingFilter(entry=EntryFilter(operation=Operation.WRITE))) == [
        ("TOPIC", "other")
    ]
    assert AclBindingFilter(ResourcePatternFilter(pattern_type=PatternType.UNKNOWN)).is_unknown()


@pytest.mark.parametrize(
    "binding",
    [
        acl("orders", Operation.ANY),
        acl("orders", Operation.READ, Permission.ANY),
        acl("orders", Operation.READ, pattern_type=PatternType.MATCH),
        acl("orders", Operation.READ, resource_type=ResourceType.ANY),
        acl("", Operation.READ),
        acl("orders", Operation.READ, principal="alice"),
        acl("cluster", Operation.ALTER, resource_type=ResourceType.CLUSTER),
        acl("orders", Operation.IDEMPOTENT_WRITE),
    ],
)
def test_invalid_bindings_are_refused(binding: AclBinding) -> None:
    with pytest.raises(AclValidationError):
        validate_new_binding(binding)


def test_binding_json_round_trip() -> None:
    binding = acl("ord", Operation.READ, Permission.DENY, pattern_type=PatternType.PREFIXED)
    assert AclBinding.from_json(binding.to_json()) == binding
    validate_new_binding(binding)
    validate_new_binding(acl("kafka-cluster", Operation.ALTER, resource_type=ResourceType.CLUSTER))


# -- a property-style matrix: the index against a direct reading of Kafka's rules -----

_names = st.sampled_from(["orders", "ord", "orders2", "pay", "*"])
_bindings = st.builds(
    acl,
    _names,
    st.sampled_from([Operation.ALL, *REAL_OPERATIONS[:9]]),
    st.sampled_from([Permission.ALLOW, Permission.DENY]),
    principal=st.sampled_from([ALICE, BOB, "User:*"]),
    host=st.sampled_from(["*", HOST, OTHER_HOST]),
    pattern_type=st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
)


def _reference(
    bindings: list[AclBinding], principal: str, host: str, op: Operation, name: str, default: bool
) -> bool:
    """Kafka's rules written out plainly, one binding at a time."""

    def applies(b: AclBinding) -> bool:
        p = b.pattern
        if p.resource_type is not ResourceType.TOPIC:
            return False
        if p.pattern_type is PatternType.LITERAL:
            return p.name in (name, "*")
        return name.startswith(p.name)

    relevant = [b for b in bindings if applies(b)]
    if not relevant:
        return default
    matching = [
        b.entry
        for b in relevant
        if b.entry.principal in (principal, "User:*") and b.entry.host in (host, "*")
    ]
    if any(
        e.permission is Permission.DENY and e.operation in (op, Operation.ALL) for e in matching
    ):
        return False
    implied = {
        Operation.DESCRIBE: {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER},
        Operation.DESCRIBE_CONFIGS: {Operation.ALTER_CONFIGS},
    }.get(op, set())
    return any(
        e.permission is Permission.ALLOW
        and (e.operation in (op, Operation.ALL) or e.operation in implied)
        for e in matching
    )


@NO_DEADLINE
@given(
    bindings=st.lists(_bindings, max_size=6),
    default=st.booleans(),
)
def test_index_agrees_with_the_rules(bindings: list[AclBinding], default: bool) -> None:
    index = AclIndex(bindings, allow_if_no_acl=default)
    for principal, host, op, name in itertools.product(
        [ALICE, BOB], [HOST, OTHER_HOST], REAL_OPERATIONS[:9], ["orders", "orders2", "pa"]
    ):
        assert allows(index, op, name, principal=principal, host=host) is _reference(
            bindings, principal, host, op, name, default
        ), (principal, host, op, name)
