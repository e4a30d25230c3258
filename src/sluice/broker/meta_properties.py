"""``meta.properties``: which node and which cluster a data directory belongs to.

Kafka writes this file into every log directory and refuses to start when the broker's
``node.id`` or the cluster's id differ from the ones stored there; Sluice does the same.
Without the check a broker started with another ``--node-id`` on an existing directory
would find every partition led by a node that no longer exists and answer
LEADER_NOT_AVAILABLE for all of them. The format is Kafka's (KRaft, version 1)::

    # written by sluice; do not edit
    version=1
    node.id=0
    cluster.id=Yk3zP1y9QZ2s8bT0mXq4Lw

A directory written before this file existed has none: the first start writes it from
the broker's settings, so old data directories keep starting.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sluice.storage.checkpoint import write_file_atomically

FILE_NAME = "meta.properties"
VERSION = 1


class MetaPropertiesError(Exception):
    """The data directory belongs to another node or cluster, or its meta.properties
    cannot be read; the message says what to do."""


@dataclass(frozen=True, slots=True)
class MetaProperties:
    node_id: int
    cluster_id: str


def read(data_dir: Path) -> MetaProperties | None:
    """The stored identity, or None for a directory that has no meta.properties yet."""
    path = data_dir / FILE_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise MetaPropertiesError(f"cannot read {path}: {e}") from None
    values: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "!")):
            continue
        name, separator, value = stripped.partition("=")
        if separator:
            values[name.strip()] = value.strip()
    fix = "restore the file, or delete it to have it written again from --node-id"
    for field in ("version", "node.id", "cluster.id"):
        if field not in values:
            raise MetaPropertiesError(f"{path} has no {field} line: {fix}")
    if values["version"] != str(VERSION):
        raise MetaPropertiesError(
            f"{path} has version={values['version']}, this broker reads version={VERSION}"
        )
    try:
        node_id = int(values["node.id"])
    except ValueError:
        raise MetaPropertiesError(
            f"{path} has node.id={values['node.id']}, not a number: {fix}"
        ) from None
    return MetaProperties(node_id, values["cluster.id"])


def write(data_dir: Path, meta: MetaProperties) -> None:
    """Write the file atomically (temporary file, fsync, rename)."""
    text = (
        "# written by sluice; do not edit\n"
        f"version={VERSION}\nnode.id={meta.node_id}\ncluster.id={meta.cluster_id}\n"
    )
    write_file_atomically(data_dir / FILE_NAME, text.encode())


def check_node_id(data_dir: Path, stored: MetaProperties, node_id: int) -> None:
    """Refuse a broker whose node id is not the one the directory was written by."""
    if stored.node_id != node_id:
        raise MetaPropertiesError(
            f"data directory {data_dir} belongs to node {stored.node_id} "
            f"({FILE_NAME} has node.id={stored.node_id}) but this broker was given "
            f"node id {node_id}: start it with --node-id {stored.node_id}, "
            f"or give node {node_id} another --data-dir"
        )


def check_cluster_id(data_dir: Path, stored: MetaProperties, cluster_id: str) -> None:
    """Refuse a data directory written for another cluster."""
    if stored.cluster_id != cluster_id:
        raise MetaPropertiesError(
            f"data directory {data_dir} belongs to cluster {stored.cluster_id} "
            f"({FILE_NAME}) but the metadata store is of cluster {cluster_id}: point "
            "--data-dir at this cluster's directory, or remove the directory's "
            f"{FILE_NAME} if it really belongs here"
        )
