"""Client quotas as an administrator sets them (KIP-546): DescribeClientQuotas and
AlterClientQuotas, the model being Kafka's ``kafka-configs --entity-type users|clients``.
An entity is a mapping of ``user`` and/or ``client-id`` to a name, None standing for
the default (``<default>``). ``sluice quotas`` prints and changes these."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sluice.client.cluster import Cluster
from sluice.client.messages import Request
from sluice.common import errors
from sluice.common.errors import ErrorCode
from sluice.protocol.versions import ApiKey

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

Entity = Mapping[str, str | None]


@dataclass(frozen=True)
class QuotaEntry:
    entity: dict[str, str | None]
    values: dict[str, float]


def _raise_for(code: int, message: str | None, context: str) -> None:
    if code != ErrorCode.none:
        raise errors.for_code(code)(f"{context}: {message}" if message else context)


def describe_entity(entity: Entity) -> str:
    """``user=alice, client-id=<default>``"""
    return ", ".join(
        f"{kind}={'<default>' if name is None else name}" for kind, name in entity.items()
    )


async def describe_client_quotas(
    cluster: Cluster, entity_filter: Entity | None = None
) -> list[QuotaEntry]:
    """Every quota entity matching ``entity_filter`` (a name to match exactly, None for
    the default; no filter: all), with its values."""
    components = [
        {
            "entity_type": kind,
            "match_type": MATCH_DEFAULT if name is None else MATCH_EXACT,
            "match": name,
        }
        for kind, name in (entity_filter or {}).items()
    ]
    connection = await cluster.any_connection()
    response = await connection.request(
        Request(ApiKey.DESCRIBE_CLIENT_QUOTAS, {"components": components, "strict": False})
    )
    _raise_for(response.error_code, response.error_message, "describing client quotas")
    return [
        QuotaEntry(
            {e.entity_type: e.entity_name for e in entry.entity},
            {v.key: float(v.value) for v in entry.values},
        )
        for entry in response.entries or ()
    ]


async def alter_client_quotas(
    cluster: Cluster,
    entity: Entity,
    *,
    set_values: Mapping[str, float] | None = None,
    remove: Sequence[str] = (),
) -> None:
    """Set and remove quota values of one entity; raises the broker's error."""
    ops = [{"key": k, "value": float(v), "remove": False} for k, v in (set_values or {}).items()]
    ops += [{"key": k, "value": 0.0, "remove": True} for k in remove]
    connection = await cluster.any_connection()
    response = await connection.request(
        Request(
            ApiKey.ALTER_CLIENT_QUOTAS,
            {
                "entries": [
                    {
                        "entity": [
                            {"entity_type": kind, "entity_name": name}
                            for kind, name in entity.items()
                        ],
                        "ops": ops,
                    }
                ],
                "validate_only": False,
            },
        )
    )
    for result in response.entries:
        _raise_for(result.error_code, result.error_message, describe_entity(entity))
