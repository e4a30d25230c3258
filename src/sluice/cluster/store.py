"""The metadata-store interface, one contract for both backends:
:mod:`sluice.cluster.embedded` (one node, a file in the data directory) and
:mod:`sluice.cluster.zookeeper` (a cluster of brokers sharing a ZooKeeper ensemble).

Asynchronous: every call that reads or writes the backing store is a coroutine that runs
its blocking part (a file write and fsync, a ZooKeeper round trip) in a worker thread,
so the event loop never waits on the store. What the store last saw is an immutable
:class:`~sluice.cluster.image.MetadataImage`, read without waiting (:meth:`image`),
and every new image is handed to the subscribers (:meth:`subscribe`), on whatever thread
noticed the change (a ZooKeeper watch fires on kazoo's thread): a subscriber must only
pass the image on to its event loop, never touch logs there.

Writes are conditional::

    record            written by            condition
    topic             any broker            its version (StaleVersion on a mismatch)
    partition state   the controller only   each state's version AND the controller
                                            epoch (ControllerFenced if a newer
                                            controller was elected, or none given)
    partition ISR     the controller, on a  the same: the state's version and the
                      leader's AlterPartition  controller epoch
    new topic         any broker            the name is free (TopicExists)
    ACLs              any broker            none: adding a binding present or removing
                                            one absent changes nothing (Kafka's rule)
    broker configs    any broker            none: one level's set replaced whole
    group configs     any broker            none: one group's set replaced whole

so a writer that read a stale state, or a controller that was paused past its session
and replaced, cannot overwrite what is newer. A write that fails changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sluice.cluster.image import MetadataImage
from sluice.cluster.model import BrokerInfo, PartitionState, TopicMetadata
from sluice.common.authorizer import AclBinding
from sluice.protocol.sasl import ScramCredential, ScramMechanism


class MetadataStoreError(Exception):
    """The store cannot be reached or refused an operation; the message says why."""


class StaleVersion(MetadataStoreError):
    """A conditional write lost: someone changed the record since it was read."""


class ControllerFenced(MetadataStoreError):
    """A controller write was refused: another broker was elected controller since
    (a newer controller epoch), so this one must stop acting as controller."""


class TopicExists(MetadataStoreError):
    pass


class NoSuchTopic(MetadataStoreError):
    pass


class BrokerIdInUse(MetadataStoreError):
    """Another live broker is registered with this node id."""


ImageListener = Callable[[MetadataImage], None]


@dataclass(frozen=True)
class PartitionChange:
    """A new state for one partition, written only if the stored state's version is
    still ``state.version`` (the version of the state the decision was made from)."""

    topic: str
    partition: int
    state: PartitionState


class MetadataStore(Protocol):
    def image(self) -> MetadataImage:
        """The latest metadata this store has seen (no I/O)."""
        ...

    def subscribe(self, listener: ImageListener) -> None:
        """Call ``listener`` with every new image, on any thread, in order."""
        ...

    async def start(self) -> None:
        """Open the store: create or read the cluster id and load the first image.
        Raises MetadataStoreError (with a message saying what to do) when it cannot."""
        ...

    async def register_broker(self, broker: BrokerInfo) -> BrokerInfo:
        """Announce this live broker (ephemeral: gone when its session ends); returns it
        with the epoch of this registration. Raises BrokerIdInUse when another live
        broker holds the node id."""
        ...

    async def elect_controller(self, node_id: int) -> int | None:
        """Try to become the controller: the new controller epoch if this broker won,
        None if another broker is controller."""
        ...

    async def create_topics(self, topics: Sequence[TopicMetadata]) -> list[TopicMetadata]:
        """Store new topics with their partitions (versions 0), all or none, in one
        write where the backend allows. Raises TopicExists if any name is taken."""
        ...

    async def delete_topic(self, name: str) -> None:
        """Raises NoSuchTopic."""
        ...

    async def set_topic_configs(
        self, name: str, configs: Mapping[str, str], expected_version: int
    ) -> TopicMetadata:
        """Replace the topic's config overrides if the topic record's version is still
        ``expected_version``. Raises StaleVersion or NoSuchTopic."""
        ...

    async def add_partitions(
        self, name: str, partitions: Mapping[int, PartitionState], expected_version: int
    ) -> TopicMetadata:
        """Add partitions (the next indexes) to a topic whose record's version is still
        ``expected_version``. Raises StaleVersion or NoSuchTopic."""
        ...

    async def update_partitions(
        self, changes: Sequence[PartitionChange], controller_epoch: int
    ) -> list[PartitionState]:
        """Write new partition states, all or none, each conditional on its version and
        all on ``controller_epoch`` still being the current one; return them with their
        new versions. Raises StaleVersion, ControllerFenced or NoSuchTopic. Only the
        controller writes partition states (its own decisions, ElectLeaders and
        reassignments, and the leaders' ISR changes on AlterPartition), so there is no
        unfenced write: a negative epoch (no controller) is refused with ControllerFenced."""
        ...

    async def allocate_producer_id_block(self, block_size: int) -> int:
        """Reserve ``block_size`` producer ids durably; return the first. Never reused,
        whichever broker asks."""
        ...

    async def group_configs(self, group_id: str) -> dict[str, str]:
        """A group's config overrides (config resource GROUP); empty when none. As the
        image has them (:meth:`MetadataImage.group_overrides`, which requests read)."""
        ...

    async def groups_with_configs(self) -> list[str]:
        """Every group that has config overrides, as the image has them."""
        ...

    async def set_group_configs(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Replace a group's config overrides durably (already checked); empty removes
        them. Every store's image shows them (:attr:`MetadataImage.group_configs`), the
        caller's next image included."""
        ...

    async def set_broker_configs(self, resource_name: str, configs: Mapping[str, str]) -> None:
        """Replace the dynamic broker configs of one level durably (``""`` the cluster
        default, ``"<node id>"`` one broker; already checked); empty removes the level.
        Every store's image shows them (:attr:`MetadataImage.broker_configs`), the
        caller's next image included."""
        ...

    # -- client quotas (KIP-13/55: entity key -> {quota type: value}) -------------------

    async def client_quotas(self) -> dict[str, dict[str, float]]:
        """Every stored client quota: entity key (``user=alice,client-id=app``, see
        :class:`sluice.common.quotas.QuotaEntity`) to its values; empty when none."""
        ...

    async def set_client_quotas(self, entity_key: str, quotas: Mapping[str, float]) -> None:
        """Replace one entity's quota values durably; empty removes the entity."""

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Add ACL bindings durably (those already stored stay as they are); the image
        the caller sees next holds them."""
        ...

    async def delete_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Remove ACL bindings durably (those not stored are ignored); the image the
        caller sees next lacks them."""
        ...

    async def scram_credentials(self, user: str) -> dict[ScramMechanism, ScramCredential]:
        """A user's SCRAM credentials (salt, keys, iterations; never a password), by
        mechanism; empty for an unknown user. Read from the store itself, not the image,
        so a credential changed on another broker counts at once."""
        ...

    async def scram_users(self) -> list[str]:
        """Every user with at least one SCRAM credential."""
        ...

    async def set_scram_credential(
        self, user: str, mechanism: ScramMechanism, credential: ScramCredential
    ) -> None:
        """Store (or replace) a user's credential for one mechanism durably."""
        ...

    async def delete_scram_credential(self, user: str, mechanism: ScramMechanism) -> bool:
        """Remove a user's credential for one mechanism; False if there was none."""
        ...

    async def close(self) -> None:
        """Leave the cluster (this broker's registration ends) and release the store."""
        ...
