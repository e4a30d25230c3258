"""The per-request cost of authorization: one ``AclIndex.authorize`` check (what every
handler asks per resource) against indexes of growing size, and the cost of rebuilding
the index when the ACLs change.

    .venv/bin/python bench/authorization.py

Each index holds N literal topic ACLs (half of them for other principals), N/100 prefixed
ones and a wildcard; a check looks up a topic that has ACLs (allowed), one that has none
(denied by default), and one covered by a prefix.
"""

from __future__ import annotations

import argparse
import timeit

from sluice.common.authorizer import (
    AccessControlEntry,
    AclBinding,
    AclIndex,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)

PRINCIPAL = "User:alice"
HOST = "10.0.0.1"


def _acls(count: int) -> list[AclBinding]:
    found = []
    for i in range(count):
        principal = PRINCIPAL if i % 2 == 0 else f"User:user{i}"
        found.append(
            AclBinding(
                ResourcePattern(ResourceType.TOPIC, f"topic-{i}", PatternType.LITERAL),
                AccessControlEntry(principal, "*", Operation.READ, Permission.ALLOW),
            )
        )
    for i in range(max(count // 100, 1)):
        found.append(
            AclBinding(
                ResourcePattern(ResourceType.TOPIC, f"prefix-{i}-", PatternType.PREFIXED),
                AccessControlEntry(PRINCIPAL, "*", Operation.WRITE, Permission.ALLOW),
            )
        )
    found.append(
        AclBinding(
            ResourcePattern(ResourceType.GROUP, "*", PatternType.LITERAL),
            AccessControlEntry(PRINCIPAL, "*", Operation.READ, Permission.ALLOW),
        )
    )
    return found


def _per_call_ns(statement: object, number: int) -> float:
    timer = timeit.Timer(statement)  # type: ignore[arg-type]
    return min(timer.repeat(repeat=5, number=number)) / number * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 1_000, 10_000])
    arguments = parser.parse_args()
    print("| ACLs | allowed (literal) | denied (no ACL) | allowed (prefixed) | rebuild |")
    print("|---:|---:|---:|---:|---:|")
    for size in arguments.sizes:
        bindings = _acls(size)
        index = AclIndex(bindings)

        def allowed(index: AclIndex = index) -> None:
            index.authorize(PRINCIPAL, HOST, Operation.DESCRIBE, ResourceType.TOPIC, "topic-0")

        def denied(index: AclIndex = index) -> None:
            index.authorize(PRINCIPAL, HOST, Operation.READ, ResourceType.TOPIC, "nothing")

        def prefixed(index: AclIndex = index) -> None:
            index.authorize(PRINCIPAL, HOST, Operation.WRITE, ResourceType.TOPIC, "prefix-0-x")

        def rebuild(bindings: list[AclBinding] = bindings) -> None:
            AclIndex(bindings)

        print(
            f"| {len(bindings):,} | {_per_call_ns(allowed, 20_000) / 1000:.2f} µs "
            f"| {_per_call_ns(denied, 20_000) / 1000:.2f} µs "
            f"| {_per_call_ns(prefixed, 20_000) / 1000:.2f} µs "
            f"| {_per_call_ns(rebuild, 5) / 1e6:.1f} ms |"
        )


if __name__ == "__main__":
    main()
