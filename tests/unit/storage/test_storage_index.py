"""The two sparse indexes on their own: lookups, truncation, trimming, and the checks
that decide when an index file must be rebuilt."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.storage.index import OffsetIndex, TimeIndex

BASE = 1000


def offset_index(tmp_path: Path, entries: int = 0, capacity_bytes: int = 4096) -> OffsetIndex:
    index = OffsetIndex(tmp_path / "a.index", BASE, capacity_bytes, writable=True)
    for i in range(1, entries + 1):
        index.append(BASE + 10 * i, 100 * i)
    return index


def test_offset_lookups(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=5)  # (1010, 100) … (1050, 500)
    assert index.lookup(BASE) == (BASE, 0)
    assert index.lookup(1009) == (BASE, 0)
    assert index.lookup(1010) == (1010, 100)
    assert index.lookup(1039) == (1030, 300)
    assert index.lookup(10**9) == (1050, 500)
    assert index.lookup_by_position(99) == (BASE, 0)
    assert index.lookup_by_position(250) == (1020, 200)
    assert index.lookup_by_position(500) == (1050, 500)
    assert index.last_entry() == (1050, 500)


def test_offset_index_truncation_and_trim(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=5)
    # While writable the entries live in memory: no file, no descriptor, no mapping.
    assert not (tmp_path / "a.index").exists()
    index.truncate_from(1030)
    assert index.entries == 2 and index.last_entry() == (1020, 200)
    index.append(1025, 250)
    index.make_read_only()
    assert (tmp_path / "a.index").stat().st_size == 3 * 8
    assert index.lookup(1026) == (1025, 250)
    index.make_writable(4096)
    index.append(1030, 300)
    index.close()
    reopened = OffsetIndex(tmp_path / "a.index", BASE, 4096, writable=False)
    assert reopened.entries == 4 and reopened.check(log_size_bytes=301) is None
    reopened.close()


def test_offset_index_fills_up(tmp_path: Path) -> None:
    index = offset_index(tmp_path, entries=0, capacity_bytes=40)
    for i in range(1, 6):
        assert not index.is_full
        index.append(BASE + i, i)
    assert index.is_full


@pytest.mark.parametrize(
    ("data", "log_size", "problem"),
    [
        (b"\x00" * 7, 1000, "multiple"),
        (b"\x00" * 16, 1000, "position 0"),
        (bytes.fromhex("0000000a00000064 00000005000000c8"), 1000, "not after the first"),
        (bytes.fromhex("0000000a00000064 00000014000000c8"), 200, "beyond the log"),
        (bytes.fromhex("0000000a00000064 00000014000000c8"), 201, None),
    ],
)
def test_offset_index_check(
    tmp_path: Path, data: bytes, log_size: int, problem: str | None
) -> None:
    (tmp_path / "a.index").write_bytes(data)
    index = OffsetIndex(tmp_path / "a.index", BASE, 4096, writable=False)
    found = index.check(log_size)
    assert (found is None) if problem is None else (problem in (found or ""))
    index.close()


def test_time_index(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "a.timeindex", BASE, 4096, writable=True)
    index.maybe_append(500, 1010)
    index.maybe_append(500, 1020)  # not newer: skipped
    index.maybe_append(-1, 1025)  # no timestamp: skipped
    index.maybe_append(900, 1030)
    index.maybe_append(1200, 1040)
    assert index.entries == 3
    assert index.lookup_before(500) is None
    assert index.lookup_before(501) == 1010
    assert index.lookup_before(900) == 1010
    assert index.lookup_before(10**12) == 1040
    index.truncate_from(1030)
    assert index.last_entry() == (500, 1010)
    assert index.check() is None
    index.close()
    (tmp_path / "b.timeindex").write_bytes(bytes(24))
    zeros = TimeIndex(tmp_path / "b.timeindex", BASE, 4096, writable=False)
    assert zeros.check() is not None
    zeros.close()
