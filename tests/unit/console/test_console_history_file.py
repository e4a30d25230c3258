"""The console's history on disk: what is saved is what is loaded, the file never grows
past its bound, and a file that cannot be used is moved aside (never silently dropped)
while the console starts empty."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluice.console import history_file
from sluice.console.history_file import (
    BAD_SUFFIX,
    FILE_NAME,
    HISTORY_FILE_BYTES_MAX,
    BrokerSighting,
    HistoryFile,
    HistoryFileError,
    SavedHistory,
    decode,
    encode,
)


def _history() -> SavedHistory:
    return SavedHistory(
        cluster_id="c1",
        topic_rates={"orders": [(100.0, 1.5), (102.0, 3.0)]},
        group_lag={"billing": [(100.0, 7.0)]},
        brokers={
            0: BrokerSighting(0, "h:9092", 90.0, 102.0),
            1: BrokerSighting(1, "h:9093", 90.0, 95.0, missing_since_s=96.0),
        },
    )


def test_saved_history_loads_back_the_same(tmp_path: Path) -> None:
    file = HistoryFile(tmp_path / "history")
    file.save(_history(), saved_s=103.0)
    assert file.load("c1") == _history()
    assert not list((tmp_path / "history").glob("*.tmp"))


def test_no_file_is_no_history(tmp_path: Path) -> None:
    assert HistoryFile(tmp_path).load("c1") is None


@pytest.mark.parametrize(
    "content",
    [b"{not json", b'{"format": 99}', b"[]", b'{"format": 1, "cluster_id": null}'],
)
def test_an_unusable_file_is_moved_aside_and_not_loaded(tmp_path: Path, content: bytes) -> None:
    (tmp_path / FILE_NAME).write_bytes(content)
    assert HistoryFile(tmp_path).load("c1") is None
    assert (tmp_path / (FILE_NAME + BAD_SUFFIX)).read_bytes() == content
    assert not (tmp_path / FILE_NAME).exists()


def test_another_clusters_history_is_not_loaded(tmp_path: Path) -> None:
    file = HistoryFile(tmp_path)
    file.save(_history(), saved_s=103.0)
    with pytest.raises(HistoryFileError, match="cluster c1, not c2"):
        decode((tmp_path / FILE_NAME).read_bytes(), "c2")
    assert file.load("c2") is None
    assert (tmp_path / (FILE_NAME + BAD_SUFFIX)).exists()


def test_a_file_over_the_bound_is_refused(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_bytes(b" " * (HISTORY_FILE_BYTES_MAX + 1))
    assert HistoryFile(tmp_path).load("c1") is None


def test_a_history_too_large_is_thinned_to_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    points = [(float(t), 1.0) for t in range(2000)]
    history = SavedHistory("c1", topic_rates={f"t{i}": list(points) for i in range(5)})
    whole = encode(history, saved_s=1.0)
    monkeypatch.setattr(history_file, "HISTORY_FILE_BYTES_MAX", len(whole) // 3)
    thinned = encode(history, saved_s=1.0)
    assert len(thinned) <= len(whole) // 3
    kept = json.loads(thinned)["topic_rates"]["t0"]
    assert kept[-1] == [1999.0, 1.0]  # the newest point is kept
    assert 2000 / 8 <= len(kept) <= 2000 / 4
