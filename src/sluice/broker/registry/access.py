"""Who may make a registry call, on a broker with the authorizer on: Kafka's ACLs,
resource by resource, since Kafka has no SUBJECT resource type (Confluent's RBAC has).

=====================================  ==============================================
call                                   needs
=====================================  ==============================================
on subject ``<topic>-value`` or         READ on TOPIC ``<topic>`` to read it, WRITE on
``<topic>-key`` (TopicNameStrategy)     it to register, delete or set its config/mode
on any other subject (RecordName-       DESCRIBE on the CLUSTER to read, ALTER on the
Strategy, …)                            CLUSTER to change
without a subject, reading              nothing more than a signed-in user (schemas by
(``/schemas/ids/…``, ``/config``, …)    id are what every consumer's deserializer asks)
without a subject, changing             ALTER on the CLUSTER
(``PUT /config``, ``PUT /mode``)
=====================================  ==============================================

Listings show only the subjects the caller may read (filtered by the HTTP listener, which
knows the caller, and paged after the filter): ``GET /subjects``, ``GET /schemas`` (each
version with its subject), ``GET /schemas/ids/{id}/subjects`` and ``…/versions``. Super users may do
everything; ``allow.everyone.if.no.acl.found`` applies as for Kafka's requests.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.broker.authorization import CLUSTER, Authorizer
from sluice.common.authorizer import Operation, ResourceType

TOPIC_NAME_SUFFIXES = ("-value", "-key")
"""TopicNameStrategy's subjects: ``<topic>-value`` and ``<topic>-key``."""


def topic_of_subject(subject: str) -> str | None:
    """The topic a subject names under TopicNameStrategy, or None."""
    for suffix in TOPIC_NAME_SUFFIXES:
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[: -len(suffix)]
    return None


@dataclass(frozen=True)
class Need:
    """What a call needs: an operation on a resource (None: nothing beyond signing in)."""

    operation: Operation
    resource_type: ResourceType
    name: str

    def __str__(self) -> str:
        return f"{self.operation.name.title()} on {self.resource_type.name.title()}: {self.name}"


def need_of(subject: str | None, write: bool) -> Need | None:
    """What a call on ``subject`` (None: no subject) needs, reading or changing."""
    if subject is None:
        return Need(Operation.ALTER, ResourceType.CLUSTER, CLUSTER) if write else None
    topic = topic_of_subject(subject)
    if topic is None:
        operation = Operation.ALTER if write else Operation.DESCRIBE
        return Need(operation, ResourceType.CLUSTER, CLUSTER)
    return Need(Operation.WRITE if write else Operation.READ, ResourceType.TOPIC, topic)


class SubjectAccess:
    """The broker's authorizer asked about registry calls."""

    def __init__(self, authorizer: Authorizer) -> None:
        self._authorizer = authorizer

    def refusal(self, principal: str, host: str, subject: str | None, write: bool) -> str | None:
        """None when ``principal`` may make the call, else Confluent's 40301 message."""
        need = need_of(subject, write)
        if need is None or self._allows(principal, host, need):
            return None
        return f"User cannot access the resource: {principal} is denied {need}"

    def may_read(self, principal: str, host: str, subject: str) -> bool:
        need = need_of(subject, write=False)
        return need is None or self._allows(principal, host, need)

    def _allows(self, principal: str, host: str, need: Need) -> bool:
        if not self._authorizer.enabled:
            return True
        return self._authorizer.index().authorize(
            principal, host, need.operation, need.resource_type, need.name
        )
