"""The registry shard on the real coordinator runtime, its parses run in worker threads
as the broker runs them: concurrent registrations take distinct ids and versions, a
failed append answers 50001 and changes nothing, a failed append whose records reached
the log is read back before the next write, and a new leader loading the log answers
the same."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from coordinator.coordinator_helpers import STEP_TIMEOUT_S, MemoryCoordinatorLog, run, until_done

from sluice.common import errors
from sluice.coordinator.api import Effect, Record, RequestToken, Task
from sluice.coordinator.runtime import CoordinatorRuntime
from sluice.registry import checks
from sluice.registry.api import Answer, Call
from sluice.registry.shard import RegistryShard

REGISTRATIONS = 12
RETRY_INTERVAL_S = 0.01
"""Between two calls while the shard is reloading (as the broker's calls retry)."""


def proto(n: int) -> str:
    return f'syntax = "proto3";\npackage shop;\nmessage Order{n} {{ string id = 1; }}\n'


async def run_check(partition: int, task: Task) -> object:
    assert isinstance(task.work, checks.CheckWork)
    return await asyncio.to_thread(checks.run, task.work)


def calling(call: Call) -> Callable[[RegistryShard, int, RequestToken], list[Effect]]:
    return lambda shard, now_ms, token: shard.handle(now_ms, token, call)


async def ask(
    runtime: CoordinatorRuntime[RegistryShard], method: str, path: str, body: object = None
) -> Answer:
    call = Call(method, tuple(path.split("/")), {}, body)
    answer = await until_done(runtime.call(0, calling(call)))
    assert isinstance(answer, Answer)
    return answer


async def ask_until_loaded(
    runtime: CoordinatorRuntime[RegistryShard], method: str, path: str, body: object = None
) -> Answer:
    """:func:`ask`, again while the partition is (re)loading, as the broker asks."""
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while True:
        try:
            return await ask(runtime, method, path, body)
        except errors.KafkaError as e:
            reloading = (
                errors.ErrorCode.coordinator_load_in_progress,
                errors.ErrorCode.not_coordinator,
            )
            if e.code not in reloading or time.monotonic() > deadline:
                raise
        await asyncio.sleep(RETRY_INTERVAL_S)


class LateCommitLog(MemoryCoordinatorLog):
    """A log whose appends can fail after their records are in it: a write that timed
    out waiting for its replicas, committed once they catch up."""

    def __init__(self) -> None:
        super().__init__(partition_count=1, topic="_schemas")
        self.time_out_after_writing = False

    async def append(
        self,
        partition: int,
        records: Sequence[Record],
        transaction: tuple[int, int] | None = None,
    ) -> None:
        await super().append(partition, records, transaction)
        if self.time_out_after_writing:
            raise errors.RequestTimedOut("not replicated in time")


def test_a_failed_write_that_reached_the_log_is_read_back_before_the_next_one() -> None:
    async def scenario() -> None:
        log = LateCommitLog()
        register = {"schemaType": "PROTOBUF"}
        async with CoordinatorRuntime(log, RegistryShard, run_task=run_check) as runtime:
            await ask(runtime, "PUT", "config", {"compatibility": "NONE"})
            first = await ask(
                runtime, "POST", "subjects/a/versions", {**register, "schema": proto(1)}
            )
            assert first.body["id"] == 1
            log.time_out_after_writing = True
            failed = await ask(
                runtime, "POST", "subjects/a/versions", {**register, "schema": proto(2)}
            )
            assert (failed.status, failed.body["error_code"]) == (500, 50001)
            log.time_out_after_writing = False
            other = await ask_until_loaded(
                runtime, "POST", "subjects/b/versions", {**register, "schema": proto(3)}
            )
            assert (other.status, other.body["id"]) == (200, 3), "id 2 is in the log already"
            assert (await ask(runtime, "GET", "subjects/a/versions")).body == [1, 2]
        async with CoordinatorRuntime(log, RegistryShard, run_task=run_check) as leader:
            shard = leader.shard(0)
            assert shard is not None
            shard.state.check_invariants()
            holders = {i: len(h) for i, h in shard.state.versions_by_id.items()}
            assert holders == {1: 1, 2: 1, 3: 1}, "one schema per id"

    run(scenario)


def test_concurrent_registrations_on_the_runtime_and_a_new_leader_answers_the_same() -> None:
    async def scenario() -> None:
        log = MemoryCoordinatorLog(partition_count=1, topic="_schemas")
        async with CoordinatorRuntime(log, RegistryShard, run_task=run_check) as runtime:
            await ask(runtime, "PUT", "config", {"compatibility": "NONE"})
            answers = await asyncio.gather(
                *(
                    ask(
                        runtime,
                        "POST",
                        f"subjects/s{n % 3}/versions",
                        {"schema": proto(n), "schemaType": "PROTOBUF"},
                    )
                    for n in range(REGISTRATIONS)
                )
            )
            assert all(answer.status == 200 for answer in answers), answers
            ids = sorted(answer.body["id"] for answer in answers)
            assert ids == list(range(1, REGISTRATIONS + 1))
            per_subject = [
                (await ask(runtime, "GET", f"subjects/s{k}/versions")).body for k in range(3)
            ]
            assert per_subject == [list(range(1, REGISTRATIONS // 3 + 1))] * 3
            log.fail_with = errors.NotEnoughReplicas("one replica left")
            failed = await ask(
                runtime,
                "POST",
                "subjects/s0/versions",
                {"schema": proto(99), "schemaType": "PROTOBUF"},
            )
            assert (failed.status, failed.body["error_code"]) == (500, 50001)
            log.fail_with = None
            before = [await ask(runtime, "GET", f"schemas/ids/{i}") for i in ids]
        async with CoordinatorRuntime(log, RegistryShard, run_task=run_check) as leader:
            after = [await ask(leader, "GET", f"schemas/ids/{i}") for i in ids]
            assert after == before
            again = await ask(
                leader,
                "POST",
                "subjects/s0/versions",
                {"schema": proto(99), "schemaType": "PROTOBUF"},
            )
            assert again.body["id"] == REGISTRATIONS + 1

    run(scenario)
