"""``sluice acls``: add, list and remove ACLs, like Kafka's ``kafka-acls.sh``.

::

    sluice acls add --allow-principal User:alice --operation read --topic orders
    sluice acls add --allow-principal User:alice --operation read --group billing
    sluice acls add --deny-principal User:bob --operation write --topic pay \\
        --resource-pattern-type prefixed
    sluice acls list --topic orders
    sluice acls remove --principal User:bob --yes

``add`` makes one ACL per principal, operation and resource given; ``list`` and
``remove`` select ACLs by filters (none: every ACL; ``--resource-pattern-type match``
finds the ACLs that apply to a name). They need ALTER (add, remove) or DESCRIBE (list) on
the cluster, and a broker with ``authorizer.enabled=true``.
"""

from __future__ import annotations

import itertools

import click

from sluice.cli.common import (
    bootstrap_option,
    echo_json,
    echo_table,
    format_option,
    open_cluster,
    run,
)
from sluice.client.admin_acls import create_acls, delete_acls, describe_acls
from sluice.common.authorizer import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    EntryFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

_OPERATIONS = [op.name.lower().replace("_", "-") for op in Operation if op > Operation.ANY]
_PATTERN_TYPES = ["literal", "prefixed", "match", "any"]


def _operation(name: str) -> Operation:
    return Operation[name.upper().replace("-", "_")]


def _resources(
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    transactional_ids: tuple[str, ...],
    cluster: bool,
) -> list[tuple[ResourceType, str]]:
    return [
        *((ResourceType.TOPIC, t) for t in topics),
        *((ResourceType.GROUP, g) for g in groups),
        *((ResourceType.TRANSACTIONAL_ID, t) for t in transactional_ids),
        *([(ResourceType.CLUSTER, CLUSTER_NAME)] if cluster else []),
    ]


def _resource_options(function: click.decorators.FC) -> click.decorators.FC:
    for option in reversed(
        [
            click.option("--topic", "topics", multiple=True, help="A topic (repeatable)."),
            click.option("--group", "groups", multiple=True, help="A group (repeatable)."),
            click.option(
                "--transactional-id",
                "transactional_ids",
                multiple=True,
                help="A transactional id (repeatable).",
            ),
            click.option("--cluster", is_flag=True, help="The cluster itself."),
        ]
    ):
        function = option(function)
    return function


def _describe(binding: AclBinding) -> tuple[str, ...]:
    pattern, entry = binding.pattern, binding.entry
    return (
        pattern.resource_type.name,
        pattern.name,
        pattern.pattern_type.name,
        entry.principal,
        entry.host,
        entry.operation.name,
        entry.permission.name,
    )


_HEADER = ("RESOURCE TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION")


def _echo(bindings: list[AclBinding], output_format: str) -> None:
    if output_format == "json":
        echo_json([b.to_json() for b in bindings])
    elif bindings:
        echo_table([_HEADER, *(_describe(b) for b in bindings)])


@click.group()
def acls() -> None:
    """Add, list and remove ACLs (brokers with authorizer.enabled=true)."""


@acls.command()
@click.option("--allow-principal", "allowed", multiple=True, help="User:NAME to allow.")
@click.option("--deny-principal", "denied", multiple=True, help="User:NAME to deny.")
@click.option(
    "--operation",
    "operations",
    multiple=True,
    required=True,
    type=click.Choice(_OPERATIONS, case_sensitive=False),
    help="The operation (repeatable).",
)
@click.option("--host", default="*", show_default=True, help="The client IP address, or *.")
@click.option(
    "--resource-pattern-type",
    "pattern_type",
    type=click.Choice(["literal", "prefixed"], case_sensitive=False),
    default="literal",
    show_default=True,
    help="prefixed: every resource whose name starts with the name given.",
)
@_resource_options
@bootstrap_option
def add(
    *,
    allowed: tuple[str, ...],
    denied: tuple[str, ...],
    operations: tuple[str, ...],
    host: str,
    pattern_type: str,
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    transactional_ids: tuple[str, ...],
    cluster: bool,
    bootstrap_server: str,
) -> None:
    """Add ACLs: each principal, operation and resource given."""
    resources = _resources(topics, groups, transactional_ids, cluster)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    principals = [(p, Permission.ALLOW) for p in allowed] + [(p, Permission.DENY) for p in denied]
    if not principals:
        raise click.UsageError("name a principal: --allow-principal or --deny-principal")
    bindings = [
        AclBinding(
            ResourcePattern(kind, name, PatternType[pattern_type.upper()]),
            AccessControlEntry(principal, host, _operation(operation), permission),
        )
        for (kind, name), (principal, permission), operation in itertools.product(
            resources, principals, operations
        )
    ]

    async def create() -> None:
        async with open_cluster(bootstrap_server) as connected:
            await create_acls(connected, bindings)

    run(create)
    _echo(sorted(bindings), "table")


def _filters(
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    transactional_ids: tuple[str, ...],
    cluster: bool,
    pattern_type: str,
    principal: str | None,
    host: str | None,
    operation: str | None,
    permission: str | None,
) -> list[AclBindingFilter]:
    entry = EntryFilter(
        principal,
        host,
        Operation.ANY if operation is None else _operation(operation),
        Permission.ANY if permission is None else Permission[permission.upper()],
    )
    pattern = PatternType[pattern_type.upper()]
    resources = _resources(topics, groups, transactional_ids, cluster)
    if not resources:
        return [AclBindingFilter(ResourcePatternFilter(pattern_type=pattern), entry)]
    return [
        AclBindingFilter(ResourcePatternFilter(kind, name, pattern), entry)
        for kind, name in resources
    ]


def _filter_options(function: click.decorators.FC) -> click.decorators.FC:
    for option in reversed(
        [
            click.option(
                "--resource-pattern-type",
                "pattern_type",
                type=click.Choice(_PATTERN_TYPES, case_sensitive=False),
                default="any",
                show_default=True,
                help="match: every ACL that applies to the names given.",
            ),
            click.option("--principal", default=None, help="Only this principal."),
            click.option("--host", default=None, help="Only this host."),
            click.option(
                "--operation",
                default=None,
                type=click.Choice(_OPERATIONS, case_sensitive=False),
                help="Only this operation.",
            ),
            click.option(
                "--permission",
                default=None,
                type=click.Choice(["allow", "deny"], case_sensitive=False),
                help="Only allow or deny ACLs.",
            ),
        ]
    ):
        function = option(function)
    return _resource_options(function)


@acls.command(name="list")
@_filter_options
@format_option
@bootstrap_option
def list_command(
    *,
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    transactional_ids: tuple[str, ...],
    cluster: bool,
    pattern_type: str,
    principal: str | None,
    host: str | None,
    operation: str | None,
    permission: str | None,
    output_format: str,
    bootstrap_server: str,
) -> None:
    """List the ACLs matching the filters (every ACL without any)."""
    filters = _filters(
        topics,
        groups,
        transactional_ids,
        cluster,
        pattern_type,
        principal,
        host,
        operation,
        permission,
    )

    async def listed() -> list[AclBinding]:
        async with open_cluster(bootstrap_server) as connected:
            found: set[AclBinding] = set()
            for acl_filter in filters:
                found.update(await describe_acls(connected, acl_filter))
            return sorted(found)

    _echo(run(listed), output_format)


@acls.command()
@_filter_options
@click.option("--yes", is_flag=True, help="Remove without asking.")
@bootstrap_option
def remove(
    *,
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    transactional_ids: tuple[str, ...],
    cluster: bool,
    pattern_type: str,
    principal: str | None,
    host: str | None,
    operation: str | None,
    permission: str | None,
    yes: bool,
    bootstrap_server: str,
) -> None:
    """Remove the ACLs matching the filters (after asking, unless --yes)."""
    filters = _filters(
        topics,
        groups,
        transactional_ids,
        cluster,
        pattern_type,
        principal,
        host,
        operation,
        permission,
    )
    if not yes:
        click.confirm("Remove every ACL matching these filters?", abort=True)

    async def removed() -> list[AclBinding]:
        async with open_cluster(bootstrap_server) as connected:
            return await delete_acls(connected, filters)

    _echo(run(removed), "table")
