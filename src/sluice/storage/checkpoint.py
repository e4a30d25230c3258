"""Checkpoint files: small files that are replaced whole, atomically.

A checkpoint is never edited in place. The new contents go to ``<name>.tmp``, which is
fsynced, renamed over ``<name>``, and then the directory is fsynced so the rename itself
survives a crash::

    write <name>.tmp ─► fsync(<name>.tmp) ─► rename(<name>.tmp, <name>) ─► fsync(dir)

A crash at any step leaves either the old file or the new one, never a mix; a stray
``.tmp`` is deleted when the partition is opened. (Producer-state snapshots skip the two
fsyncs: they carry a CRC, and a lost or torn one only means replaying more of the log.)

Two text formats live here (producer-state snapshots are binary, see
``producer_state``). Both start with a version line, are ASCII, one item a line:

``partition.checkpoint`` (named offsets of one partition)::

    0                          ← format version
    log_start_offset 1200
    high_watermark 5310
    recovery_point 5310

``leader-epoch-checkpoint`` (Kafka's own layout: version, count, then pairs)::

    0                          ← format version
    2                          ← number of entries
    0 0                        ← leader epoch, its start offset
    3 1500
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from sluice.common import errors

TEMP_SUFFIX = ".tmp"
"""Suffix of a checkpoint being written; such files are garbage after a crash."""

CHECKPOINT_BYTES_MAX = 16 * 1024 * 1024
"""A text checkpoint larger than this is not one of ours (a leader-epoch entry is ~25
bytes, so this allows hundreds of thousands of epochs); refused instead of read."""

CHECKPOINT_VERSION = 0


def fsync_directory(directory: Path) -> None:
    """Make renames, creations and deletions inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    """pwrite ``data`` at ``position``, looping over short writes."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def write_file_atomically(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file.

    ``durable=False`` skips both fsyncs: a process crash still leaves old or new, but
    after a power loss the new file may be empty or partly written. Only for files that
    check themselves (a CRC) and may be lost (producer-state snapshots)."""
    temp = path.with_name(path.name + TEMP_SUFFIX)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data, 0)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    if durable:
        fsync_directory(path.parent)


def _read_checkpoint_lines(path: Path) -> list[str] | None:
    """The lines of a text checkpoint after its version line; None when it is missing.
    Raises KafkaStorageError when it is not a checkpoint of a version we read."""
    try:
        with path.open("rb") as file:
            data = file.read(CHECKPOINT_BYTES_MAX + 1)
    except FileNotFoundError:
        return None
    if len(data) > CHECKPOINT_BYTES_MAX:
        raise errors.KafkaStorageError(f"{path}: larger than {CHECKPOINT_BYTES_MAX} bytes")
    try:
        lines = data.decode("ascii").splitlines()
    except UnicodeDecodeError:
        raise errors.KafkaStorageError(f"{path}: not ASCII text") from None
    if not lines or lines[0].strip() != str(CHECKPOINT_VERSION):
        raise errors.KafkaStorageError(f"{path}: unknown version line {lines[:1]!r}")
    return lines[1:]


def encode_offsets_checkpoint(offsets: Mapping[str, int]) -> bytes:
    """Named offsets, one ``name value`` a line, after the version line."""
    lines = [str(CHECKPOINT_VERSION)]
    for name, value in offsets.items():
        assert name.isidentifier(), f"checkpoint key {name!r} must be one word"
        lines.append(f"{name} {value}")
    return ("\n".join(lines) + "\n").encode("ascii")


def write_offsets_checkpoint(path: Path, offsets: Mapping[str, int]) -> None:
    """Write named offsets, one ``name value`` a line."""
    write_file_atomically(path, encode_offsets_checkpoint(offsets))


def read_offsets_checkpoint(path: Path) -> dict[str, int] | None:
    """Named offsets from ``path``; None when missing. Raises KafkaStorageError when
    malformed."""
    lines = _read_checkpoint_lines(path)
    if lines is None:
        return None
    offsets: dict[str, int] = {}
    for line in lines:
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise errors.KafkaStorageError(f"{path}: malformed line {line!r}")
        try:
            offsets[parts[0]] = int(parts[1])
        except ValueError:
            raise errors.KafkaStorageError(f"{path}: malformed line {line!r}") from None
    return offsets


def encode_pairs_checkpoint(pairs: Sequence[tuple[int, int]]) -> bytes:
    """Kafka's ``version / count / "a b" lines`` layout."""
    lines = [str(CHECKPOINT_VERSION), str(len(pairs))]
    lines.extend(f"{first} {second}" for first, second in pairs)
    return ("\n".join(lines) + "\n").encode("ascii")


def write_pairs_checkpoint(path: Path, pairs: Sequence[tuple[int, int]]) -> None:
    """Write Kafka's ``version / count / "a b" lines`` layout."""
    write_file_atomically(path, encode_pairs_checkpoint(pairs))


def read_pairs_checkpoint(path: Path) -> list[tuple[int, int]] | None:
    """Pairs from a ``version / count / pairs`` file; None when missing. Raises
    KafkaStorageError when malformed (the count must match the lines that follow)."""
    lines = _read_checkpoint_lines(path)
    if lines is None:
        return None
    lines = [line for line in lines if line.strip()]
    try:
        count = int(lines[0])
        pairs = []
        for line in lines[1:]:
            first, second = line.split()
            pairs.append((int(first), int(second)))
    except (ValueError, IndexError):
        raise errors.KafkaStorageError(f"{path}: malformed pairs checkpoint") from None
    if count != len(pairs):
        raise errors.KafkaStorageError(
            f"{path}: says {count} entries but holds {len(pairs)}; written partially?"
        )
    return pairs


PARTITION_METADATA_NAME = "partition.metadata"
"""The file in a partition directory naming the topic's id (Kafka's format, version 0)::

    version: 0
    topic_id: <the id in URL-safe base64, no padding>
"""


def write_partition_topic_id(directory: Path, topic_id: uuid.UUID) -> None:
    text = (
        f"version: 0\ntopic_id: {base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip('=')}\n"
    )
    write_file_atomically(directory / PARTITION_METADATA_NAME, text.encode())


def read_partition_topic_id(directory: Path) -> uuid.UUID | None:
    """The topic id a partition directory was made for; None when the file is missing
    (a directory made before the file existed, or no directory). Raises
    KafkaStorageError when it cannot be read."""
    path = directory / PARTITION_METADATA_NAME
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise errors.KafkaStorageError(f"cannot read {path}: {e}") from e
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    try:
        if fields.get("version") != "0":
            raise ValueError(f"version {fields.get('version')!r}")
        encoded = fields["topic_id"]
        return uuid.UUID(bytes=base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    except (KeyError, ValueError) as e:
        raise errors.KafkaStorageError(f"{path} is malformed: {e}") from e
