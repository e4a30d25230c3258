"""The sampler's history on disk, so charts and "down since" survive a console restart.

One JSON file, ``console-history.json``, in the directory the console is told
(``sluice console --history-dir``; a broker serving the console uses its data
directory)::

    {"format": 1, "saved_s": 1767225600.0, "cluster_id": "…",
     "topic_rates": {"orders": [[t, records_per_s], …]},
     "group_lag":   {"billing": [[t, total_lag], …]},
     "brokers":     [{"node_id": 1, "address": "h:9092", "first_seen_s": t,
                      "last_seen_s": t, "missing_since_s": t or null}, …]}

Times are seconds since the epoch. It is written whole every ``SAVE_INTERVAL_S`` and
when the console stops: to a temporary file, fsynced, then renamed over the old one, so
a crash leaves the old file or the new one, never half of one. Its size is bounded by
``HISTORY_FILE_BYTES_MAX``: series are thinned (every other point dropped) until the
file fits. A file that is too large, not JSON, of another format or of another cluster
is not loaded: it is renamed to ``console-history.json.bad`` (so nothing is lost
silently), logged, and the console starts with an empty history.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FILE_NAME = "console-history.json"
BAD_SUFFIX = ".bad"
FORMAT = 1
HISTORY_FILE_BYTES_MAX = 8 * 1024 * 1024
"""Largest history file written or read: 8 MiB (about 200 topics' thirty minutes)."""
SAVE_INTERVAL_S = 30.0
"""How often the history is written while the console runs (and once when it stops)."""
THINNING_ROUNDS_MAX = 16
"""Times the series are halved to fit ``HISTORY_FILE_BYTES_MAX`` (2^16 points: plenty)."""

Points = list[tuple[float, float]]


class HistoryFileError(ValueError):
    """A history file that cannot be used (its message says why)."""


@dataclass(frozen=True, slots=True)
class BrokerSighting:
    """A broker the sampler has seen listed: when first and last, and since when it has
    been missing (None while listed)."""

    node_id: int
    address: str
    first_seen_s: float
    last_seen_s: float
    missing_since_s: float | None = None


@dataclass(slots=True)
class SavedHistory:
    """What survives a restart."""

    cluster_id: str | None = None
    topic_rates: dict[str, Points] = field(default_factory=dict)
    group_lag: dict[str, Points] = field(default_factory=dict)
    brokers: dict[int, BrokerSighting] = field(default_factory=dict)


def encode(history: SavedHistory, saved_s: float) -> bytes:
    """The file's bytes: thinned until they fit ``HISTORY_FILE_BYTES_MAX``."""
    topic_rates, group_lag = history.topic_rates, history.group_lag
    for _ in range(THINNING_ROUNDS_MAX + 1):
        document = {
            "format": FORMAT,
            "saved_s": saved_s,
            "cluster_id": history.cluster_id,
            "topic_rates": {name: [list(p) for p in s] for name, s in topic_rates.items()},
            "group_lag": {name: [list(p) for p in s] for name, s in group_lag.items()},
            "brokers": [
                {
                    "node_id": b.node_id,
                    "address": b.address,
                    "first_seen_s": b.first_seen_s,
                    "last_seen_s": b.last_seen_s,
                    "missing_since_s": b.missing_since_s,
                }
                for b in history.brokers.values()
            ],
        }
        data = json.dumps(document, separators=(",", ":")).encode()
        if len(data) <= HISTORY_FILE_BYTES_MAX:
            return data
        topic_rates = {name: _thinned(s) for name, s in topic_rates.items()}
        group_lag = {name: _thinned(s) for name, s in group_lag.items()}
    raise HistoryFileError(f"history does not fit {HISTORY_FILE_BYTES_MAX} bytes even thinned")


def _thinned(points: Sequence[tuple[float, float]]) -> Points:
    """Every other point, the newest kept."""
    return list(points[(len(points) - 1) % 2 :: 2])


def decode(data: bytes, cluster_id: str | None) -> SavedHistory:
    """The history in ``data``; raises :class:`HistoryFileError` for a file that is not
    one, or is of another cluster than ``cluster_id`` (when both name one)."""
    if len(data) > HISTORY_FILE_BYTES_MAX:
        raise HistoryFileError(f"{len(data)} bytes, more than {HISTORY_FILE_BYTES_MAX}")
    try:
        document = json.loads(data)
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise HistoryFileError(f"not a history of format {FORMAT}")
        saved_cluster = document.get("cluster_id")
        if saved_cluster is not None and cluster_id is not None and saved_cluster != cluster_id:
            raise HistoryFileError(f"the history of cluster {saved_cluster}, not {cluster_id}")
        return SavedHistory(
            cluster_id=saved_cluster,
            topic_rates=_series(document["topic_rates"]),
            group_lag=_series(document["group_lag"]),
            brokers={
                int(b["node_id"]): BrokerSighting(
                    int(b["node_id"]),
                    str(b["address"]),
                    float(b["first_seen_s"]),
                    float(b["last_seen_s"]),
                    None if b["missing_since_s"] is None else float(b["missing_since_s"]),
                )
                for b in document["brokers"]
            },
        )
    except HistoryFileError:
        raise
    except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
        raise HistoryFileError(f"malformed: {type(e).__name__}: {e}") from None


def _series(found: Any) -> dict[str, Points]:
    if not isinstance(found, Mapping):
        raise HistoryFileError("a series map is not an object")
    return {str(name): [(float(t), float(v)) for t, v in points] for name, points in found.items()}


class HistoryFile:
    """The history file in ``directory`` (created on the first save)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / FILE_NAME

    def load(self, cluster_id: str | None) -> SavedHistory | None:
        """The saved history, or None when there is none or it cannot be used (then it
        is moved aside to ``….bad`` and the reason logged). Blocking: call off the loop."""
        try:
            with self.path.open("rb") as file:
                data = file.read(HISTORY_FILE_BYTES_MAX + 1)
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("console history %s not read: %s", self.path, e)
            return None
        try:
            return decode(data, cluster_id)
        except HistoryFileError as e:
            bad = self.path.with_name(FILE_NAME + BAD_SUFFIX)
            log.warning("console history %s not used (%s); moved to %s", self.path, e, bad)
            try:
                os.replace(self.path, bad)
            except OSError as moving:
                log.warning("console history %s not moved aside: %s", self.path, moving)
            return None

    def save(self, history: SavedHistory, saved_s: float) -> None:
        """Write the history whole (temporary file, fsync, rename, fsync of the
        directory). Blocking: call off the loop."""
        data = encode(history, saved_s)
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(FILE_NAME + ".tmp")
        with temporary.open("wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
