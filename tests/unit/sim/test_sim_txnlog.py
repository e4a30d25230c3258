"""Transactions in a simulated log: open and completed transactions, the last stable
offset (Kafka's: an unstable transaction holds it back until its marker is below the
high watermark), the aborted transactions a fetch is told of, what a consumer sees of
them, and a truncated log looked at again."""

from __future__ import annotations

from sluice.sim.consumers import visible
from sluice.sim.disk import Control, SimLog, SimRecord
from sluice.sim.txnlog import aborted_between, last_stable_offset, transactions


def _data(producer_id: int, value: str, *, epoch: int = 0) -> SimRecord:
    return SimRecord(1, producer_id, 0, value, epoch, True)


def _marker(producer_id: int, control: Control, *, epoch: int = 1) -> SimRecord:
    return SimRecord(1, producer_id, -1, "", epoch, True, control)


def test_an_open_transaction_holds_the_last_stable_offset_back() -> None:
    log = SimLog("t-0")
    log.append([SimRecord(1, 5, 0, "plain"), _data(7, "a"), _data(8, "b"), _data(7, "c")])
    log.update_high_watermark(4)
    assert transactions(log).open == {7: 1, 8: 2}
    assert last_stable_offset(log) == 1
    log.append([_marker(7, "commit")])
    log.update_high_watermark(5)
    assert last_stable_offset(log) == 2  # producer 8's is still open
    log.append([_marker(8, "abort")])
    assert last_stable_offset(log) == 2, "its marker is not below the high watermark yet"
    log.update_high_watermark(6)
    assert last_stable_offset(log) == 6
    assert transactions(log).producer_epochs == {5: 0, 7: 1, 8: 1}


def test_a_fetch_is_told_of_the_aborted_transactions_it_overlaps() -> None:
    log = SimLog("t-0")
    log.append([_data(7, "a"), _data(8, "b"), _marker(7, "abort"), _marker(8, "commit")])
    log.append([_data(9, "c"), _marker(9, "abort")])
    log.update_high_watermark(6)
    assert [t.producer_id for t in aborted_between(log, 0, 6)] == [7, 9]
    assert [t.producer_id for t in aborted_between(log, 3, 6)] == [9]
    assert aborted_between(log, 0, 1)[0].last_offset == 2
    aborted = aborted_between(log, 0, 6)
    records = log.read(0, 10)
    assert visible(0, records, aborted, read_committed=True) == [(1, "b")]
    assert visible(0, records, aborted, read_committed=False) == [(0, "a"), (1, "b"), (4, "c")]


def test_a_truncated_log_is_looked_at_again() -> None:
    log = SimLog("t-0")
    log.append([_data(7, "a"), _marker(7, "abort")])
    assert transactions(log).completed and not transactions(log).open
    log.truncate_to(1)
    assert transactions(log).open == {7: 0} and not transactions(log).completed
    log.append([_marker(7, "commit")])
    assert transactions(log).completed[0].committed
