"""Kafka's ACL operations, for the ``authorized_operations`` fields of Metadata,
DescribeCluster and DescribeGroups.

The fields are bit fields (bit n set for operation code n). Without the authorizer every
principal may do every operation Kafka supports on a resource, and a client asking for
its authorized operations gets all of them, which is what Kafka answers without an
authorizer (``AuthHelper.authorizedOperations`` over ``AclEntry.supportedOperations``);
with it, :mod:`sluice.common.authorizer` decides each bit.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum


class AclOperation(IntEnum):
    """Kafka's ``AclOperation`` codes."""

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


def bit_field(operations: Iterable[AclOperation]) -> int:
    return sum(1 << int(operation) for operation in set(operations))


CLUSTER_AUTHORIZED_OPERATIONS = bit_field(
    (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    )
)
"""Every operation Kafka supports on the cluster resource."""

TOPIC_AUTHORIZED_OPERATIONS = bit_field(
    (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    )
)
"""Every operation Kafka supports on a topic."""

GROUP_AUTHORIZED_OPERATIONS = bit_field(
    (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    )
)
"""Every operation Kafka supports on a group (group configs, KIP-848, added the last
two)."""

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
"""The schema default of every ``*_authorized_operations`` field: not asked for."""
